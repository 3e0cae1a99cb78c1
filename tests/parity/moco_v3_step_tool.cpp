// The C++ half of MoCo v3's step parity (moco_v3_step_parity.py is the other): builds the v3 method
// of a small config (torchvision's resnet18 layout, so that PyTorch can hold the same weights), takes
// a step that is not recorded (so that the momentum encoder differs from the query encoder and LARS's
// buffers are not zero), then one step on random views, and writes what PyTorch needs to redo it
// (with optim.optimizer OPTIMIZER, lars or adamw):
//   OUT_DIR/index.json  {"meta": {...}, "tensors": {name: {"file", "dtype", "shape"}}}
//   OUT_DIR/<file>      the tensor's values, contiguous, little-endian (float32 or int64)
// Tensors: before/<entry> and after/<entry> for every checkpoint entry of the method (weights, BN
// buffers, LARS buffers), after_<step>/<entry> after each step but the last, input/x1_<step>,
// input/x2_<step>; meta: the config's constants, the model's
// predictor_last_bn, the steps, the run's length, each step's loss.
//
// vit_adamw: the backbone is vit_tiny_cpu on 32 px views (a ViT of timm's layout), the projector of
// 3 layers and the predictor ending in BatchNorm without affine (the official MoCo_ViT),
// stop_grad_conv1, AdamW.
//
// vit_lars: the same ViT with LARS.
// usage: moco_v3_step_tool OUT_DIR [lars|adamw|vit_adamw|vit_lars]
#include "dist/process_group.h"
#include "moco_v3/v3_settings.h"
#include "app/methods.h"
#include "moco_v3/moco_v3.h"
#include "run/config.h"
#include "run/run_context.h"
#include "run/setup.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace moco;

namespace {

// Small enough for seconds on a CPU, with every part v3 has: BN in the backbone and both heads.
constexpr const char* kConfig = R"(
model: {method: v3, arch: resnet18, small_stem: false, dim: 32}
v3: {mlp_dim: 64, projector_layers: 2, predictor_layers: 2, momentum: 0.9, temperature: 0.5}
optim: {optimizer: OPTIMIZER, batch_size: 32, base_lr: 0.6, momentum: 0.9, weight_decay: 0.01}
)";
constexpr const char* kVitConfig = R"(
model: {method: v3, arch: vit_tiny_cpu, dim: 32}
v3: {mlp_dim: 64, projector_layers: 3, predictor_layers: 2, momentum: 0.9, temperature: 0.5, stop_grad_conv1: true,
     predictor_last_bn: true}
optim: {optimizer: OPTIMIZER, batch_size: 32, base_lr: 0.6, momentum: 0.9, weight_decay: 0.1}
data: {image_size: 32}
)";
constexpr int64_t kTotalSteps = 10;
constexpr int64_t kWarmStep = 3;
// The momentum's cosine has moved from m0, LARS's buffers and AdamW's moments are not zero (the warm
// step): one recorded step holds all a step does. A second one proved nothing more and doubled the
// check's time (each step is redone 6 times in float64); the tool and the script still take several.
const std::vector<int64_t> kRecordedSteps = {4};
constexpr double kLarsLr = 0.6 * 32 / 256;  // base_lr x batch / 256, the peak lr of this config's schedule
constexpr double kAdamwLr = 1e-3;           // moves every weight by ~1e-3 a step: well above fp32's rounding

void write_tensor(const fs::path& dir, const std::string& name, const torch::Tensor& tensor, nlohmann::json& index) {
  const auto t = tensor.detach().cpu().contiguous();
  std::string file = name;
  std::replace(file.begin(), file.end(), '/', '~');
  std::ofstream out(dir / file, std::ios::binary);
  out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
  if (!out) throw std::runtime_error("cannot write " + (dir / file).string());
  index[name] = {
      {"file", file}, {"dtype", t.scalar_type() == torch::kLong ? "int64" : "float32"}, {"shape", t.sizes().vec()}};
}

void write_state(const fs::path& dir, const std::string& prefix, run::Method& method, nlohmann::json& index) {
  for (const auto& entry : method.state_entries()) write_tensor(dir, prefix + entry.name, entry.tensor, index);
}

