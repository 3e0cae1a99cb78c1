#include "train/step_records.h"

#include "run/host_reads.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

namespace moco::train {
void StepRecords::record(int64_t step, const run::StepOutput& out, double seconds, int64_t shuffle_bytes,
                         int64_t images) {
  torch::NoGradGuard no_grad;
  auto loss = out.loss.detach().to(torch::kDouble).reshape({1});
  device_rows_.push_back(out.scalars.defined() ? torch::cat({loss, out.scalars.to(torch::kDouble)}) : loss);
  flag_rows_.push_back(out.nonfinite_by_rank.defined()
                           ? out.nonfinite_by_rank
                           : torch::zeros({group_.world_size()}, out.loss.options().dtype(torch::kInt32)));
  StepReport report;
  report.step = step;
  report.seconds = seconds;
  report.shuffle_bytes = shuffle_bytes;
  report.images = images;
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
  const int64_t values = width - world;  // the loss, then the method's scalars
  for (auto& report : reports) {
    report.loss = row[0] / world;
    for (int64_t i = 1; i < values; ++i) report.scalars.push_back(row[i] / world);
    for (int r = 0; r < world; ++r)
      if (row[values + r] != 0) {
        report.skipped_by.push_back(r);
        report.skip_causes.push_back(static_cast<int32_t>(row[values + r]));
      }
    row += width;
  }
  return reports;
}

}  // namespace moco::train
