// defines: the choices of the enum-valued keys (Arch for model.arch, Optimizer for optim.optimizer,
// Precision for train.precision: a method may take or refuse them, MethodRoom::accepts lists them per
// method; Dataset, Schedule, LrUpdate; data.augmentation is data::Recipe), is_vit, to_string
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

enum class Dataset { kFashionMnist, kMnist, kSynthetic, kImageFolder, kHdf5 };
enum class Schedule { kStep, kCosine };
enum class LrUpdate { kEpoch, kStep };  // optim.lr_update: once per epoch (main_moco.py) or every step
const char* to_string(Dataset dataset);
const char* to_string(Schedule schedule);
const char* to_string(LrUpdate update);

}  // namespace moco::run
