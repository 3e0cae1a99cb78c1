// The trainer's host syncs (docs/distributed.md, "Host syncs"): a step that does not report waits
// for nothing the device computes; a log step reads all the steps since the last one at once. On a
// GPU each such read would drain the queue of kernels; here every read_on_host call is counted.
#include "dist/process_group.h"
#include "run/host_reads.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace {

using moco::run::host_reads;

// host_reads() made by a one-rank CPU run of tiny_synthetic that stops after `steps` steps.
int64_t host_reads_of_run(const std::string& dir, int64_t steps, int64_t log_every) {
  std::filesystem::remove_all(dir);
  const auto config = moco::run::load_config(
      MOCO_TEST_DATA_DIR "/tiny_synthetic.yaml",
      {"train.output_dir=" + dir, "train.epochs=1", "train.stop_at_step=" + std::to_string(steps),
       "train.log_every=" + std::to_string(log_every), "train.threads=1", "ckpt.every_minutes=0", "ckpt.async=false",
       "dist.queue_check_every=0"});
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

}  // namespace
