// Our models, as the paper configs build them, exported in the official layout (`moco_ckpt export
// --format moco`'s dict, ckpt/official_checkpoint.h) hold exactly the state_dict keys, shapes and dtypes
// of the official models (tests/fixtures/official_layout/*.tsv, from facebookresearch/moco and moco-v3's
// own builders), both ways, no key excused; every optimizer state sits at the index of its parameter in
// the official model.parameters(), and the parameters the official optimizer updates are those that
// have state.
#include "app/methods.h"
#include "app/official_export.h"
#include "ckpt/official_checkpoint.h"
#include "constant_table.h"
#include "dist/process_group.h"
#include "moco_v2/moco.h"
#include "moco_v2/v2_settings.h"
#include "moco_v2/moco_v2.h"
#include "moco_v3/moco_v3.h"
#include "moco_v3/v3_model.h"
#include "moco_v3/v3_room.h"
#include "moco_v3/v3_settings.h"
#include "optim/optimizer.h"
#include "run/config.h"
#include "run/setup.h"
#include "thrown_message.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

using namespace moco;

namespace {

struct OfficialRow {
  std::vector<int64_t> shape;
  std::string dtype;
  int64_t parameter = -1;  // index in model.parameters(); -1: a buffer
};

// tests/fixtures/official_layout/NAME.tsv: key -> shape, dtype, parameter index.
std::map<std::string, OfficialRow> official_rows(const std::string& name) {
  const std::string path = std::string(MOCO_TEST_DATA_DIR) + "/official_layout/" + name + ".tsv";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::map<std::string, OfficialRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, shape, kind;
    OfficialRow row;
    std::getline(fields, key, '\t');
    std::getline(fields, shape, '\t');
    std::getline(fields, row.dtype, '\t');
    std::getline(fields, kind, '\t');
    std::istringstream dims(shape);
    for (std::string d; std::getline(dims, d, ',');) row.shape.push_back(std::stoll(d));
    if (kind.rfind("param ", 0) == 0) row.parameter = std::stoll(kind.substr(6));
    rows[key] = row;
  }
  return rows;
}

// Random values in every floating tensor of `tensors` that is no optimizer state, so that no two
// parameters of one shape are equal; then each optimizer state a copy of its parameter (our names:
// optimizer/<state>/<optimizer_group><key> is the state of <key>), so that the exported state shows
// which parameter it belongs to.
void mark_states_with_their_parameters(const ckpt::NamedTensors& tensors, const std::string& optimizer_group) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name(tensors.begin(), tensors.end());
  for (auto& [name, tensor] : by_name)
    if (name.rfind("optimizer/", 0) != 0 && tensor.is_floating_point()) tensor.normal_();
  for (auto& [name, tensor] : by_name) {
    if (name.rfind("optimizer/", 0) != 0 || name == "optimizer/steps") continue;
    const auto rest = name.substr(name.find('/', 10) + 1);
    tensor.copy_(by_name.at(optimizer_group + rest));
  }
}

