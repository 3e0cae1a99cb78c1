// defines: official_layout_for, official_checkpoint_info, official_arch_note: what `moco_ckpt export
// --format moco` takes from a run's saved config (which method's names, the optimizer and its lr, the
// arch) for ckpt::export_official
#pragma once

#include "ckpt/manifest.h"
#include "ckpt/official_checkpoint.h"
#include "ckpt/official_layout.h"
#include "app/program.h"
#include "run/config.h"
#include "train/schedule.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

namespace moco::app {

// Where the method's tensors lie in the official main_moco.py checkpoint. A method with no official
// code to match has none: refused (a Refusal, exit 2) before anything is written.
inline ckpt::OfficialLayout official_layout_for(const run::Config& c) {
  const auto& room = run::method_room(c);
  if (!room.official_layout)
    throw Refusal(
        fmt::format("export: --format moco: model.method {} has no official main_moco.py checkpoint to "
                    "match: export it with --format h5 or torch",
                    room.name));
  if (room.unofficial_modules)
    if (const auto keys = room.unofficial_modules(c); !keys.empty())
      throw Refusal(fmt::format(
          "export: --format moco: {}: the official builder makes other modules, so main_moco.py --resume would "
          "refuse the checkpoint (keys missing or unexpected); train with the official values, or export with "
          "--format h5 or torch",
          keys));
  return room.official_layout();
}

// The lr of the checkpoint's last step as the loop set it at that step's start (src/train/loop.cpp),
// from train.epochs' schedule: main_moco.py's param group holds its last step's lr too.
inline double last_step_lr(const run::Config& c, const ckpt::Manifest& m) {
  const auto schedule = train::pretraining_schedule(c);
  if (m.step < 1 || m.epoch <= 0) return train::learning_rate(schedule, 0);
  const double steps_per_epoch = std::round(static_cast<double>(m.step) / m.epoch);
  const double total_steps = std::ceil(c.train.epochs * steps_per_epoch);
  const auto done = static_cast<double>(m.step - 1);
  const auto epoch = static_cast<int64_t>(std::floor(done / steps_per_epoch));
  return train::learning_rate(schedule, train::schedule_epoch(schedule, epoch, done / total_steps));
}

inline ckpt::OfficialCheckpointInfo official_checkpoint_info(const run::Config& c, const ckpt::Manifest& m) {
  using Kind = ckpt::OfficialOptimizer::Kind;
  ckpt::OfficialCheckpointInfo info;
  info.arch = run::to_string(c.model.arch);
  info.optimizer.kind = c.optim.optimizer == run::Optimizer::kLars    ? Kind::kLars
                        : c.optim.optimizer == run::Optimizer::kAdamw ? Kind::kAdamw
                                                                      : Kind::kSgd;
  info.optimizer.lr = last_step_lr(c, m);
  info.optimizer.momentum = c.optim.momentum;
  info.optimizer.weight_decay = c.optim.weight_decay;
  info.scaler = official_layout_for(c).saves_scaler;
  return info;
}

// Empty where the official scripts' --arch builds this run's backbone; else a line saying why their
// load_state_dict will refuse its shapes (the file still holds every tensor of the run).
inline std::string official_arch_note(const run::Config& c) {
  const std::string arch = run::to_string(c.model.arch);
  std::string differs;
  if (c.model.arch == run::Arch::kResnetTiny || c.model.arch == run::Arch::kVitTinyCpu)
    differs = "model.arch=" + arch + " is moco_dist's own";
  else if (!run::is_vit(c.model.arch) && c.model.small_stem)
    differs = "model.small_stem=true (a 3x3 stem without max-pool)";
  else if (c.model.width != 0)
    differs = fmt::format("model.width={}", c.model.width);
  else if (run::dataset_channels(c) != 3)
    differs = fmt::format("images of {} channel(s)", run::dataset_channels(c));
  else if (run::is_vit(c.model.arch) && c.data.augment.out_size != 224)
    differs =
        fmt::format("data.image_size={} (the official ViTs' position embedding is for 224)", c.data.augment.out_size);
  if (differs.empty()) return {};
  return fmt::format(
      "note: {}: the official scripts' --arch {} builds another network, whose load_state_dict refuses these "
      "shapes",
      differs, arch);
}

}  // namespace moco::app