// The ViT's shape, for the reference to build the same one.
void add_vit_meta(const run::Config& config, nlohmann::json& meta) {
  const auto o = run::vit_options(config, /*in_channels=*/3);
  meta.update({{"arch", "vit_tiny_cpu"},
               {"image_size", o.image_size},
               {"patch_size", o.patch_size},
               {"in_channels", o.in_channels},
               {"embed_dim", o.embed_dim},
               {"depth", o.depth},
               {"heads", o.num_heads},
               {"stop_grad_conv1", moco_v3::settings(config).stop_grad_conv1},
               {"projector_layers", moco_v3::settings(config).projector_layers},
               {"predictor_layers", moco_v3::settings(config).predictor_layers}});
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 3 ? argv[2] : "lars";
  if (argc < 2 || argc > 3 || (mode != "lars" && mode != "adamw" && mode != "vit_adamw" && mode != "vit_lars")) {
    std::cerr << "usage: moco_v3_step_tool OUT_DIR [lars|adamw|vit_adamw|vit_lars]\n";
    return 2;
  }
  const bool vit = mode.rfind("vit_", 0) == 0;
  const std::string optimizer = vit ? mode.substr(4) : mode;
  const fs::path dir = argv[1];
  const double lr = optimizer == "adamw" ? kAdamwLr : kLarsLr;
  fs::create_directories(dir);
  torch::set_num_threads(1);
  torch::manual_seed(7);
  std::string text = vit ? kVitConfig : kConfig;
  text.replace(text.find("OPTIMIZER"), 9, optimizer);
  // AdamW: the official ViT recipe's weight decay, 0.1 (CONFIG.md), so that its decoupled decay
  // (p *= 1 - lr wd) moves a weight of 0.1 by 1e-5 in the step: visible at the test's bound.
  if (optimizer == "adamw" && !vit) text.replace(text.find("weight_decay: 0.01"), 18, "weight_decay: 0.1");
  const auto config = run::load_config_text(moco::app::methods(), text, "moco_v3_step_tool");
  run::RunContext context;
  context.group = std::make_shared<dist::LocalProcessGroup>();
  moco_v3::MocoV3 method(config, context, /*in_channels=*/3);
  method.set_run_length(kTotalSteps);

  const auto random_views = [&config] {
    data::TwoViewBatch batch;
    batch.query = torch::randn({config.optim.batch_size, 3, 32, 32});
    batch.key = torch::randn({config.optim.batch_size, 3, 32, 32});
    return batch;
  };
  method.set_lr(lr);
  method.step(random_views(), kWarmStep);

  nlohmann::json tensors, losses = nlohmann::json::array();
  write_state(dir, "before/", method, tensors);
  const auto& steps = kRecordedSteps;
  for (const int64_t step : steps) {
    const auto batch = random_views();
    write_tensor(dir, "input/x1_" + std::to_string(step), batch.query, tensors);
    write_tensor(dir, "input/x2_" + std::to_string(step), batch.key, tensors);
    losses.push_back(method.step(batch, step).loss.item<double>());
    // The state between steps, so that the reference redoes each step from the state C++ began it with:
    // an fp32 ReLU input within rounding of 0 may take either side, and a second step would inherit that.
    if (step != steps.back()) write_state(dir, "after_" + std::to_string(step) + "/", method, tensors);
  }
  write_state(dir, "after/", method, tensors);
  nlohmann::json meta = {{"steps", steps},
                         {"total_steps", kTotalSteps},
                         {"lr", lr},
                         {"optimizer", optimizer},
                         {"m0", moco_v3::settings(config).momentum},
                         {"temperature", moco_v3::settings(config).temperature},
                         {"dim", config.model.dim},
                         {"mlp_dim", moco_v3::settings(config).mlp_dim},
                         {"weight_decay", config.optim.weight_decay},
                         {"momentum", config.optim.momentum},
                         {"predictor_last_bn", method.model()->options().predictor_last_bn},
                         {"losses", losses}};
  if (vit) add_vit_meta(config, meta);
  std::ofstream(dir / "index.json") << nlohmann::json{{"meta", meta}, {"tensors", tensors}}.dump(1);
  return 0;
}
