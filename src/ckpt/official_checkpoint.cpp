#include "ckpt/official_checkpoint.h"

#include "ckpt/h5_tensor_file.h"

#include <ATen/core/ivalue.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace moco::ckpt {
namespace {

using Kind = OfficialOptimizer::Kind;
const std::string kOptimizer = "optimizer/";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The run's own state, for which main_moco.py's checkpoint has no place (the epoch aside, which
// `info` carries): its progress, each rank's random generator, the online probe; and the loss scale,
// which goes into the file's `scaler` instead of its state_dict.
bool run_state(const std::string& name) {
  for (const char* group : {"progress/", "rng/", "probe/", "scaler/"})
    if (starts_with(name, group)) return true;
  return false;
}

const OfficialModule* module_of(const std::string& name, const OfficialLayout& layout) {
  for (const auto& m : layout.modules)
    if (m.buffer ? name == m.ours : starts_with(name, m.ours)) return &m;
  return nullptr;
}

std::string ours_listed(const OfficialLayout& layout) {
  std::string list;
  for (const auto& m : layout.modules) list += (list.empty() ? "" : ", ") + m.ours;
  return list;
}

c10::Dict<std::string, torch::Tensor> state_dict(const NamedTensors& tensors, const OfficialLayout& layout) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, tensor] : tensors) {
    if (starts_with(name, kOptimizer) || run_state(name)) continue;
    const auto* m = module_of(name, layout);
    if (!m)
      throw CheckpointError(fmt::format("tensor '{}' has no place in the official checkpoint (it holds {}, {}*)", name,
                                        ours_listed(layout), kOptimizer));
    const auto key = m->buffer ? m->official : m->official + name.substr(m->ours.size());
    if (dict.contains(key)) throw CheckpointError(fmt::format("two tensors would be named '{}'", key));
    dict.insert(key, tensor.contiguous());
  }
  return dict;
}

// Each parameter's index in the official model.parameters(): module by module in the layout's order,
// each module's parameters in the checkpoint's (their registration) order. Only trained ones kept.
struct ParameterIndices {
  std::map<std::string, int64_t> trained;
  int64_t count = 0;
};

ParameterIndices parameter_indices(const NamedTensors& tensors, const OfficialLayout& layout) {
  ParameterIndices indices;
  for (const auto& m : layout.modules) {
    if (m.buffer) continue;
    for (const auto& item : tensors) {
      if (!starts_with(item.first, m.ours) || is_batchnorm_statistic(item.first)) continue;
      if (m.trained) indices.trained[item.first] = indices.count;
      ++indices.count;
    }
  }
  return indices;
}

// The official optimizer's name for our optimizer state `ours` (momentum_buffer, exp_avg, exp_avg_sq).
std::string official_state_key(const std::string& ours, Kind kind) {
  if (ours == "momentum_buffer" && kind == Kind::kSgd) return "momentum_buffer";
  if (ours == "momentum_buffer" && kind == Kind::kLars) return "mu";  // moco-v3's moco/optimizer.py
  if ((ours == "exp_avg" || ours == "exp_avg_sq") && kind == Kind::kAdamw) return ours;
  throw CheckpointError(fmt::format("optimizer state '{}' is not one of the official {}'s", ours,
                                    kind == Kind::kSgd    ? "SGD"
                                    : kind == Kind::kLars ? "LARS"
                                                          : "AdamW"));
}

c10::impl::GenericDict new_dict() { return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()); }

// AdamW's step count in each parameter's state: a float32 scalar tensor, as torch >= 1.12 keeps it
// (an older torch's int loads as well); each its own copy, since torch's AdamW adds 1 to it in place.
void add_adamw_steps(std::map<int64_t, c10::impl::GenericDict>& state, const NamedTensors& tensors) {
  const auto found =
      std::find_if(tensors.begin(), tensors.end(), [](const auto& item) { return item.first == kOptimizer + "steps"; });
  if (found == tensors.end()) throw CheckpointError("no tensor optimizer/steps: AdamW's step count is missing");
  for (auto& entry : state) entry.second.insert("step", found->second.to(torch::kFloat).reshape({}).clone());
}

