// defines: the choices of the shared keys a method may take or refuse (Arch for model.arch, Optimizer
// for optim.optimizer, Precision for train.precision), is_vit, to_string; MethodRoom::accepts lists
// them per method
#pragma once

#include "optim/optimizer.h"

namespace moco::run {

enum class Arch { kResnetTiny, kResnet18, kResnet34, kResnet50, kVitTinyCpu, kVitSmall, kVitBase };
// The vision transformers (model::VisionTransformer).
bool is_vit(Arch arch);
enum class Precision { kFp32, kBf16, kFp16 };
using Optimizer = optim::Algorithm;  // optim.optimizer

// The value's name as the config writes it ("resnet_tiny", "lars", "bf16").
const char* to_string(Arch arch);
const char* to_string(Precision precision);
const char* to_string(Optimizer optimizer);

}  // namespace moco::run
