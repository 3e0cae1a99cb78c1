// StepRecords keeps each step's loss, the method's scalars and skip flags on the device and gives them
// to the host together: the same values the host used to read step by step, in step order.
#include "train/step_records.h"

#include "model/positive_rank.h"
#include "run/host_reads.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

moco::run::StepOutput step_output(float loss, std::vector<int64_t> positive_rank, int32_t nonfinite) {
  moco::run::StepOutput out;
  out.loss = torch::tensor(loss);
  out.scalars = moco::model::positive_rank_accuracies(torch::tensor(positive_rank), {1, 5});
  out.nonfinite_by_rank = torch::full({1}, nonfinite, torch::kInt32);
  out.trained = out.nonfinite_by_rank.sum().eq(0);
  return out;
}

TEST(StepRecordsTest, GivesEachStepsLossScalarsAndSkipsInOrderWithOneHostRead) {
  moco::dist::LocalProcessGroup group;
  moco::train::StepRecords records(group);
  // Ranks of the positive among the negatives: 0 is a top-1 hit, 0-4 top-5.
  records.record(7, step_output(2.5f, {0, 1, 0, 5}, 0), 0.25, 100, 4);  // ranks 1 and 5: just outside top-1 and top-5
  records.record(8, step_output(NAN, {1, 1, 1, 1}, 6), 0.5, 200);       // keys and loss (model::NonfiniteCause)
  records.agreed({7, 0.0, 0, 0.125});
  records.agreed({8, 0.0, 0, 0.375});
  EXPECT_THROW(records.agreed({9, 0.0, 0, 0.0}), std::logic_error);
  const int64_t reads_before = moco::run::host_reads();
  const auto reports = records.drain();
  EXPECT_EQ(moco::run::host_reads() - reads_before, 1);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].step, 7);
  EXPECT_TRUE(reports[0].trained());
  EXPECT_EQ(reports[0].loss, 2.5);
  EXPECT_EQ(reports[0].scalars, (std::vector<double>{50.0, 75.0}));  // acc@1, acc@5
  EXPECT_EQ(reports[0].images, 4);
  EXPECT_EQ(reports[0].seconds, 0.25);
  EXPECT_EQ(reports[0].data_wait_s, 0.125);
  EXPECT_EQ(reports[0].shuffle_bytes, 100);
  EXPECT_EQ(reports[1].step, 8);
  EXPECT_EQ(reports[1].skipped_by, std::vector<int>{0});
  EXPECT_EQ(reports[1].skip_causes, std::vector<int32_t>{6});
  EXPECT_EQ(reports[1].data_wait_s, 0.375);
  EXPECT_TRUE(records.empty());
  EXPECT_TRUE(records.drain().empty());
}

TEST(StepRecordsTest, RefusesToDrainStepsWithoutTheirAgreement) {
  moco::dist::LocalProcessGroup group;
  moco::train::StepRecords records(group);
  records.record(1, step_output(1.0f, {0}, 0), 0.1, 0);
  EXPECT_THROW(records.drain(), std::logic_error);
}

}  // namespace
