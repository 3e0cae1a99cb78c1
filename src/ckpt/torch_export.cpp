#include "ckpt/torch_export.h"

#include "sys/durable_file.h"

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

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

}  // namespace

std::string torch_save_bytes(const c10::IValue& value) {
  // The pickle holds plain dicts, lists and tuples, as Python's torch.save writes them. LibTorch's
  // torch::pickle_save tags each dict and list with its TorchScript type (a call of
  // torch.jit._pickle.restore_type_tag), which torch.load refuses under weights_only=True, its
  // default since torch 2.6. The tensors' storages lie beside the pickle in torch.save's zip
  // container (PyTorchStreamWriter), as pickle_save puts them.
  std::string pickled;
  torch::jit::Pickler pickler([&](const char* bytes, size_t size) { pickled.append(bytes, size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::string container;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) {
    container.append(static_cast<const char*>(bytes), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return container;
}

void write_torch_file(const std::string& path, const c10::IValue& value) {
  sys::write_synced(path, torch_save_bytes(value));
}

std::string detectron2_key(const std::string& torchvision_key) {
  std::string k = torchvision_key;
  if (k.find("layer") == std::string::npos) k = "stem." + k;
  for (int t = 1; t <= 4; ++t) k = replace_all(k, fmt::format("layer{}", t), fmt::format("res{}", t + 1));
  for (int t = 1; t <= 3; ++t) k = replace_all(k, fmt::format("bn{}", t), fmt::format("conv{}.norm", t));
  k = replace_all(k, "downsample.0", "shortcut");
  return replace_all(k, "downsample.1", "shortcut.norm");
}

void write_torch_state_dict(const std::string& path, const NamedTensors& tensors) {
  write_torch_file(path, tensor_dict(tensors, /*detectron2_names=*/false));
}

void write_detectron2_weights(const std::string& path, const NamedTensors& tensors) {
  c10::impl::GenericDict content(c10::StringType::get(), c10::AnyType::get());
  content.insert("model", tensor_dict(tensors, /*detectron2_names=*/true));
  content.insert("__author__", std::string("MOCO"));
  // Tells DetectionCheckpointer to match these names to its model's by suffix, as for the
  // official converter's file.
  content.insert("matching_heuristics", true);
  write_torch_file(path, content);
}

}  // namespace moco::ckpt
