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

// Where the device is chosen before MPI starts: the launchers' local rank, as the environment holds it.
TEST(LauncherLocalRank, APlainProcessHasNone) {
  EXPECT_FALSE(launcher_local_rank({}).has_value());
  EXPECT_FALSE(launcher_local_rank({{"OMPI_COMM_WORLD_SIZE", "4"}, {"PMI_SIZE", "4"}}).has_value());
}

TEST(LauncherLocalRank, OpenMpiHydraAndPmixNameRankAndSize) {
  const auto ompi = launcher_local_rank({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  ASSERT_TRUE(ompi.has_value());
  EXPECT_EQ(ompi->local_rank, 3);
  EXPECT_EQ(ompi->local_size, 4);
  EXPECT_EQ(ompi->variable, "OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_EQ(ompi->size_variable, "OMPI_COMM_WORLD_LOCAL_SIZE");

  const auto hydra = launcher_local_rank({{"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
  ASSERT_TRUE(hydra.has_value());
  EXPECT_EQ(hydra->local_rank, 1);
  EXPECT_EQ(hydra->local_size, 2);
  EXPECT_EQ(hydra->variable, "MPI_LOCALRANKID");

  const auto pmix = launcher_local_rank({{"PMIX_LOCAL_RANK", "5"}, {"PMIX_LOCAL_SIZE", "8"}});
  ASSERT_TRUE(pmix.has_value());
  EXPECT_EQ(pmix->local_rank, 5);
  EXPECT_EQ(pmix->local_size, 8);
  EXPECT_EQ(pmix->variable, "PMIX_LOCAL_RANK");

  const auto rank_only = launcher_local_rank({{"PMIX_LOCAL_RANK", "2"}});
  ASSERT_TRUE(rank_only.has_value());
  EXPECT_EQ(rank_only->local_rank, 2);
  EXPECT_FALSE(rank_only->local_size.has_value());
}

// Under mpirun in an allocation the ranks also inherit the daemons' Slurm and PMIx variables: the
// MPI launcher's own come first.
TEST(LauncherLocalRank, TheMpiLaunchersVariablesComeFirst) {
  const EnvMap under_mpirun = {{"SLURM_STEP_ID", "1"},
                               {"SLURM_LOCALID", "0"},
                               {"SLURM_NTASKS_PER_NODE", "1"},
                               {"PMIX_LOCAL_RANK", "0"},
                               {"OMPI_COMM_WORLD_RANK", "3"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  const auto found = launcher_local_rank(under_mpirun);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->variable, "OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_EQ(found->local_rank, 1);
  const auto hydra = launcher_local_rank({{"SLURM_STEP_ID", "0"}, {"SLURM_LOCALID", "0"}, {"MPI_LOCALRANKID", "1"}});
  ASSERT_TRUE(hydra.has_value());
  EXPECT_EQ(hydra->variable, "MPI_LOCALRANKID");
}

TEST(LauncherLocalRank, ASrunStepsSizeComesFromItsTasksOnThisNode) {
  EnvMap srun = {{"SLURM_STEP_ID", "0"},
                 {"SLURM_LOCALID", "1"},
                 {"SLURM_NODEID", "2"},
                 {"SLURM_STEP_TASKS_PER_NODE", "4(x2),2"},
                 {"SLURM_TASKS_PER_NODE", "4(x3)"},
                 {"SLURM_NTASKS_PER_NODE", "4"}};
  auto found = launcher_local_rank(srun);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->variable, "SLURM_LOCALID");
  EXPECT_EQ(found->local_rank, 1);
  EXPECT_EQ(found->local_size, 2) << "the step's list, at this node";
  EXPECT_EQ(found->size_variable, "SLURM_STEP_TASKS_PER_NODE='4(x2),2' at SLURM_NODEID=2");
  srun.erase("SLURM_STEP_TASKS_PER_NODE");
  EXPECT_EQ(launcher_local_rank(srun)->local_size, 4) << "the job's list";
  srun.erase("SLURM_TASKS_PER_NODE");
  EXPECT_EQ(launcher_local_rank(srun)->local_size, 4) << "what --ntasks-per-node asked for";
  EXPECT_EQ(launcher_local_rank(srun)->size_variable, "SLURM_NTASKS_PER_NODE");
  srun.erase("SLURM_NTASKS_PER_NODE");
  found = launcher_local_rank(srun);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->local_rank, 1);
  EXPECT_FALSE(found->local_size.has_value()) << "the rank alone is still a choice of device";
}

TEST(LauncherLocalRank, SlurmOutsideASrunStepIsNoLauncher) {
  // The batch script (step 0xfffffffe) or no step: SLURM_LOCALID is not an MPI rank's.
  EXPECT_FALSE(launcher_local_rank({{"SLURM_STEP_ID", "4294967294"}, {"SLURM_LOCALID", "0"}}).has_value());
  EXPECT_FALSE(launcher_local_rank({{"SLURM_LOCALID", "0"}}).has_value());
}

TEST(LauncherLocalRank, MalformedValuesAndARankPastTheSizeAreErrorsNamingTheVariable) {
  const auto error = [](const EnvMap& env) {
    try {
      launcher_local_rank(env);
    } catch (const DistError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string e = error({{"OMPI_COMM_WORLD_LOCAL_RANK", "one"}});
  EXPECT_NE(e.find("OMPI_COMM_WORLD_LOCAL_RANK='one' is not a non-negative integer"), std::string::npos) << e;
  e = error({{"PMIX_LOCAL_RANK", "0"}, {"PMIX_LOCAL_SIZE", "-2"}});
  EXPECT_NE(e.find("PMIX_LOCAL_SIZE='-2' is not a non-negative integer"), std::string::npos) << e;
  e = error({{"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "2"}});
  EXPECT_NE(e.find("MPI_LOCALRANKID=2 is not below the local size 2 (MPI_LOCALNRANKS)"), std::string::npos) << e;
  e = error({{"SLURM_STEP_ID", "0"}, {"SLURM_LOCALID", "3"}, {"SLURM_NODEID", "1"}, {"SLURM_TASKS_PER_NODE", "4,3"}});
  EXPECT_NE(e.find("SLURM_LOCALID=3 is not below the local size 3 (SLURM_TASKS_PER_NODE='4,3' at SLURM_NODEID=1)"),
            std::string::npos)
      << e;
}

TEST(SlurmTasksOnNode, ReadsTheCompressedPerNodeList) {
  for (int node = 0; node < 3; ++node) EXPECT_EQ(slurm_tasks_on_node("2(x3),1", node), 2) << node;
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_FALSE(slurm_tasks_on_node("2(x3),1", 4).has_value());
  EXPECT_EQ(slurm_tasks_on_node("8", 0), 8);
  EXPECT_EQ(slurm_tasks_on_node("1,4(x2),3", 2), 4);
  EXPECT_EQ(slurm_tasks_on_node("1,4(x2),3", 3), 3);
  EXPECT_FALSE(slurm_tasks_on_node("8", -1).has_value());
  for (const char* malformed : {"", "x", "2(x)", "2(3)", "2(x3", "-1", "2,,1"})
    EXPECT_FALSE(slurm_tasks_on_node(malformed, 1).has_value()) << malformed;
}

}  // namespace
}  // namespace moco::dist