ckpt::NamedTensors named(const std::vector<ckpt::StateEntry>& entries) {
  ckpt::NamedTensors tensors;
  for (const auto& e : entries) tensors.emplace_back(e.name, e.tensor);
  return tensors;
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

// Names, shapes and dtypes of the export's state_dict against the official rows, both ways: the
// differences, one per line (empty: none).
std::vector<std::string> state_dict_differences(const c10::impl::GenericDict& state_dict,
                                                const std::map<std::string, OfficialRow>& rows) {
  std::vector<std::string> differences;
  std::set<std::string> seen;
  for (const auto& item : state_dict) {
    const auto key = item.key().toStringRef();
    const auto tensor = item.value().toTensor();
    seen.insert(key);
    const auto row = rows.find(key);
    if (row == rows.end()) {
      differences.push_back("not in the official model: " + key);
      continue;
    }
    if (tensor.sizes().vec() != row->second.shape || ckpt::dtype_name(tensor.scalar_type()) != row->second.dtype)
      differences.push_back(fmt::format("{}: {} {} here, {} {} in the official model", key,
                                        ckpt::dtype_name(tensor.scalar_type()), shape_text(tensor.sizes().vec()),
                                        row->second.dtype, shape_text(row->second.shape)));
  }
  for (const auto& [key, row] : rows)
    if (!seen.count(key)) differences.push_back("missing here: " + key);
  return differences;
}

std::map<int64_t, std::string> parameters_by_index(const std::map<std::string, OfficialRow>& rows) {
  std::map<int64_t, std::string> names;
  for (const auto& [key, row] : rows)
    if (row.parameter >= 0) names[row.parameter] = key;
  return names;
}

struct Expected {
  std::string rows;                     // tests/fixtures/official_layout/<rows>.tsv
  std::string arch;                     // the checkpoint's "arch"
  std::vector<std::string> trained;     // official prefixes of what the optimizer updates
  std::set<std::string> untrained;      // official keys among those it does not (no gradient)
  std::vector<std::string> state_keys;  // each state's keys, sorted
  std::vector<std::string> group_keys;  // param_groups[0]'s keys, sorted
};

bool trained(const std::string& key, const Expected& expected) {
  if (expected.untrained.count(key)) return false;
  for (const auto& prefix : expected.trained)
    if (key.rfind(prefix, 0) == 0) return true;
  return false;
}

void expect_optimizer(const c10::impl::GenericDict& checkpoint, const std::map<std::string, OfficialRow>& rows,
                      const Expected& expected) {
  const auto state_dict = checkpoint.at("state_dict").toGenericDict();
  const auto optimizer = checkpoint.at("optimizer").toGenericDict();
  const auto names = parameters_by_index(rows);
  std::set<int64_t> with_state;
  for (const auto& item : optimizer.at("state").toGenericDict()) {
    const int64_t index = item.key().toInt();
    with_state.insert(index);
    ASSERT_TRUE(names.count(index)) << "state of index " << index << ": the official model has no such parameter";
    const auto& name = names.at(index);
    std::vector<std::string> keys;
    for (const auto& s : item.value().toGenericDict()) {
      keys.push_back(s.key().toStringRef());
      if (s.key().toStringRef() == "step") continue;
      EXPECT_TRUE(torch::equal(s.value().toTensor(), state_dict.at(name).toTensor()))
          << "state " << index << "'s " << s.key().toStringRef() << " is not " << name << "'s";
    }
    std::sort(keys.begin(), keys.end());
    EXPECT_EQ(keys, expected.state_keys) << "state of " << name;
  }
  std::set<int64_t> updated;
  for (const auto& [index, name] : names)
    if (trained(name, expected)) updated.insert(index);
  EXPECT_EQ(with_state, updated) << "the parameters with optimizer state are not those the official optimizer updates";
  const auto groups = optimizer.at("param_groups").toList();
  ASSERT_EQ(groups.size(), 1u);
  const auto group = groups.get(0).toGenericDict();
  std::vector<std::string> group_keys;
  for (const auto& g : group) group_keys.push_back(g.key().toStringRef());
  std::sort(group_keys.begin(), group_keys.end());
  EXPECT_EQ(group_keys, expected.group_keys);
  std::vector<int64_t> params, all;
  for (const auto& p : group.at("params").toList()) params.push_back(p.get().toInt());
  for (const auto& item : names) all.push_back(item.first);
  EXPECT_EQ(params, all) << "param_groups[0]['params'] is not every parameter's index, in order";
}

void expect_official_layout(const c10::impl::GenericDict& checkpoint, const Expected& expected, bool v3) {
  std::vector<std::string> top;
  for (const auto& item : checkpoint) top.push_back(item.key().toStringRef());
  const std::vector<std::string> official_top =
      v3 ? std::vector<std::string>{"epoch", "arch", "state_dict", "optimizer", "scaler"}
         : std::vector<std::string>{"epoch", "arch", "state_dict", "optimizer"};
  EXPECT_EQ(top, official_top);
  EXPECT_EQ(checkpoint.at("arch").toStringRef(), expected.arch);
  const auto rows = official_rows(expected.rows);
  ASSERT_GT(rows.size(), 300u);
  const auto differences = state_dict_differences(checkpoint.at("state_dict").toGenericDict(), rows);
  EXPECT_EQ(differences, std::vector<std::string>{}) << fmt::format("{}", fmt::join(differences, "\n"));
  expect_optimizer(checkpoint, rows, expected);
}

run::Config paper_config(const std::string& file) {
  return run::load_config(app::methods(), constant_table::config_path(file));
}

const std::vector<std::string> kSgdGroup{"dampening", "lr", "momentum", "nesterov", "params", "weight_decay"};

}  // namespace

