// The GoogleTest main of moco_tests: the same binary runs alone under ctest (world of one) and as N
// ranks under mpirun. Rank 0 prints the usual report; other ranks print only their failures; the
// exit code is 1 if any rank failed.
#include <gtest/gtest.h>

#include <cstdio>

#include "dist/bootstrap.h"
#include "dist/errors.h"
#include "dist/mpi_process_group.h"
#include "sys/openblas_kernels.h"
#include "test_world.h"

namespace {

// Other ranks' failures, one line each, prefixed with the rank: rank 0's report does not see them.
class RankFailurePrinter final : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  ::testing::InitGoogleTest(&argc, argv);
  // Under a launcher MPI starts now, so that only rank 0 prints. Alone, MPI starts on first use by a
  // test (init_world is idempotent): the ~0.3-0.6 s of a singleton start would otherwise be paid by
  // every ctest entry, most of which never touch MPI.
  moco::dist::WorldInfo world;
  const bool launched = moco::dist::launcher_world_size(moco::dist::launcher_env()).has_value();
  try {
    if (launched) world = moco::dist::init_world(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  if (world.rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world.rank));
  }

  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  if (world.world_size > 1) {
    try {
      // Bounded, unlike a bare MPI_Allreduce: a rank stuck in a test cannot hang the others here.
      moco::dist::MpiOptions options;
      options.timeout = std::chrono::seconds(60);
      moco::dist::MpiProcessGroup world_group(options);
      torch::Tensor flag = torch::tensor({failed}, torch::kInt32);
      world_group.all_reduce(flag, moco::dist::ReduceOp::kSum);
      failed = flag.item<int>() > 0 ? 1 : 0;
      if (failed && world.rank == 0)
        std::fprintf(stderr, "moco_tests: a test failed on some rank (see [rank N] lines)\n");
    } catch (const std::exception& e) {
      moco::dist::abort_world(e.what(), 1);
    }
  }
  release_test_world_group();
  moco::dist::finalize_world();
  // Alone (ctest's entry of one suite): every selected test skipped, none failed, is ctest's "skipped"
  // (SKIP_RETURN_CODE 77, tests/gtest_suites.cmake). Read from the results, not the printed summary:
  // a suite whose tests all fail also prints "[  PASSED  ] 0 tests".
  const auto& unit = *::testing::UnitTest::GetInstance();
  if (!failed && !launched && unit.successful_test_count() == 0 && unit.skipped_test_count() > 0) return 77;
  return failed;
}
