// defines: Settings (the config keys MoCo v1/v2 alone reads: moco.*, model.mlp, debug.check_invariants,
// dist.broadcast_buffers, dist.queue_check_every),
// settings (them within a run's Config), kMethod (model.method's value for MoCo v1/v2)
#pragma once

#include "run/config.h"

#include <cstdint>

namespace moco::moco_v2 {

inline constexpr const char* kMethod = "v2";

struct Settings {
  int64_t queue_size = 65536;
  double momentum = 0.999;
  double temperature = 0.07;
  int64_t bn_splits = 8;          // BN groups in the global batch (each rank runs its share), keys shuffled across them
  bool mlp = false;               // MoCo v2 MLP head
  bool check_invariants = false;  // each step: the momentum update, no key-encoder gradient, a clean queue
  bool broadcast_buffers = true;  // dist.broadcast_buffers: each step, BN buffers of both encoders follow rank 0
  int64_t queue_check_every = 100;  // dist.queue_check_every: steps between cross-rank queue checksums; 0: never
};

inline const Settings& settings(const run::Config& config) { return config.method_settings.of<Settings>(kMethod); }
inline Settings& settings(run::Config& config) { return config.method_settings.of<Settings>(kMethod); }

}  // namespace moco::moco_v2