TEST(OfficialLayoutTest, MocoV2Resnet50IsTheOfficialModelsCheckpoint) {
  const auto c = paper_config("moco_v2_r50_imagenet.yaml");
  auto encoder = moco_v2::encoder_options(c, run::dataset_channels(c), /*world_size=*/1);
  encoder.bn_splits = 1;  // one BatchNorm group: the official model's layout
  const auto& s = moco_v2::settings(c);
  const moco_v2::MocoOptions options{s.queue_size, s.momentum, s.temperature};
  moco_v2::Moco moco(encoder, options, std::make_shared<dist::LocalProcessGroup>(), /*seed=*/1);
  optim::MomentumSgd sgd(moco->trainable_parameters(), c.optim.momentum, c.optim.weight_decay);
  const auto tensors = named(moco_v2::state_entries(*moco, sgd, /*bn_rank_local=*/false));
  mark_states_with_their_parameters(tensors, "encoder_q/");
  const auto checkpoint =
      ckpt::official_checkpoint(tensors, app::official_layout_for(c), app::official_checkpoint_info(c, {}));
  Expected expected{"moco_v2_resnet50", "resnet50", {"module.encoder_q."}, {}, {"momentum_buffer"}, kSgdGroup};
  expect_official_layout(checkpoint, expected, /*v3=*/false);
}

namespace {

c10::impl::GenericDict v3_official_checkpoint(const run::Config& c, const moco_v3::V3Options& options) {
  moco_v3::MocoV3Model model([&] { return moco_v3::v3_backbone(c, run::dataset_channels(c)); }, options,
                             std::make_shared<dist::LocalProcessGroup>());
  optim::Optimizer optimizer(c.optim.optimizer, model->trainable_parameters(), c.optim.momentum, c.optim.weight_decay);
  const auto tensors = named(moco_v3::v3_state_entries(*model, optimizer));
  mark_states_with_their_parameters(tensors, "");
  return ckpt::official_checkpoint(tensors, app::official_layout_for(c), app::official_checkpoint_info(c, {}));
}

moco_v3::V3Options v3_options(const run::Config& c) {
  moco_v3::V3Options options;
  options.dim = c.model.dim;
  const auto& s = moco_v3::settings(c);
  options.mlp_dim = s.mlp_dim;
  options.projector_layers = s.projector_layers;
  options.predictor_layers = s.predictor_layers;
  options.predictor_last_bn = s.predictor_last_bn;
  return options;
}

}  // namespace

TEST(OfficialLayoutTest, MocoV3Resnet50IsTheOfficialModelsCheckpoint) {
  const auto c = paper_config("moco_v3_r50_imagenet.yaml");
  ASSERT_EQ(c.optim.optimizer, run::Optimizer::kLars);
  Expected expected{"moco_v3_resnet50",
                    "resnet50",
                    {"module.base_encoder.", "module.predictor."},
                    {},
                    {"mu"},
                    {"lr", "momentum", "params", "trust_coefficient", "weight_decay"}};
  expect_official_layout(v3_official_checkpoint(c, v3_options(c)), expected, /*v3=*/true);
}

TEST(OfficialLayoutTest, MocoV3VitSmallIsTheOfficialModelsCheckpoint) {
  const auto c = paper_config("moco_v3_vit_small_imagenet.yaml");
  ASSERT_EQ(c.optim.optimizer, run::Optimizer::kAdamw);
  ASSERT_TRUE(moco_v3::settings(c).stop_grad_conv1);
  ASSERT_TRUE(moco_v3::settings(c).predictor_last_bn);  // the official predictor: no key excused
  // pos_embed is fixed (vits.py lines 68-69), the patch projection too under --stop-grad-conv1 (49-51).
  Expected expected{"moco_v3_vit_small",
                    "vit_small",
                    {"module.base_encoder.", "module.predictor."},
                    {"module.base_encoder.pos_embed", "module.base_encoder.patch_embed.proj.weight",
                     "module.base_encoder.patch_embed.proj.bias"},
                    {"exp_avg", "exp_avg_sq", "step"},
                    {"amsgrad", "betas", "eps", "lr", "params", "weight_decay"}};
  expect_official_layout(v3_official_checkpoint(c, v3_options(c)), expected, /*v3=*/true);
}

