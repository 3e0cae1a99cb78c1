// The test hooks (sys/fault_hooks.h) parse what the end-to-end tests set (faults.nan_*, ckpt.kill_*),
// hit only the step, rank and save asked for, and refuse a malformed value naming the expected form.
#include "sys/fault_hooks.h"

#include "scoped_env.h"
#include "thrown_message.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace {

using moco::sys::CheckpointFaultKind;
using moco::sys::FaultHooks;
using moco::test::ScopedEnv;

TEST(FaultHooksTest, NoNanInjectionWithoutTheVariable) {
  ScopedEnv unset("MOCO_INJECT_NAN", nullptr);
  const auto n = FaultHooks().nan_injection();
  for (int64_t step = 0; step < 5; ++step) EXPECT_FALSE(n.hits(step, 0)) << step;
}

TEST(FaultHooksTest, NanInjectionHitsItsStepAndRankOnly) {
  ScopedEnv set("MOCO_INJECT_NAN", "3:1");
  const auto n = FaultHooks().nan_injection();
  EXPECT_TRUE(n.hits(3, 1));
  EXPECT_FALSE(n.hits(3, 0));
  EXPECT_FALSE(n.hits(2, 1));
  EXPECT_FALSE(n.hits(4, 1));
}

TEST(FaultHooksTest, NanInjectionRankDefaultsToZero) {
  ScopedEnv set("MOCO_INJECT_NAN", "7");
  const auto n = FaultHooks().nan_injection();
  EXPECT_TRUE(n.hits(7, 0));
  EXPECT_FALSE(n.hits(7, 1));
}

TEST(FaultHooksTest, NanInjectionTargetsQueriesByDefaultAndWhatItNames) {
  using moco::sys::NanTarget;
  {
    ScopedEnv set("MOCO_INJECT_NAN", "3:1");
    const auto n = FaultHooks().nan_injection();
    EXPECT_TRUE(n.hits(3, 1, NanTarget::kQueries));
    EXPECT_FALSE(n.hits(3, 1, NanTarget::kKeys));
  }
  const std::pair<const char*, NanTarget> cases[] = {{"5:1:queries", NanTarget::kQueries},
                                                     {"5:1:keys", NanTarget::kKeys},
                                                     {"5:1:loss", NanTarget::kLoss},
                                                     {"5:1:grads", NanTarget::kGradients}};
  for (const auto& [value, target] : cases) {
    ScopedEnv set("MOCO_INJECT_NAN", value);
    const auto n = FaultHooks().nan_injection();
    for (const auto& [other_value, other] : cases) EXPECT_EQ(n.hits(5, 1, other), other == target) << value;
    EXPECT_FALSE(n.hits(5, 0, target)) << value;
  }
}

TEST(FaultHooksTest, MalformedNanInjectionIsRefused) {
  for (const char* value : {"soon", "", "3:", "3:1:weights", "3:1:keys:2"}) {
    ScopedEnv set("MOCO_INJECT_NAN", value);
    EXPECT_EQ(moco::test::error_of([] { FaultHooks().nan_injection(); }),
              std::string("MOCO_INJECT_NAN='") + value + "': expected STEP[:RANK[:queries|keys|loss|grads]]");
  }
}

TEST(FaultHooksTest, NoCheckpointFaultWithoutTheVariable) {
  ScopedEnv unset("MOCO_CKPT_FAULT", nullptr);
  FaultHooks hooks;
  EXPECT_EQ(hooks.checkpoint_fault(2).kind, CheckpointFaultKind::kNone);
  ScopedEnv empty("MOCO_CKPT_FAULT", "");
  EXPECT_EQ(hooks.checkpoint_fault(4).kind, CheckpointFaultKind::kNone);
}

TEST(FaultHooksTest, CheckpointFaultWithoutStepHitsTheFirstSaveOnly) {
  ScopedEnv set("MOCO_CKPT_FAULT", "kill_before_manifest");
  FaultHooks hooks;
  const auto first = hooks.checkpoint_fault(2);
  EXPECT_EQ(first.kind, CheckpointFaultKind::kKillBeforeManifest);
  EXPECT_EQ(first.rank, 0);
  EXPECT_EQ(hooks.checkpoint_fault(4).kind, CheckpointFaultKind::kNone);
}

TEST(FaultHooksTest, CheckpointFaultWithStepHitsThatSave) {
  ScopedEnv set("MOCO_CKPT_FAULT", "kill_in_shard:1@4");
  FaultHooks hooks;
  EXPECT_EQ(hooks.checkpoint_fault(2).kind, CheckpointFaultKind::kNone);
  const auto at_4 = hooks.checkpoint_fault(4);
  EXPECT_EQ(at_4.kind, CheckpointFaultKind::kKillInShard);
  EXPECT_EQ(at_4.rank, 1);
  EXPECT_EQ(hooks.checkpoint_fault(6).kind, CheckpointFaultKind::kNone);
}

TEST(FaultHooksTest, PauseInShardNamesItsRankAndStep) {
  ScopedEnv set("MOCO_CKPT_FAULT", "pause_in_shard:2@10");
  FaultHooks hooks;
  EXPECT_EQ(hooks.checkpoint_fault(5).kind, CheckpointFaultKind::kNone);
  const auto at_10 = hooks.checkpoint_fault(10);
  EXPECT_EQ(at_10.kind, CheckpointFaultKind::kPauseInShard);
  EXPECT_EQ(at_10.rank, 2);
}

TEST(FaultHooksTest, PausesAtTheCommitNameTheirStep) {
  ScopedEnv set("MOCO_CKPT_FAULT", "pause_before_manifest@16");
  FaultHooks hooks;
  EXPECT_EQ(hooks.checkpoint_fault(8).kind, CheckpointFaultKind::kNone);
  EXPECT_EQ(hooks.checkpoint_fault(16).kind, CheckpointFaultKind::kPauseBeforeManifest);
  ScopedEnv latest("MOCO_CKPT_FAULT", "pause_before_latest");
  FaultHooks fresh;
  EXPECT_EQ(fresh.checkpoint_fault(4).kind, CheckpointFaultKind::kPauseBeforeLatest);  // the first save
}

TEST(FaultHooksTest, PauseInExportIsNamed) {
  ScopedEnv set("MOCO_CKPT_FAULT", "pause_in_export");
  EXPECT_EQ(FaultHooks().checkpoint_fault(0).kind, CheckpointFaultKind::kPauseInExport);
  ScopedEnv before_read("MOCO_CKPT_FAULT", "pause_before_export_read");
  EXPECT_EQ(FaultHooks().checkpoint_fault(0).kind, CheckpointFaultKind::kPauseBeforeExportRead);
  ScopedEnv pack("MOCO_CKPT_FAULT", "pause_in_pack_commit");
  EXPECT_EQ(FaultHooks().checkpoint_fault(0).kind, CheckpointFaultKind::kPauseInPackCommit);
}

TEST(FaultHooksTest, MalformedCheckpointFaultIsRefused) {
  for (const char* bad : {"kill_somewhere", "kill_in_shard:x", "kill_in_shard@", "kill_in_shard:1@4 "}) {
    ScopedEnv set("MOCO_CKPT_FAULT", bad);
    EXPECT_EQ(
        moco::test::error_of([] { FaultHooks().checkpoint_fault(2); }),
        std::string("MOCO_CKPT_FAULT='") + bad +
            "': expected kill_in_shard|kill_before_manifest|pause_in_shard|pause_before_manifest|pause_before_latest"
            "|pause_in_export|pause_before_export_read|pause_in_pack_commit[:RANK][@STEP]");
  }
}

}  // namespace
