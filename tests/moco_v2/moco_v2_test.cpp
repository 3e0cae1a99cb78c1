// dist.world_group_at_one: a world of one that rehearses world N (the GPU day's only multi-rank
// rehearsal: NCCL refuses two ranks on one GPU). The trainer's step must then issue the collectives
// of several ranks -- the reducer's bucket all-reduces from its gradient hooks, the per-step
// BatchNorm broadcast, the key shuffle's two all-to-alls -- and none without the switch. A group
// that counts the calls stands in for the MPI/NCCL group; cli.train.world_group_at_one runs the real
// MPI group and compares the losses and weights bit for bit.
#include "dist/process_group.h"
#include "app/methods.h"
#include "moco_v2/moco_v2.h"
#include "run/config.h"
#include "run/run_context.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace {

using namespace moco;

struct Counts {
  int all_reduces = 0, preagreed_all_reduces = 0, all_gathers = 0, broadcasts = 0, all_to_alls = 0;
};

// A world of one that counts its collectives by kind.
class CountingGroup final : public dist::ProcessGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::shared_ptr<dist::Work> all_reduce_async(torch::Tensor& tensor, dist::ReduceOp op) override {
    ++counts.all_reduces;
    return local_.all_reduce_async(tensor, op);
  }
  std::shared_ptr<dist::Work> all_reduce_async_preagreed(torch::Tensor& tensor, dist::ReduceOp op) override {
    ++counts.preagreed_all_reduces;
    return local_.all_reduce_async(tensor, op);
  }
  torch::Tensor all_gather(const torch::Tensor& tensor) override {
    ++counts.all_gathers;
    return tensor;
  }
  void broadcast(torch::Tensor&, int) override { ++counts.broadcasts; }
  torch::Tensor all_to_all(const torch::Tensor& input, const std::vector<int64_t>&,
                           const std::vector<int64_t>&) override {
    ++counts.all_to_alls;
    return input;
  }
  void barrier() override {}

  Counts counts;

 private:
  dist::LocalProcessGroup local_;
};

struct StepCollectives {
  int bucket_all_reduces = 0, broadcasts = 0, all_to_alls = 0, all_gathers = 0;
  int64_t gradient_bytes = 0;  // what the reducer says it averaged
  int64_t parameters = 0;      // trained ones (fp32)
};

// The collectives of the trainer's second step (the first may arm what it arms once) at world size
// 1, one BatchNorm group (the case with no shuffle of its own), the replica check off; the share of 8
// in pieces of `micro_batch` (0: one).
StepCollectives collectives_of_a_step(bool world_group_at_one, int64_t micro_batch = 0) {
  const auto config =
      run::load_config(moco::app::methods(), MOCO_TEST_DATA_DIR "/tiny_synthetic.yaml",
                       {"moco.bn_splits=1", "train.threads=1", "dist.queue_check_every=0",
                        std::string("dist.world_group_at_one=") + (world_group_at_one ? "true" : "false"),
                        "optim.micro_batch=" + std::to_string(micro_batch)});
  auto group = std::make_shared<CountingGroup>();
  run::RunContext context;
  context.group = group;
  moco_v2::MocoV2 method(config, context, /*in_channels=*/3);
  method.set_lr(0.03);
  torch::manual_seed(0);
  const int64_t side = config.data.augment.out_size;
  const data::TwoViewBatch batch{torch::randn({8, 3, side, side}), torch::randn({8, 3, side, side}),
                                 torch::zeros({8}, torch::kLong), torch::arange(8)};
  method.step(batch, 1);
  group->counts = Counts{};
  const auto out = method.step(batch, 2);
  const Counts& c = group->counts;
  return {c.preagreed_all_reduces, c.broadcasts,       c.all_to_alls,
          c.all_gathers,           out.gradient_bytes, method.facts().parameters};
}

TEST(WorldOfOneTest, TheSwitchKeepsTheCollectivesOfSeveralRanks) {
  const auto on = collectives_of_a_step(/*world_group_at_one=*/true);
  EXPECT_GT(on.bucket_all_reduces, 0) << "the reducer's gradient hooks launched no bucket";
  EXPECT_EQ(on.gradient_bytes, on.parameters * 4) << "every gradient goes through a bucket";
  // One per flat buffer of BatchNorm buffers: float (means, variances), int64 (batches tracked).
  EXPECT_EQ(on.broadcasts, 2) << "the per-step BatchNorm broadcast (dist.broadcast_buffers)";
  EXPECT_EQ(on.all_to_alls, 2) << "the key shuffle and unshuffle";
}

// optim.micro_batch: the reducer averages the step's gradients once (as many buckets as the whole
// share's), the keys are gathered once, each piece's keys are shuffled and unshuffled.
TEST(WorldOfOneTest, PiecesAverageTheGradientsOnceAndShuffleEachPiece) {
  const auto whole = collectives_of_a_step(/*world_group_at_one=*/true);
  const auto pieces = collectives_of_a_step(/*world_group_at_one=*/true, /*micro_batch=*/2);
  EXPECT_EQ(pieces.bucket_all_reduces, whole.bucket_all_reduces);
  EXPECT_EQ(pieces.gradient_bytes, whole.gradient_bytes);
  EXPECT_EQ(pieces.all_gathers, whole.all_gathers);
  EXPECT_EQ(pieces.all_to_alls, 4 * whole.all_to_alls) << "4 pieces, each shuffled and unshuffled";
  EXPECT_EQ(pieces.broadcasts, whole.broadcasts);
}

TEST(WorldOfOneTest, WithoutTheSwitchAWorldOfOneCommunicatesNothingItNeedsNot) {
  const auto off = collectives_of_a_step(/*world_group_at_one=*/false);
  EXPECT_EQ(off.bucket_all_reduces, 0);
  EXPECT_EQ(off.gradient_bytes, 0);
  EXPECT_EQ(off.broadcasts, 0);
  EXPECT_EQ(off.all_to_alls, 0);
}

}  // namespace
