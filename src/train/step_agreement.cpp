#include "train/step_agreement.h"

#include "preempt/preemption.h"

#include <torch/torch.h>

namespace moco::train {

StepAgreement agree_on_step(const StepAgreement& mine, dist::ProcessGroup& group) {
  const int world = group.world_size();
  auto sums = torch::tensor(
      {mine.loss, mine.train_seconds, preempt::signal_code(mine.stop_signal), mine.acc1, mine.acc5, mine.data_wait_s},
      torch::kDouble);
  if (world > 1) group.all_reduce(sums, dist::ReduceOp::kSum);
  StepAgreement agreed;
  agreed.loss = sums[0].item<double>() / world;
  agreed.train_seconds = sums[1].item<double>();
  agreed.stop_signal = preempt::signal_from_code(sums[2].item<double>());
  agreed.acc1 = sums[3].item<double>() / world;
  agreed.acc5 = sums[4].item<double>() / world;
  agreed.data_wait_s = sums[5].item<double>() / world;
  return agreed;
}

}  // namespace moco::train
