// defines: OfficialOptimizer, OfficialCheckpointInfo, is_batchnorm_statistic, official_checkpoint: a moco_dist
// checkpoint's tensors
// as the dict the official main_moco.py's save_checkpoint writes ({epoch, arch, state_dict, optimizer
// (, scaler)}), for torch.load, main_lincls.py --pretrained, the converters and main_moco.py --resume
#pragma once

#include "ckpt/official_layout.h"
#include "ckpt/torch_export.h"

#include <ATen/core/Dict.h>

#include <cstdint>
#include <string>

namespace moco::ckpt {

// The optimizer the official code runs, whose state_dict() layout the file takes: torch.optim.SGD
// (MoCo v1/v2) with `momentum_buffer`, moco-v3's LARS (moco/optimizer.py) with `mu`, or
// torch.optim.AdamW with `step`, `exp_avg`, `exp_avg_sq`.
struct OfficialOptimizer {
  enum class Kind { kSgd, kLars, kAdamw };
  Kind kind = Kind::kSgd;
  double lr = 0;  // the param group's lr when the checkpoint was taken
  double momentum = 0.9;
  double weight_decay = 0;
};

struct OfficialCheckpointInfo {
  int64_t epoch = 0;  // whole epochs done: main_moco.py saves epoch + 1 after its epoch `epoch`
  std::string arch;   // its --arch (resnet50, vit_small, ...)
  OfficialOptimizer optimizer;
  bool scaler = false;  // moco-v3's main_moco.py also saves (and --resume loads) its GradScaler's state
};

// A BatchNorm's running statistic (running_mean, running_var, num_batches_tracked): the only buffers of
// the official models' modules (torchvision's ResNets, timm's ViTs, the MLP heads); every other tensor
// of a module is a parameter.
bool is_batchnorm_statistic(const std::string& name);

// `tensors`: a checkpoint's, by our names, in the checkpoint's order (each module's parameters in
// their registration order, then its buffers). Every tensor of a module of `layout` goes into
// state_dict under its official name; the optimizer's state goes under the index of its parameter in
// the official model.parameters(); the run's own state (progress/, rng/, probe/) stays out. Throws
// CheckpointError naming a tensor that has no place there.
c10::impl::GenericDict official_checkpoint(const NamedTensors& tensors, const OfficialLayout& layout,
                                           const OfficialCheckpointInfo& info);

}  // namespace moco::ckpt
