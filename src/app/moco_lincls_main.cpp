// moco_lincls: the linear classification protocol on a frozen backbone (MoCo's main_lincls.py).
// Parses the command line, joins the MPI job (a world of one without a launcher), loads
// model.pretrained and hands over to run_lincls().
#include "app/parse_command_line.h"
#include "dist/bootstrap.h"
#include "dist/process_group.h"
#include "lincls/backbone.h"
#include "lincls/backbone_pin.h"
#include "lincls/lincls.h"
#include "preempt/preemption.h"
#include "run/config.h"
#include "run/data_agreement.h"
#include "run/device.h"
#include "run/run_logging.h"
#include "run/run_output.h"
#include "run/setup.h"
#include "sys/host_memory.h"
#include "sys/openblas_kernels.h"
#include "sys/workarounds.h"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

// The config file with the overrides applied, or the exit code: 2 for a bad config, 0 once printed
// (--print-config).
std::optional<int> read_config(const std::string& config_path, const std::vector<std::string>& overrides,
                               bool print_config, moco::run::Config& config) {
  try {
    config = moco::run::load_config(config_path, overrides);
    if (print_config) {
      std::cout << moco::run::to_yaml(config);
      return 0;
    }
  } catch (const moco::run::ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", config_path, e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  moco::sys::keep_freed_host_memory();
  CLI::App app{
      "moco_lincls: linear classification on frozen features (the protocol of MoCo's main_lincls.py).\n"
      "Loads the backbone model.pretrained names, trains a linear classifier (lincls.*) on the train split, reports\n"
      "top-1/top-5 on the test split every epoch (train.output_dir/metrics.jsonl), checks the backbone is unchanged.\n"
      "One process per device: run it under mpirun or srun for several ranks, plain for one."};
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  app.add_option("-c,--config", config_path, "YAML config file (see configs/*lincls*.yaml)")->required();
  app.add_option("overrides", overrides,
                 "key=value settings applied over the file, e.g. model.pretrained=runs/fashion_mnist_quick");
  app.add_flag("--print-config", print_config, "print the effective configuration as YAML and exit");
  app.footer(
      "Config keys (YAML sections in the file, dotted on the command line; moco_lincls reads model.*, data.*, "
      "lincls.*,\n"
      "train.{seed,output_dir,threads,resume,resume_on_changed_data,stop_at_step,tensorboard}, ckpt.{keep_last,async} "
      "and dist.*):\n" +
      moco::run::config_reference() +
      "\nSignals: SIGUSR1, SIGTERM, SIGINT or SIGHUP stop every rank after the same step with a checkpoint (exit\n"
      "0; the same command resumes); a second SIGTERM, SIGINT or SIGHUP ends the process at once.\n"
      "Exit codes: 0 done (or stopped with a checkpoint), 1 failed while running (or a corrupt checkpoint), 2 bad\n"
      "command line or config (a model.pretrained that does not fit model.*, naming the tensor), or train.output_dir\n"
      "in use by another run (its lock train.output_dir/moco.lock names the holder's host and pid).");
  if (const auto code = moco::app::parse_command_line(app, argc, argv)) return *code;

  moco::run::Config config;
  const std::string where = overrides.empty() ? config_path : config_path + " (with overrides)";
  if (const auto code = read_config(config_path, overrides, print_config, config)) return *code;

  moco::dist::WorldInfo world;
  std::optional<moco::run::LogUndo> log_undo;
  moco::sys::FolderLock folder_lock;  // held until main returns; the kernel drops it at any other end
  auto fail = [&](const std::string& why, int code) {
    if (world.world_size > 1) moco::dist::abort_world(why, code);
    spdlog::error("{}", why);
    moco::dist::finalize_world();
    return code;
  };
  try {
    // Before MPI starts, which may open a CUDA context on the current device (run/device.h).
    const auto early_device = moco::run::choose_device_before_mpi();
    world = moco::dist::init_world(&argc, &argv);
    moco::preempt::install_preemption_handlers();
    moco::run::validate_for_world(config, world.world_size, where, moco::run::Job::kLincls);
    moco::run::check_data(config, where, world.rank == 0);
    moco::run::RunContext context;
    context.device = moco::run::select_device(world, early_device);
    context.local_size = world.local_size;
    // Before any folder is made: a backbone that does not fit the config is the config's fault.
    const auto backbone = moco::lincls::load_run_backbone(config, context.device);  // a resume's: the pinned one
    moco::lincls::check_own_output_dir(config, backbone);
    log_undo.emplace(config.train.output_dir, world.rank);
    // Before the first write into the folder: a second run there stops here, having written nothing.
    moco::run::lock_output_dir(config.train.output_dir, "train.output_dir", world.rank, folder_lock);
    moco::run::setup_logging(config.train.output_dir, world.rank, world.world_size, config.dist.log_all_ranks);
    spdlog::info("{}", moco::run::describe_placement(world, context.device, early_device));
    moco::sys::log_workarounds();
    context.group = moco::run::make_job_group(config, world.world_size, context.device);
    moco::run::check_ranks_agree_on_data(config, *context.group);  // before step 1: a stale copy is named
    moco::lincls::run_lincls(config, context, backbone);
  } catch (const moco::run::FolderInUse& e) {
    // Every rank knows (lock_output_dir is collective): all end with exit 2, none aborts the others.
    if (world.rank == 0) spdlog::error("{}", e.what());
    moco::dist::finalize_world();
    return 2;
  } catch (const moco::run::ConfigError& e) {
    folder_lock.release();           // first: the undo removes a folder this run made only if empty
    if (log_undo) log_undo->undo();  // a refusal writes nothing: the log it started goes too
    return fail(e.what(), 2);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  } catch (...) {
    return fail("unexpected error (not a std::exception)", 1);
  }
  moco::dist::finalize_world();
  return 0;
}
