#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace moco::train {

Schedule pretraining_schedule(const run::Config& config) {
  Schedule s;
  s.peak_lr = config.optim.base_lr * static_cast<double>(config.optim.batch_size) / 256.0;
  s.warmup_epochs = config.optim.warmup_epochs;
  s.kind = config.optim.schedule;
  s.milestones = config.optim.milestones;
  s.gamma = config.optim.gamma;
  s.epochs = config.train.epochs;
  s.update = config.optim.lr_update;
  s.time_budget_s = config.train.time_budget_s;
  return s;
}

Schedule linear_protocol_schedule(const run::Config& config) {
  Schedule s;
  s.peak_lr = config.lincls.base_lr * static_cast<double>(config.lincls.batch_size) / 256.0;
  s.kind = config.lincls.schedule;
  s.milestones = config.lincls.milestones;
  s.gamma = config.lincls.gamma;
  s.epochs = static_cast<double>(config.lincls.epochs);
  return s;
}

// With warm-up epochs w: lr = peak * epoch / w until w, then the schedule, whose cosine then spans the
// epochs after w (MoCo v3's main_moco.py adjust_learning_rate).
double learning_rate(const Schedule& s, double epoch) {
  if (epoch < s.warmup_epochs) return s.peak_lr * epoch / s.warmup_epochs;
  if (s.kind == run::Schedule::kCosine) {
    const double span = s.epochs - s.warmup_epochs;
    const double progress = std::min(1.0, std::max(0.0, (epoch - s.warmup_epochs) / span));
    return s.peak_lr * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  double lr = s.peak_lr;
  for (double milestone : s.milestones)
    if (epoch >= milestone) lr *= s.gamma;
  return lr;
}

double learning_rate(const run::Config& config, double epoch) {
  return learning_rate(pretraining_schedule(config), epoch);
}

double schedule_epoch(const Schedule& s, int64_t epoch, double progress) {
  if (s.update == run::LrUpdate::kStep) return progress * s.epochs;
  const double whole = static_cast<double>(epoch);  // exact, unlike progress x epochs at a boundary
  if (s.time_budget_s <= 0) return whole;
  return std::max(whole, std::floor(progress * s.epochs));
}

}  // namespace moco::train
