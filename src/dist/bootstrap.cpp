#include "dist/bootstrap.h"

#include "dist/mpi_comm.h"  // <mpi.h> without its C++ bindings
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <regex>
#include <sstream>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define MOCO_LEAK_CHECKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOCO_LEAK_CHECKS 1
#endif
#endif
#ifdef MOCO_LEAK_CHECKS
#include <sanitizer/lsan_interface.h>
#endif

#include "dist/errors.h"

namespace moco::dist {
namespace {

std::mutex g_world_mutex;
bool g_we_initialized = false;
std::optional<WorldInfo> g_world;

const char* const kEnvVars[] = {
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_STEP_ID",
    "PMI_SIZE",
    // launcher_local_rank's
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "PMIX_LOCAL_RANK",
    "PMIX_LOCAL_SIZE",
    "SLURM_NODEID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
};

const char* get(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

// An environment value that is not a plain non-negative integer is itself a launcher problem.
long long parse(const EnvMap& env, const char* name, int rank) {
  const char* text = get(env, name);
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno != 0 || value < 0)
    throw DistError(rank,
                    std::string("launcher environment: ") + name + "='" + text + "' is not a non-negative integer");
  return value;
}

// Slurm's step ids at and above 0xfffffff0 are the batch, extern, interactive and pending
// pseudo-steps: nothing there was started by srun as one task of an MPI job.
bool is_srun_step(const EnvMap& env) {
  if (get(env, "SLURM_STEP_ID") == nullptr || get(env, "OMPI_COMM_WORLD_RANK") != nullptr) return false;
  const char* step = get(env, "SLURM_STEP_ID");
  char* end = nullptr;
  const unsigned long long id = std::strtoull(step, &end, 10);
  return *step != '\0' && *end == '\0' && id < 0xfffffff0ULL;
}

void expect(const EnvMap& env, const char* name, long long mpi_value, const char* mpi_what, int rank,
            std::vector<std::string>& conflicts) {
  if (get(env, name) == nullptr) return;
  const long long claimed = parse(env, name, rank);
  if (claimed != mpi_value)
    conflicts.push_back(std::string(name) + "=" + std::to_string(claimed) + " but " + mpi_what + " is " +
                        std::to_string(mpi_value));
}

WorldInfo query_world() {
  WorldInfo info;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &info.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &info.world_size));
  // Ranks that share memory are the ones on this node: the local rank picks the GPU.
  MPI_Comm local = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, /*key=*/info.rank, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &info.local_rank));
  MPI_CHECK(MPI_Comm_size(local, &info.local_size));
  MPI_CHECK(MPI_Comm_free(&local));
  return info;
}

std::vector<std::string> g_hosts;

// Every rank's host name, in rank order (one fixed-size slot each).
std::vector<std::string> gather_hosts(int world_size) {
  constexpr int kSlot = 256;
  std::vector<char> mine(kSlot, '\0'), all(static_cast<size_t>(kSlot) * static_cast<size_t>(world_size), '\0');
  if (gethostname(mine.data(), kSlot - 1) != 0) mine.assign(kSlot, '\0');
  MPI_CHECK(MPI_Allgather(mine.data(), kSlot, MPI_CHAR, all.data(), kSlot, MPI_CHAR, MPI_COMM_WORLD));
  std::vector<std::string> hosts;
  for (int r = 0; r < world_size; ++r) hosts.emplace_back(all.data() + static_cast<size_t>(r) * kSlot);
  return hosts;
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "unknown thread level";
  }
}

// Sanitizer builds (tools/sanitize.sh): OpenMPI keeps memory from MPI_Init_thread to the end on
// purpose and loses some in MPI_Finalize, mostly in plugins it has unloaded by the time LeakSanitizer
// reports, so that tools/lsan.supp cannot name them. What this thread allocates inside those two
// calls is not leak-checked; none of our code runs there.
class OpenMpiAllocationsUnchecked {
 public:
  OpenMpiAllocationsUnchecked() {}
#ifdef MOCO_LEAK_CHECKS
 private:
  __lsan::ScopedDisabler disabler_;
#endif
};

}  // namespace

EnvMap launcher_env() {
  EnvMap env;
  for (const char* name : kEnvVars)
    if (const char* value = std::getenv(name)) env[name] = value;
  return env;
}

