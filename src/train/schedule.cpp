#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace moco::train {

// With optim.warmup_epochs w: lr = peak * epoch / w until w, then the schedule, whose cosine then
// spans the epochs after w (MoCo v3's main_moco.py adjust_learning_rate).
double learning_rate(const run::Config& config, double epoch) {
  const double peak = config.optim.base_lr * static_cast<double>(config.optim.batch_size) / 256.0;
  const double warmup = config.optim.warmup_epochs;
  if (epoch < warmup) return peak * epoch / warmup;
  if (config.optim.schedule == run::Schedule::kCosine) {
    const double span = config.train.epochs - warmup;
    const double progress = std::min(1.0, std::max(0.0, (epoch - warmup) / span));
    return peak * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  double lr = peak;
  for (double milestone : config.optim.milestones)
    if (epoch >= milestone) lr *= config.optim.gamma;
  return lr;
}

double schedule_epoch(const run::Config& config, int64_t epoch, double progress) {
  if (config.optim.lr_update == run::LrUpdate::kStep) return progress * config.train.epochs;
  const double whole = static_cast<double>(epoch);  // exact, unlike progress x epochs at a boundary
  if (config.train.time_budget_s <= 0) return whole;
  return std::max(whole, std::floor(progress * config.train.epochs));
}

}  // namespace moco::train
