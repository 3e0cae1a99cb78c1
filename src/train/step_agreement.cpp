#include "train/step_agreement.h"

#include "preempt/preemption.h"

#include <torch/torch.h>

#include <utility>

namespace moco::train {

StepAgreements::StepAgreements(dist::ProcessGroup& group, HostAgreement start) : group_(group), latest_(start) {}

StepAgreements::~StepAgreements() {
  // Still in flight only when the run ends by an exception, maybe because a peer is gone: waiting
  // could take dist.timeout_s, so its buffer and request are left to the process's end instead.
  if (work_) new std::pair<torch::Tensor, std::shared_ptr<dist::Work>>(sums_, work_);  // NOLINT: leaked on purpose
}

std::optional<HostAgreement> StepAgreements::start(const HostAgreement& mine) {
  auto done = complete();
  sums_ = torch::tensor({mine.train_seconds, preempt::signal_code(mine.stop_signal), mine.data_wait_s}, torch::kDouble);
  // The shape never changes, so it is agreed once (this first, checked call) and not again each step.
  if (group_.world_size() > 1)
    work_ = shape_agreed_ ? group_.all_reduce_async_preagreed(sums_, dist::ReduceOp::kSum)
                          : group_.all_reduce_async(sums_, dist::ReduceOp::kSum);
  shape_agreed_ = true;
  in_flight_step_ = mine.step;
  return done;
}

std::optional<HostAgreement> StepAgreements::complete() {
  if (in_flight_step_ == 0) return std::nullopt;
  if (work_) work_->wait();
  work_.reset();
  const auto* sums = sums_.data_ptr<double>();
  latest_.step = in_flight_step_;
  latest_.train_seconds = sums[0];
  latest_.stop_signal = preempt::signal_from_code(sums[1]);
  latest_.data_wait_s = sums[2] / group_.world_size();
  in_flight_step_ = 0;
  return latest_;
}

}  // namespace moco::train