void check_launcher_env(const WorldInfo& mpi, const EnvMap& env) {
  std::vector<std::string> conflicts;
  expect(env, "OMPI_COMM_WORLD_RANK", mpi.rank, "the MPI_COMM_WORLD rank", mpi.rank, conflicts);
  expect(env, "OMPI_COMM_WORLD_SIZE", mpi.world_size, "the MPI_COMM_WORLD size", mpi.rank, conflicts);
  expect(env, "OMPI_COMM_WORLD_LOCAL_RANK", mpi.local_rank, "the node-local rank", mpi.rank, conflicts);
  expect(env, "OMPI_COMM_WORLD_LOCAL_SIZE", mpi.local_size, "the node-local size", mpi.rank, conflicts);
  if (is_srun_step(env)) {
    expect(env, "SLURM_PROCID", mpi.rank, "the MPI_COMM_WORLD rank", mpi.rank, conflicts);
    expect(env, "SLURM_NTASKS", mpi.world_size, "the MPI_COMM_WORLD size", mpi.rank, conflicts);
    expect(env, "SLURM_LOCALID", mpi.local_rank, "the node-local rank", mpi.rank, conflicts);
  }
  if (conflicts.empty()) return;
  std::string message = "the launcher and MPI disagree: ";
  for (size_t i = 0; i < conflicts.size(); ++i) message += (i ? "; " : "") + conflicts[i];
  message +=
      " (is the binary linked against the MPI library of the launcher, and srun given the right --mpi "
      "plugin?)";
  throw DistError(mpi.rank, message);
}

std::optional<int> launcher_world_size(const EnvMap& env) {
  const int unknown_rank = -1;
  if (get(env, "OMPI_COMM_WORLD_SIZE")) return static_cast<int>(parse(env, "OMPI_COMM_WORLD_SIZE", unknown_rank));
  if (get(env, "PMI_SIZE")) return static_cast<int>(parse(env, "PMI_SIZE", unknown_rank));
  if (is_srun_step(env) && get(env, "SLURM_NTASKS")) return static_cast<int>(parse(env, "SLURM_NTASKS", unknown_rank));
  return std::nullopt;
}

std::optional<int> slurm_tasks_on_node(const std::string& tasks_per_node, int node) {
  static const std::regex run(R"(^([0-9]{1,9})(\(x([0-9]{1,9})\))?$)");
  if (node < 0) return std::nullopt;
  long long first = 0;  // the first node of the run
  std::stringstream runs(tasks_per_node);
  for (std::string item; std::getline(runs, item, ',');) {
    std::smatch m;
    if (!std::regex_match(item, m, run)) return std::nullopt;
    const long long repeat = m[3].matched ? std::stoll(m[3].str()) : 1;
    if (node < first + repeat) return static_cast<int>(std::stoll(m[1].str()));
    first += repeat;
  }
  return std::nullopt;
}

namespace {

LauncherLocalRank local_rank_from(const EnvMap& env, const char* rank_variable, const char* size_variable) {
  const int unknown_rank = -1;
  LauncherLocalRank found;
  found.variable = rank_variable;
  found.local_rank = static_cast<int>(parse(env, rank_variable, unknown_rank));
  if (size_variable != nullptr && get(env, size_variable)) {
    found.local_size = static_cast<int>(parse(env, size_variable, unknown_rank));
    found.size_variable = size_variable;
  }
  return found;
}

// Slurm names a step's tasks per node in a list over the step's nodes; SLURM_NTASKS_PER_NODE is only
// what was asked for (--ntasks-per-node), which the last node may not hold.
void add_slurm_local_size(const EnvMap& env, LauncherLocalRank& found) {
  const int unknown_rank = -1;
  if (get(env, "SLURM_NODEID")) {
    const auto node = static_cast<int>(parse(env, "SLURM_NODEID", unknown_rank));
    for (const char* list : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
      if (!get(env, list)) continue;
      if (auto tasks = slurm_tasks_on_node(get(env, list), node)) {
        found.local_size = tasks;
        found.size_variable = std::string(list) + "='" + get(env, list) + "' at SLURM_NODEID=" + std::to_string(node);
        return;
      }
    }
  }
  if (get(env, "SLURM_NTASKS_PER_NODE")) {
    found.local_size = static_cast<int>(parse(env, "SLURM_NTASKS_PER_NODE", unknown_rank));
    found.size_variable = "SLURM_NTASKS_PER_NODE";
  }
}

}  // namespace

