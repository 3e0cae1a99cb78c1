// Probes for moco_tests' own exit codes (ctest build.harness_exit_codes), DISABLED_ so that no suite
// entry runs them: a selection with a failing test exits 1, never ctest's "skipped" 77 (a suite entry
// once read "[  PASSED  ] 0 tests", which a failing suite prints too, as skipped); one whose tests all
// skip exits 77.
#include <gtest/gtest.h>

TEST(DISABLED_HarnessProbe, Fails) { FAIL() << "fails on purpose: build.harness_exit_codes checks the exit code"; }

TEST(DISABLED_HarnessProbe, Skips) {
  GTEST_SKIP() << "skips on purpose: build.harness_exit_codes checks the exit code";
}
