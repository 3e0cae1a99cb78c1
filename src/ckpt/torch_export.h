// defines: torch_save_bytes, write_torch_file (a value as torch.save writes it, which torch.load reads
// with weights_only=True), write_torch_state_dict, write_detectron2_weights, detectron2_key: a
// backbone's tensors in the files Python users load with torch.load (torchvision, timm) and
// detectron2's DetectionCheckpointer
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace moco::ckpt {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// What torch.save writes of `value` (dicts, lists, tuples, strings, numbers, bools, CPU tensors): its
// zip container, whose pickle names no global but the tensors' (torch._utils._rebuild_tensor_v2, the
// storage types, collections.OrderedDict), so torch.load reads it with weights_only=True too.
std::string torch_save_bytes(const c10::IValue& value);
// torch_save_bytes(value) written to `path` and synced. Throws std::runtime_error naming `path`.
void write_torch_file(const std::string& path, const c10::IValue& value);

// A torch.load file of one dict {key: tensor}, in the given order. Throws std::runtime_error naming `path`.
void write_torch_state_dict(const std::string& path, const NamedTensors& tensors);

// The name facebookresearch/moco's detection/convert-pretrain-to-detectron2.py gives a torchvision
// ResNet key: "stem." before keys outside the layers, layerN -> res(N+1), bnK -> convK.norm,
// downsample.0/.1 -> shortcut/shortcut.norm. E.g. "layer1.0.bn2.weight" -> "res2.0.conv2.norm.weight".
std::string detectron2_key(const std::string& torchvision_key);

// A torch.load file of {"model": {detectron2_key(k): tensor}, "__author__": "MOCO",
// "matching_heuristics": True}: the official converter's content. Throws std::runtime_error naming `path`.
void write_detectron2_weights(const std::string& path, const NamedTensors& tensors);

}  // namespace moco::ckpt
