#include "ckpt/torch_export.h"

#include "sys/durable_file.h"

#include <fmt/format.h>

namespace moco::ckpt {
namespace {

// Every occurrence of `from` in `text` replaced, left to right, as Python's str.replace does.
std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

c10::Dict<std::string, torch::Tensor> tensor_dict(const NamedTensors& tensors, bool detectron2_names) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [key, tensor] : tensors) {
    const auto name = detectron2_names ? detectron2_key(key) : key;
    if (dict.contains(name)) throw std::runtime_error(fmt::format("two tensors would be named '{}'", name));
    dict.insert(name, tensor.contiguous());
  }
  return dict;
}

void write_pickle(const std::string& path, const c10::IValue& value) {
  // torch::pickle_save (torch/serialize.h, in LibTorch 1.x and 2.x alike) writes torch.save's zip
  // container (data.pkl and one record per storage), so torch.load reads it; the tensors come back
  // as tensors, not numpy arrays.
  const std::vector<char> bytes = torch::pickle_save(value);
  sys::write_synced(path, std::string(bytes.begin(), bytes.end()));
}

}  // namespace

std::string detectron2_key(const std::string& torchvision_key) {
  std::string k = torchvision_key;
  if (k.find("layer") == std::string::npos) k = "stem." + k;
  for (int t = 1; t <= 4; ++t) k = replace_all(k, fmt::format("layer{}", t), fmt::format("res{}", t + 1));
  for (int t = 1; t <= 3; ++t) k = replace_all(k, fmt::format("bn{}", t), fmt::format("conv{}.norm", t));
  k = replace_all(k, "downsample.0", "shortcut");
  return replace_all(k, "downsample.1", "shortcut.norm");
}

void write_torch_state_dict(const std::string& path, const NamedTensors& tensors) {
  write_pickle(path, tensor_dict(tensors, /*detectron2_names=*/false));
}

void write_detectron2_weights(const std::string& path, const NamedTensors& tensors) {
  c10::impl::GenericDict content(c10::StringType::get(), c10::AnyType::get());
  content.insert("model", tensor_dict(tensors, /*detectron2_names=*/true));
  content.insert("__author__", std::string("MOCO"));
  // Tells DetectionCheckpointer to match these names to its model's by suffix, as for the
  // official converter's file.
  content.insert("matching_heuristics", true);
  write_pickle(path, content);
}

}  // namespace moco::ckpt