std::optional<LauncherLocalRank> launcher_local_rank(const EnvMap& env) {
  std::optional<LauncherLocalRank> found;
  if (get(env, "OMPI_COMM_WORLD_LOCAL_RANK")) {
    found = local_rank_from(env, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (get(env, "MPI_LOCALRANKID")) {
    found = local_rank_from(env, "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
  } else if (get(env, "PMIX_LOCAL_RANK")) {
    found = local_rank_from(env, "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE");
  } else if (is_srun_step(env) && get(env, "SLURM_LOCALID")) {
    found = local_rank_from(env, "SLURM_LOCALID", nullptr);
    add_slurm_local_size(env, *found);
  }
  if (found && found->local_size && found->local_rank >= *found->local_size) {
    throw DistError(-1, "launcher environment: " + found->variable + "=" + std::to_string(found->local_rank) +
                            " is not below the local size " + std::to_string(*found->local_size) + " (" +
                            found->size_variable + ")");
  }
  return found;
}

// The reducer's gradient all-reduces are nonblocking. Open MPI's default choice for MPI_Iallreduce
// (libnbc) reaches a third of MPI_Allreduce's bandwidth on large buffers here (2.6 vs 6.9 GB/s on
// 5 MiB, 1.0 vs 3.1 GB/s on 46 MiB, 2 ranks), its ring algorithm the same as MPI_Allreduce: choose
// the ring, unless the user chose otherwise (a variable set by the user or by mpirun -mca wins).
// Other MPI libraries ignore the variable.
namespace {
void prefer_ring_iallreduce() { setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0); }
}  // namespace

WorldInfo init_world(int* argc, char*** argv) {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  if (g_world) return *g_world;
  // Read before MPI_Init: the library may export its own OMPI_* variables while starting, and the
  // check is about what the launcher said.
  const EnvMap env = launcher_env();
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    prefer_ring_iallreduce();
    int rc = MPI_SUCCESS;
    {
      const OpenMpiAllocationsUnchecked unchecked;
      rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    }
    if (rc != MPI_SUCCESS) throw DistError(-1, "MPI_Init_thread failed with code " + std::to_string(rc));
    g_we_initialized = true;
  } else {
    MPI_CHECK(MPI_Query_thread(&provided));
  }
  // Report failures as return codes we turn into DistError, not as an abort inside the library.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  WorldInfo info = query_world();
  if (provided < MPI_THREAD_SERIALIZED)
    throw DistError(info.rank, std::string("MPI provides ") + thread_level_name(provided) +
                                   ", but collectives may come from autograd threads and need MPI_THREAD_SERIALIZED");
  check_launcher_env(info, env);
  g_hosts = gather_hosts(info.world_size);
  g_world = info;
  return info;
}

const std::vector<std::string>& world_hosts() { return g_hosts; }

std::string broadcast_from_rank0(const std::string& text) {
  int length = static_cast<int>(text.size());
  MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string out = text;
  out.resize(static_cast<size_t>(length));
  MPI_CHECK(MPI_Bcast(out.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD));
  return out;
}

void finalize_world() {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (g_we_initialized && initialized && !finalized) {
    const OpenMpiAllocationsUnchecked unchecked;
    MPI_Finalize();
  }
  g_world.reset();
}

namespace {

// Whether the default logger writes to the terminal. Ranks other than 0 log to their file alone.
bool logs_to_console() {
  for (const auto& sink : spdlog::default_logger()->sinks())
    if (std::dynamic_pointer_cast<spdlog::sinks::stdout_color_sink_mt>(sink) ||
        std::dynamic_pointer_cast<spdlog::sinks::stderr_color_sink_mt>(sink))
      return true;
  return false;
}

}  // namespace

void abort_world(const std::string& why, int code) {
  // A DistError's text already names the rank; anything else gets it here.
  const std::string line = why.rfind("rank ", 0) == 0
                               ? fmt::format("{}; aborting every rank", why)
                               : fmt::format("rank {}: {}; aborting every rank", world_rank_or_unknown(), why);
  spdlog::critical("{}", line);
  spdlog::default_logger()->flush();
  // The reason reaches the terminal from any rank: the abort ends rank 0 before it could say it, and
  // this rank's log file may be what failed (its folder deleted). CI saw a job end with no reason.
  if (!logs_to_console()) std::fprintf(stderr, "[critical] %s\n", line.c_str());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  // MPI_Abort should not return; if it does, or MPI is gone, this process still ends.
  std::_Exit(code);
}

}  // namespace moco::dist
