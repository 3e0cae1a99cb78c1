#include "train/schedule.h"

#include <cmath>

namespace moco::train {

double learning_rate(const Config& config, double epoch) {
  const double peak = config.optim.base_lr * static_cast<double>(config.optim.batch_size) / 256.0;
  if (config.optim.schedule == Schedule::kCosine) {
    const double progress = std::min(1.0, std::max(0.0, epoch / config.train.epochs));
    return peak * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  double lr = peak;
  for (double milestone : config.optim.milestones)
    if (epoch >= milestone) lr *= config.optim.gamma;
  return lr;
}

}  // namespace moco::train
