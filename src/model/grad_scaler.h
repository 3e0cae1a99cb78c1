// defines: GradScalerOptions, GradScaler (fp16 training's dynamic loss scale as
// torch.cuda.amp.GradScaler keeps it, decided on the device)
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace moco::model {

// torch.cuda.amp.GradScaler's arguments, with its defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // < 1
  int64_t growth_interval = 2000;
};

// The dynamic loss scale of fp16 training, step for step torch.cuda.amp.GradScaler's (grad_scaler.py,
// torch 1.13; tests/fixtures/grad_scaler_sequence.tsv): the loss is multiplied by the scale before the
// backward; unscale_ divides the gradients by it and finds whether one held an Inf or NaN, in which
// case the optimizer step is skipped; update then multiplies the scale by backoff_factor (and restarts
// the count of good steps), or by growth_factor after growth_interval good steps in a row (unless
// the product overflows fp32). The scale (float32 [1]) and the count (int32 [1]) live on the device
// and every decision is made there: no host read.
class GradScaler {
 public:
  // Throws std::invalid_argument for options torch's GradScaler refuses (growth <= 1, backoff >= 1),
  // a scale that is not a positive finite float or an interval below 1.
  explicit GradScaler(const GradScalerOptions& options = {}, torch::Device device = torch::kCPU);

  // loss * scale, as GradScaler.scale(loss).
  torch::Tensor scale(const torch::Tensor& loss) const;

  // Multiplies each defined gradient in place by 1 / scale (the reciprocal taken in fp64, as torch's)
  // and returns found_inf, float32 [1] on the device: 1 if some gradient held an Inf or NaN as it
  // came in (torch checks the scaled values), else 0. Where it is 1 the caller keeps the optimizer's
  // step from changing anything (GradScaler's _maybe_opt_step). Call it after the gradients are
  // averaged across ranks, so that every rank finds the same.
  torch::Tensor unscale_(const std::vector<torch::Tensor>& grads) const;

  // After a step, from its found_inf: an Inf or NaN multiplies the scale by backoff_factor and resets
  // the count of good steps; a good step counts, and the growth_interval-th in a row multiplies the
  // scale by growth_factor (kept where that is not a finite float) and resets the count. The products
  // are taken in fp64 and rounded to float32, as torch's _amp_update_scale_. Where `apply` (a bool
  // scalar on the device) is false, the scale and the count keep their values (a step skipped for
  // another reason, of which nothing is kept); undefined, always updated.
  void update(const torch::Tensor& found_inf, const torch::Tensor& apply = {});

  // The state a checkpoint holds, as the live tensors (a restore copies into them):
  // scaler/scale (float32 [1]) and scaler/growth_tracker (int32 [1]), main_moco.py's `scaler`
  // state_dict's scale and _growth_tracker.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;

  const torch::Tensor& current_scale() const { return scale_; }
  const torch::Tensor& growth_tracker() const { return growth_tracker_; }
  const GradScalerOptions& options() const { return options_; }

 private:
  GradScalerOptions options_;
  torch::Tensor scale_, growth_tracker_;
};

}  // namespace moco::model
