// The trainer's host syncs (docs/distributed.md, "Host syncs"): a step that does not report waits
// for nothing the device computes; a log step reads all the steps since the last one at once. On a
// GPU each such read would drain the queue of kernels; here every read_on_host call is counted.
#include "dist/process_group.h"
#include "app/methods.h"
#include "run/host_reads.h"
#include "test_world.h"
#include "train/step_sync_check.h"
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace moco;  // run::, train::
using moco::run::host_reads;

// host_reads() made by a one-rank CPU run of tiny_synthetic (MoCo v2; with `v3`, tiny_synthetic_v3 with
// AdamW, whose step count lives on the device) that stops after `steps` steps.
int64_t host_reads_of_run(const std::string& dir, int64_t steps, int64_t log_every, bool v3 = false) {
  std::filesystem::remove_all(dir);
  std::vector<std::string> overrides{"train.output_dir=" + dir,
                                     "train.epochs=1",
                                     "train.stop_at_step=" + std::to_string(steps),
                                     "train.log_every=" + std::to_string(log_every),
                                     "train.threads=1",
                                     "ckpt.every_minutes=0",
                                     "ckpt.async=false"};
  overrides.push_back(v3 ? "optim.optimizer=adamw" : "dist.queue_check_every=0");
  const auto config = moco::run::load_config(
      moco::app::methods(),
      v3 ? MOCO_TEST_DATA_DIR "/tiny_synthetic_v3.yaml" : MOCO_TEST_DATA_DIR "/tiny_synthetic.yaml", overrides);
  moco::run::RunContext context;
  context.group = std::make_shared<moco::dist::LocalProcessGroup>();
  const int64_t before = host_reads();
  const auto result = moco::train::train(config, context);
  EXPECT_EQ(result.steps, steps);
  std::filesystem::remove_all(dir);
  return host_reads() - before;
}

// 16 steps an epoch: runs of 4 and 12 steps differ by steps 5-12, of which 8 and 12 log. The rest
// of a run (the baselines, the last checkpoint) is the same in both and cancels.
TEST(HostSyncsTest, AStepReadsNothingAndALogStepReadsOnce) {
  const std::string dir = ::testing::TempDir() + "host_syncs_run";
  const int64_t short_run = host_reads_of_run(dir, 4, 4);
  const int64_t long_run = host_reads_of_run(dir, 12, 4);
  EXPECT_EQ(long_run - short_run, 2) << "8 more steps, 2 of them log steps";
  const int64_t logging_every_step = host_reads_of_run(dir, 12, 1);
  // The short run read once, at its step 4; logging every step reads at each of 12.
  EXPECT_EQ(logging_every_step - short_run, 12 - 1) << "with train.log_every=1 each step reads once";
}

// MoCo v3's step (its skip flag, AdamW's step count on the device) reads nothing either.
TEST(HostSyncsTest, AV3StepReadsNothingAndALogStepReadsOnce) {
  const std::string dir = ::testing::TempDir() + "host_syncs_v3_run";
  const int64_t short_run = host_reads_of_run(dir, 4, 4, /*v3=*/true);
  const int64_t long_run = host_reads_of_run(dir, 12, 4, /*v3=*/true);
  EXPECT_EQ(long_run - short_run, 2) << "8 more steps, 2 of them log steps";
}

// debug.check_step_syncs (StepSyncCheck) on the CPU: a counted read inside the step is an error.
TEST(HostSyncsTest, AReadInsideACheckedStepIsAnError) {
  const auto t = torch::ones({2});
  {
    const moco::train::StepSyncCheck check(/*on=*/true, torch::kCPU);
    EXPECT_THROW(run::read_on_host(t), std::logic_error);
  }
  EXPECT_NO_THROW(run::read_on_host(t));
  const moco::train::StepSyncCheck off(/*on=*/false, torch::kCPU);
  EXPECT_NO_THROW(run::read_on_host(t));
}

// host_reads() of a run of 8 steps on the job's ranks (one under ctest, two under mpi.host_syncs_np2),
// logging at steps 4 and 8, with debug.check_step_syncs and the replica check every `check_every` steps.
int64_t host_reads_of_checked_run(const std::string& dir, int64_t check_every) {
  const auto group = test_world_group();
  if (group->rank() == 0) std::filesystem::remove_all(dir);
  group->barrier();
  const auto config =
      moco::run::load_config(moco::app::methods(), MOCO_TEST_DATA_DIR "/tiny_synthetic.yaml",
                             {"train.output_dir=" + dir, "train.epochs=0.5", "train.log_every=4", "train.threads=1",
                              "ckpt.every_minutes=0", "ckpt.async=false", "knn.raw_baseline=false",
                              "debug.check_step_syncs=true", "dist.queue_check_every=" + std::to_string(check_every)});
  moco::run::RunContext context;
  context.group = group;
  const int64_t before = host_reads();
  moco::train::TrainResult result;
  EXPECT_NO_THROW(result = moco::train::train(config, context)) << "a host read inside a step";
  EXPECT_EQ(result.steps, 8);
  return host_reads() - before;
}

// The replica check (dist.queue_check_every, several ranks only) reads the queue, its pointer and
// the copy of the BN buffers taken at the step's start after the step, never inside it: with
// debug.check_step_syncs the run goes through, and each check step reads 3 more times.
TEST(HostSyncsTest, ACheckStepReadsOnlyAfterTheStep) {
  const std::string dir = ::testing::TempDir() + "host_syncs_check_run";
  const int64_t unchecked = host_reads_of_checked_run(dir, 0);
  const int64_t checked = host_reads_of_checked_run(dir, 2);
  const int world = test_world_group()->world_size();
  EXPECT_EQ(checked - unchecked, world > 1 ? 4 * 3 : 0) << "steps 2, 4, 6 and 8 check on " << world << " rank(s)";
}

}  // namespace
