#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace moco::train {

double learning_rate(const run::Config& config, double epoch) {
  const double peak = config.optim.base_lr * static_cast<double>(config.optim.batch_size) / 256.0;
  if (config.optim.schedule == run::Schedule::kCosine) {
    const double progress = std::min(1.0, std::max(0.0, epoch / config.train.epochs));
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
