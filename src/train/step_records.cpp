#include "train/step_records.h"

#include "run/host_reads.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

namespace moco::train {
namespace {

// acc@k of the contrastive task (%): how often the positive outscores all but fewer than k
// negatives. (100 * count) / n in double, as the host computed it before.
torch::Tensor accuracy(const torch::Tensor& positive_rank, int64_t k) {
  return positive_rank.lt(k).sum().to(torch::kDouble).mul(100.0).div(static_cast<double>(positive_rank.size(0)));
}

}  // namespace

void StepRecords::record(int64_t step, const run::StepOutput& out, double seconds, int64_t shuffle_bytes) {
  torch::NoGradGuard no_grad;
  device_rows_.push_back(torch::stack(
      {out.loss.detach().to(torch::kDouble), accuracy(out.positive_rank, 1), accuracy(out.positive_rank, 5)}));
  flag_rows_.push_back(out.nonfinite_by_rank.defined()
                           ? out.nonfinite_by_rank
                           : torch::zeros({group_.world_size()}, out.loss.options().dtype(torch::kInt32)));
  StepReport report;
  report.step = step;
  report.seconds = seconds;
  report.shuffle_bytes = shuffle_bytes;
  pending_.push_back(report);
}

void StepRecords::agreed(const HostAgreement& agreement) {
  if (agreed_ >= pending_.size() || pending_[agreed_].step != agreement.step)
    throw std::logic_error(fmt::format("step {}: an agreement for a step not recorded next", agreement.step));
  pending_[agreed_++].data_wait_s = agreement.data_wait_s;
}

std::vector<StepReport> StepRecords::drain() {
  if (agreed_ != pending_.size())
    throw std::logic_error(fmt::format("{} recorded step(s) have no agreement yet", pending_.size() - agreed_));
  std::vector<StepReport> reports;
  reports.swap(pending_);
  agreed_ = 0;
  if (reports.empty()) return reports;
  auto sums = torch::stack(device_rows_);
  const int world = group_.world_size();
  if (world > 1) group_.all_reduce(sums, dist::ReduceOp::kSum);
  const auto host = run::read_on_host(torch::cat({sums, torch::stack(flag_rows_).to(torch::kDouble)}, 1)).contiguous();
  device_rows_.clear();
  flag_rows_.clear();
  const auto* row = host.data_ptr<double>();
  const int64_t width = host.size(1);
  for (auto& report : reports) {
    report.loss = row[0] / world;
    report.acc1 = row[1] / world;
    report.acc5 = row[2] / world;
    for (int r = 0; r < world; ++r)
      if (row[3 + r] != 0) {
        report.skipped_by.push_back(r);
        report.skip_causes.push_back(static_cast<int32_t>(row[3 + r]));
      }
    row += width;
  }
  return reports;
}

}  // namespace moco::train
