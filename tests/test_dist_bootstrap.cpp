// init_world at any world size, and the launcher cross-check as a pure function fed with made-up
// environments (the Slurm cases cannot be launched here).
#include <gtest/gtest.h>
#include "dist/mpi_comm.h"  // <mpi.h> without its C++ bindings

#include "dist/bootstrap.h"
#include "dist/errors.h"

namespace moco::dist {
namespace {

std::string check_error(const WorldInfo& mpi, const EnvMap& env) {
  try {
    check_launcher_env(mpi, env);
  } catch (const DistError& e) {
    return e.what();
  }
  return "";
}

TEST(Bootstrap, InitWorldIsIdempotentAndConsistentWithMpi) {
  const WorldInfo a = init_world(nullptr, nullptr);
  const WorldInfo b = init_world(nullptr, nullptr);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.local_rank, b.local_rank);
  EXPECT_EQ(a.local_size, b.local_size);
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(a.rank, rank);
  EXPECT_EQ(a.world_size, size);
  EXPECT_GE(a.local_rank, 0);
  EXPECT_LT(a.local_rank, a.local_size);
  EXPECT_LE(a.local_size, a.world_size);
  if (auto launched = launcher_world_size(launcher_env())) {
    EXPECT_EQ(*launched, a.world_size);
  }
}

TEST(Bootstrap, PlainProcessIsAWorldOfOne) {
  if (launcher_world_size(launcher_env())) GTEST_SKIP() << "started by a launcher";
  const WorldInfo world = init_world(nullptr, nullptr);
  EXPECT_EQ(world.rank, 0);
  EXPECT_EQ(world.world_size, 1);
  EXPECT_EQ(world.local_rank, 0);
  EXPECT_EQ(world.local_size, 1);
}

TEST(Bootstrap, EnvCheckAcceptsMatchingOpenMpiVariables) {
  EXPECT_EQ(check_error({2, 4, 0, 2}, {{"OMPI_COMM_WORLD_RANK", "2"},
                                       {"OMPI_COMM_WORLD_SIZE", "4"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
            "");
  EXPECT_EQ(check_error({0, 1, 0, 1}, {}), "");
}

TEST(Bootstrap, EnvCheckNamesBothValuesOfEveryConflict) {
  // Four copies of a binary linked against another MPI: each believes it is rank 0 of 1.
  const std::string error = check_error({0, 1, 0, 1}, {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_EQ(error.rfind("rank 0: the launcher and MPI disagree: ", 0), 0u) << error;
  EXPECT_NE(error.find("OMPI_COMM_WORLD_RANK=2 but the MPI_COMM_WORLD rank is 0"), std::string::npos) << error;
  EXPECT_NE(error.find("OMPI_COMM_WORLD_SIZE=4 but the MPI_COMM_WORLD size is 1"), std::string::npos) << error;
}

TEST(Bootstrap, EnvCheckTrustsSlurmOnlyForTasksStartedBySrun) {
  const EnvMap srun = {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}};
  const std::string error = check_error({0, 1, 0, 1}, srun);
  EXPECT_NE(error.find("SLURM_PROCID=3 but the MPI_COMM_WORLD rank is 0"), std::string::npos) << error;
  EXPECT_NE(error.find("SLURM_NTASKS=4 but the MPI_COMM_WORLD size is 1"), std::string::npos) << error;
  EXPECT_NE(error.find("SLURM_LOCALID=1 but the node-local rank is 0"), std::string::npos) << error;
  EXPECT_EQ(check_error({3, 4, 1, 2}, srun), "");

  // mpirun inside an allocation: the ranks inherit the orted step's variables (node index, node
  // count); only Open MPI's own variables describe the rank.
  EnvMap under_mpirun = {{"SLURM_STEP_ID", "1"}, {"SLURM_PROCID", "0"},         {"SLURM_NTASKS", "1"},
                         {"SLURM_LOCALID", "0"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}};
  EXPECT_EQ(check_error({3, 4, 3, 4}, under_mpirun), "");
  // The batch script itself (step 0xfffffffe) or no step at all: a plain process in an allocation.
  EXPECT_EQ(check_error({0, 1, 0, 1}, {{"SLURM_STEP_ID", "4294967294"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}),
            "");
  EXPECT_EQ(check_error({0, 1, 0, 1}, {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}}), "");
}

TEST(Bootstrap, EnvCheckRejectsValuesThatAreNotNumbers) {
  const std::string error = check_error({0, 1, 0, 1}, {{"OMPI_COMM_WORLD_RANK", "abc"}});
  EXPECT_NE(error.find("OMPI_COMM_WORLD_RANK='abc' is not a non-negative integer"), std::string::npos) << error;
}

TEST(Bootstrap, LauncherWorldSizeComesFromTheLauncherThatStartedUs) {
  EXPECT_FALSE(launcher_world_size({}).has_value());
  EXPECT_EQ(launcher_world_size({{"OMPI_COMM_WORLD_SIZE", "4"}}), 4);
  EXPECT_EQ(launcher_world_size({{"PMI_SIZE", "2"}}), 2);
  EXPECT_EQ(launcher_world_size({{"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "8"}}), 8);
  EXPECT_FALSE(launcher_world_size({{"SLURM_STEP_ID", "4294967294"}, {"SLURM_NTASKS", "8"}}).has_value());
}

}  // namespace
}  // namespace moco::dist
