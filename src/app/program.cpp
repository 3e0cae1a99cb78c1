#include "app/program.h"

#include "dist/bootstrap.h"
#include "dist/process_group.h"
#include "preempt/preemption.h"
#include "run/data_agreement.h"
#include "run/device.h"
#include "run/memory_plan.h"
#include "run/run_logging.h"
#include "run/run_output.h"
#include "run/setup.h"
#include "sys/folder_lock.h"
#include "sys/host_memory.h"
#include "sys/openblas_kernels.h"
#include "sys/workarounds.h"

#include <spdlog/spdlog.h>

#include <iostream>

namespace moco::app {

void start_process() {
  sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  sys::keep_freed_host_memory();
}

std::optional<int> read_config(const std::string& path, const std::vector<std::string>& overrides, bool print_config,
                               run::Config& config) {
  try {
    config = run::load_config(methods(), path, overrides);
    if (print_config) {
      std::cout << run::to_yaml(config);
      return 0;
    }
  } catch (const run::ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", path, e.what());
    return 2;
  } catch (...) {
    spdlog::error("{}: unexpected error while reading the config", path);
    return 2;
  }
  return std::nullopt;
}

namespace {

// What outlives the try block of run_job: the world joined, the log to undo and the folder's lock.
struct JobState {
  dist::WorldInfo world;
  std::optional<run::LogUndo> log_undo;
  sys::FolderLock folder_lock;  // held until run_job returns; the kernel drops it at any other end

  // Nothing may reach std::terminate: every failure ends as exit 1 or 2 with a message, and with
  // several ranks takes the others down too (they may wait in a collective this rank never joins).
  int fail(const std::string& why, int code) const {
    if (world.world_size > 1) dist::abort_world(why, code);
    spdlog::error("{}", why);
    dist::finalize_world();
    return code;
  }
};

// The checks that need the world, the output folder, the logs and the context, then the body.
void start_and_run(const JobProgram& p, const run::Config& config, JobState& s, int argc, char** argv) {
  // Before MPI starts, which may open a CUDA context on the current device (run/device.h).
  const auto early_device = run::choose_device_before_mpi();
  s.world = dist::init_world(&argc, &argv);
  preempt::install_preemption_handlers();
  // The world size is known now: a batch that does not split over the ranks is the config's fault,
  // reported before any folder is made or data read.
  run::validate_for_world(config, s.world.world_size, p.source, p.job);
  run::check_data(config, p.source, s.world.rank == 0, /*file_list_in_output_dir=*/p.writes_output);
  run::RunContext context;
  context.dry_run = p.dry_run;
  context.device = run::select_device(s.world, early_device);
  context.local_size = s.world.local_size;
  if (p.before_output) p.before_output(config, context.device);
  if (p.writes_output) {
    s.log_undo.emplace(config.train.output_dir, s.world.rank);
    // Before the first write into the folder: a second run there stops here, having written nothing.
    run::lock_output_dir(config.train.output_dir, "train.output_dir", s.world.rank, s.folder_lock);
  }
  run::setup_logging(config.train.output_dir, s.world.rank, s.world.world_size, config.dist.log_all_ranks,
                     p.writes_output);
  spdlog::info("{}", run::describe_placement(s.world, context.device, early_device));
  spdlog::info("memory (estimated before the model is built): {}",
               run::describe_memory(run::step_memory(config, s.world.world_size, p.job), run::memory_limit()));
  if (const auto pieces = run::describe_pieces(config, s.world.world_size, p.job); !pieces.empty())
    spdlog::info("{}", pieces);
  sys::log_workarounds();
  context.group = run::make_job_group(config, s.world.world_size, context.device);
  run::check_ranks_agree_on_data(config, *context.group);  // before step 1: a stale copy is named
  p.body(context);
}

}  // namespace

int run_job(const JobProgram& program, const run::Config& config, int argc, char** argv) {
  JobState s;
  try {
    start_and_run(program, config, s, argc, argv);
  } catch (const run::FolderInUse& e) {
    // Every rank knows (lock_output_dir is collective): all end with exit 2, none aborts the others.
    if (s.world.rank == 0) spdlog::error("{}", e.what());
    dist::finalize_world();
    return 2;
  } catch (const run::ConfigError& e) {
    s.folder_lock.release();             // first: the undo removes a folder this run made only if empty
    if (s.log_undo) s.log_undo->undo();  // a refusal writes nothing: the log it started goes too
    // Found once the ranks could look (a checkpoint's saved config, the world size): still the
    // config's fault, still before any training.
    return s.fail(e.what(), 2);
  } catch (const std::exception& e) {
    return s.fail(e.what(), 1);
  } catch (...) {
    return s.fail("unexpected error (not a std::exception)", 1);
  }
  dist::finalize_world();
  return 0;
}

int run_tool(const std::string& program, const std::function<int()>& body,
             const std::function<bool(const std::exception&)>& is_refusal) {
  try {
    return body();
  } catch (const Refusal& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return is_refusal && is_refusal(e) ? 2 : 1;
  }
}

}  // namespace moco::app