// A tensor that no table places fails the export instead of going missing from it; the run's own state
// stays out without a word.
// A method with no official code to match has no layout: `--format moco` is refused, naming it.
TEST(OfficialLayoutTest, AMethodWithoutAnOfficialLayoutIsRefused) {
  run::MethodRoom room;
  room.name = "plain";
  room.accepts = {{run::Arch::kResnetTiny}, {run::Optimizer::kSgd}, {run::Precision::kFp32}};
  const auto methods = std::make_shared<const run::Methods>(run::Methods{room});
  const auto c = run::load_config_text(methods, "model: {method: plain}\n", "saved");
  EXPECT_EQ(test::error_of([&] { app::official_layout_for(c); }),
            "export: --format moco: model.method plain has no official main_moco.py checkpoint to match: export it "
            "with --format h5 or torch");
}

TEST(OfficialLayoutTest, ATensorWithNoPlaceInTheOfficialCheckpointIsRefused) {
  const auto layout = moco_v3::room().official_layout();
  ckpt::OfficialCheckpointInfo info;
  info.optimizer.kind = ckpt::OfficialOptimizer::Kind::kLars;
  ckpt::NamedTensors tensors{{"encoder_q/fc.0.weight", torch::ones({2, 2})},
                             {"optimizer/momentum_buffer/encoder_q/fc.0.weight", torch::ones({2, 2})},
                             {"progress/epoch", torch::tensor(int64_t{3})},
                             {"rng/torch_cpu", torch::zeros({4}, torch::kUInt8)},
                             {"probe/weight", torch::zeros({2})}};
  const auto checkpoint = ckpt::official_checkpoint(tensors, layout, info);
  EXPECT_EQ(checkpoint.at("state_dict").toGenericDict().size(), 1u);
  EXPECT_EQ(checkpoint.at("optimizer").toGenericDict().at("state").toGenericDict().size(), 1u);

  auto unplaced = tensors;
  unplaced.emplace_back("queue_of_another_method/queue", torch::zeros({2}));
  EXPECT_NE(test::error_of([&] {
              ckpt::official_checkpoint(unplaced, layout, info);
            }).find("tensor 'queue_of_another_method/queue' has no place in the official checkpoint"),
            std::string::npos);
  auto orphan_state = tensors;
  orphan_state.emplace_back("optimizer/momentum_buffer/encoder_k/fc.0.weight", torch::ones({2, 2}));
  EXPECT_NE(test::error_of([&] {
              ckpt::official_checkpoint(orphan_state, layout, info);
            }).find("optimizer state 'optimizer/momentum_buffer/encoder_k/fc.0.weight' is of no trained parameter"),
            std::string::npos);
  info.optimizer.kind = ckpt::OfficialOptimizer::Kind::kAdamw;
  EXPECT_NE(test::error_of([&] {
              ckpt::official_checkpoint(tensors, layout, info);
            }).find("optimizer state 'momentum_buffer' is not one of the official AdamW's"),
            std::string::npos);
}

// An fp16 run's loss scale goes into the file's `scaler` as torch.cuda.amp.GradScaler.state_dict()
// holds it (scale a float, _growth_tracker an int), where main_moco.py --resume loads it; a run that
// scaled no loss gives a fresh scaler's.
TEST(OfficialLayoutTest, AnFp16RunsLossScaleIsTheOfficialScalers) {
  const auto layout = moco_v3::room().official_layout();
  ckpt::OfficialCheckpointInfo info;
  info.optimizer.kind = ckpt::OfficialOptimizer::Kind::kLars;
  info.scaler = true;
  ckpt::NamedTensors tensors{{"encoder_q/fc.0.weight", torch::ones({2, 2})}};
  const auto fresh = ckpt::official_checkpoint(tensors, layout, info).at("scaler").toGenericDict();
  EXPECT_EQ(fresh.at("scale").toDouble(), 65536.0);
  EXPECT_EQ(fresh.at("_growth_tracker").toInt(), 0);

  tensors.emplace_back("scaler/scale", torch::full({1}, 1024.0f));
  tensors.emplace_back("scaler/growth_tracker", torch::full({1}, 37, torch::kInt));
  const auto checkpoint = ckpt::official_checkpoint(tensors, layout, info);
  const auto scaler = checkpoint.at("scaler").toGenericDict();
  EXPECT_EQ(scaler.at("scale").toDouble(), 1024.0);
  EXPECT_EQ(scaler.at("_growth_tracker").toInt(), 37);
  EXPECT_EQ(scaler.at("growth_interval").toInt(), 2000);
  EXPECT_EQ(checkpoint.at("state_dict").toGenericDict().size(), 1u) << "the scale is no model tensor";
}
