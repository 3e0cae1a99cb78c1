// defines: WorldInfo, init_world / finalize_world / abort_world (the MPI lifetime of a process),
// check_launcher_env and launcher_world_size (pure checks of what the launcher's environment claims),
// launcher_local_rank / slurm_tasks_on_node (the node-local rank before MPI starts, for the device).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moco::dist {

struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // among the ranks sharing this node's memory (MPI_COMM_TYPE_SHARED)
  int local_size = 1;
};

// Initialises MPI once per process and describes the world; later calls return the same answer.
// A process started without a launcher is a world of one (MPI singleton init). Throws DistError when
// the launcher's environment disagrees with MPI (see check_launcher_env), which is the signature of a
// binary linked against a different MPI than the one that launched it: every copy believes it is
// rank 0 of 1.
//
// Thread level: MPI_THREAD_SERIALIZED. Collectives may be issued from a thread other than the one
// that called init_world (autograd runs gradient hooks of device tensors on its own threads), but
// never from two threads at once: MpiProcessGroup serialises its own MPI calls with a process-wide
// mutex. FUNNELED would forbid the first; MULTIPLE would make every MPI call pay for locking we do
// not need.
WorldInfo init_world(int* argc, char*** argv);

// The host name of every world rank, gathered by init_world (empty before it): errors that name
// ranks can say which host they are on.
const std::vector<std::string>& world_hosts();

// Rank 0's `text` on every rank of the world (two MPI_Bcast on MPI_COMM_WORLD; every rank must call
// it): a verdict that only rank 0 can reach, acted on alike by every rank before any process group
// exists (the output folder's lock).
std::string broadcast_from_rank0(const std::string& text);

// MPI_Finalize if init_world initialised MPI and nobody has finalised it yet. Safe to call twice.
void finalize_world();

// For errors after which the communicators cannot be trusted (a collective timed out, ranks
// disagreed): logs `why` on this rank and takes every rank of the job down with MPI_Abort. Falls back
// to terminating this process alone when MPI is not running.
[[noreturn]] void abort_world(const std::string& why, int code = 1);

using EnvMap = std::map<std::string, std::string>;

// The variables check_launcher_env reads, taken from this process's environment.
EnvMap launcher_env();

// Throws DistError naming both values and the variable when what the launcher put in the
// environment contradicts what MPI reports. Which variables count:
//  - OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}: set by Open MPI's launcher (mpirun, or its
//    orted daemons) for exactly this process; always checked when present.
//  - SLURM_{PROCID,NTASKS,LOCALID}: describe this process only when srun started it directly (a
//    real job step: SLURM_STEP_ID set and below Slurm's special ids for the batch/extern/
//    interactive steps) and no MPI launcher sits in between (OMPI_COMM_WORLD_RANK unset). Under
//    mpirun inside an allocation, the ranks inherit the Slurm variables of the orted step (the
//    node index, the number of nodes) or of the batch script (0, the allocation's tasks), neither
//    of which is the MPI rank.
// `mpi` is what MPI reported; pure so that tests can feed any environment.
void check_launcher_env(const WorldInfo& mpi, const EnvMap& env);

// The world size the launcher promises, if the environment names one (Open MPI's mpirun, MPICH's
// Hydra through PMI_SIZE, a direct srun step); nullopt for a plain process. Pure.
std::optional<int> launcher_world_size(const EnvMap& env);

// This process's node-local rank as its launcher put it in the environment, read before MPI starts
// so that the device can be chosen first (run::choose_device_before_mpi).
struct LauncherLocalRank {
  int local_rank = 0;
  std::optional<int> local_size;  // when the launcher says
  std::string variable;           // where local_rank came from, e.g. "OMPI_COMM_WORLD_LOCAL_RANK"
  std::string size_variable;      // where local_size came from, if it did
};

// The first launcher, in this order, that names the local rank:
//  - Open MPI: OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE;
//  - MPICH's Hydra: MPI_LOCALRANKID, MPI_LOCALNRANKS;
//  - PMIx (srun --mpi=pmix, PALS): PMIX_LOCAL_RANK, PMIX_LOCAL_SIZE;
//  - a direct srun step (as check_launcher_env decides: under mpirun the Slurm variables are the
//    daemons'): SLURM_LOCALID; the size from SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE,
//    at SLURM_NODEID, else SLURM_NTASKS_PER_NODE.
// nullopt for a plain process. Throws DistError (rank unknown) naming a variable whose value is not a
// non-negative integer, or a local rank not below its local size. Pure.
std::optional<LauncherLocalRank> launcher_local_rank(const EnvMap& env);

// The tasks on node `node` (0-based) in Slurm's per-node list, which runs of equal counts compress:
// "2(x3),1" is 2, 2, 2, 1. nullopt when the list is malformed or has no such node. Pure.
std::optional<int> slurm_tasks_on_node(const std::string& tasks_per_node, int node);

}  // namespace moco::dist