// optimizer.state_dict()["state"]: {parameter index: {state name: tensor}}, in index order.
c10::Dict<int64_t, c10::impl::GenericDict> optimizer_state(const NamedTensors& tensors, const OfficialLayout& layout,
                                                           const ParameterIndices& indices, Kind kind) {
  std::map<int64_t, c10::impl::GenericDict> state;
  for (const auto& [name, tensor] : tensors) {
    if (!starts_with(name, kOptimizer) || name == kOptimizer + "steps") continue;
    const auto rest = name.substr(kOptimizer.size());
    const auto slash = rest.find('/');
    const auto key = official_state_key(rest.substr(0, slash), kind);
    const auto parameter = layout.optimizer_group + (slash == std::string::npos ? "" : rest.substr(slash + 1));
    const auto index = indices.trained.find(parameter);
    if (index == indices.trained.end())
      throw CheckpointError(fmt::format("optimizer state '{}' is of no trained parameter ('{}')", name, parameter));
    state.try_emplace(index->second, new_dict()).first->second.insert(key, tensor.contiguous());
  }
  if (kind == Kind::kAdamw) add_adamw_steps(state, tensors);
  c10::Dict<int64_t, c10::impl::GenericDict> dict;
  for (auto& [index, entry] : state) dict.insert(index, std::move(entry));
  return dict;
}

// optimizer.state_dict()["param_groups"]: one group of every parameter (main_moco.py passes
// model.parameters()), with the official optimizer's hyper-parameters and defaults.
c10::impl::GenericList param_groups(const OfficialOptimizer& o, int64_t parameters) {
  auto group = new_dict();
  group.insert("lr", o.lr);
  if (o.kind == Kind::kSgd) {
    group.insert("momentum", o.momentum);
    group.insert("dampening", 0.0);
    group.insert("weight_decay", o.weight_decay);
    group.insert("nesterov", false);
  } else if (o.kind == Kind::kLars) {
    group.insert("weight_decay", o.weight_decay);
    group.insert("momentum", o.momentum);
    group.insert("trust_coefficient", 0.001);
  } else {
    group.insert("betas", c10::ivalue::Tuple::create(0.9, 0.999));
    group.insert("eps", 1e-8);
    group.insert("weight_decay", o.weight_decay);
    group.insert("amsgrad", false);
  }
  c10::impl::GenericList params(c10::AnyType::get());
  for (int64_t i = 0; i < parameters; ++i) params.push_back(i);
  group.insert("params", params);
  c10::impl::GenericList groups(c10::AnyType::get());
  groups.push_back(group);
  return groups;
}

// torch.cuda.amp.GradScaler's state_dict(), which moco-v3's main_moco.py --resume loads: an fp16
// run's scale and count of good steps (scaler/scale, scaler/growth_tracker); a run that scaled no
// loss (fp32 or bf16) gives a fresh scaler's, where the official one starts.
c10::impl::GenericDict grad_scaler(const NamedTensors& tensors) {
  double scale = 65536.0;
  int64_t growth_tracker = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "scaler/scale") scale = tensor.to(torch::kDouble).item<double>();
    if (name == "scaler/growth_tracker") growth_tracker = tensor.to(torch::kLong).item<int64_t>();
  }
  auto scaler = new_dict();
  scaler.insert("scale", scale);
  scaler.insert("growth_factor", 2.0);
  scaler.insert("backoff_factor", 0.5);
  scaler.insert("growth_interval", static_cast<int64_t>(2000));
  scaler.insert("_growth_tracker", growth_tracker);
  return scaler;
}

}  // namespace

bool is_batchnorm_statistic(const std::string& name) {
  for (const char* suffix : {".running_mean", ".running_var", ".num_batches_tracked"})
    if (ends_with(name, suffix)) return true;
  return false;
}

c10::impl::GenericDict official_checkpoint(const NamedTensors& tensors, const OfficialLayout& layout,
                                           const OfficialCheckpointInfo& info) {
  const auto indices = parameter_indices(tensors, layout);
  auto optimizer = new_dict();
  optimizer.insert("state", optimizer_state(tensors, layout, indices, info.optimizer.kind));
  optimizer.insert("param_groups", param_groups(info.optimizer, indices.count));
  auto checkpoint = new_dict();
  checkpoint.insert("epoch", info.epoch);
  checkpoint.insert("arch", info.arch);
  checkpoint.insert("state_dict", state_dict(tensors, layout));
  checkpoint.insert("optimizer", optimizer);
  if (info.scaler) checkpoint.insert("scaler", grad_scaler(tensors));
  return checkpoint;
}

}  // namespace moco::ckpt
