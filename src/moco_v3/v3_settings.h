// defines: Settings (the config keys MoCo v3 alone reads: v3.*), settings (them within a run's Config),
// kMethod (model.method's value for MoCo v3)
#pragma once

#include "run/config.h"

#include <cstdint>
#include <string>

namespace moco::moco_v3 {

inline constexpr const char* kMethod = "v3";

struct Settings {                // defaults are the official main_moco.py's for ResNet
  int64_t mlp_dim = 4096;        // hidden width of the projector and the predictor
  int64_t projector_layers = 2;  // the official builder's for ResNet (3 for ViT)
  int64_t predictor_layers = 2;
  bool predictor_last_bn = false;  // the predictor ends in BN without affine: the official ViT's, not its ResNet's
  double momentum = 0.99;          // m0: the momentum encoder's m at the first step
  // cosine: m rises from m0 to 1 on a half cosine (main_moco.py --moco-m-cos, the paper's recipes);
  // constant: m0 throughout (main_moco.py without the flag)
  std::string momentum_schedule = "cosine";
  double temperature = 1.0;      // T; each loss term is scaled by 2T
  bool stop_grad_conv1 = false;  // ViT: the patch projection frozen at its initialisation (main_moco.py flag)
};

inline const Settings& settings(const run::Config& config) { return config.method_settings.of<Settings>(kMethod); }
inline Settings& settings(run::Config& config) { return config.method_settings.of<Settings>(kMethod); }

}  // namespace moco::moco_v3
