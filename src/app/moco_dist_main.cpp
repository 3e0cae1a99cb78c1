// moco_dist: MoCo self-supervised training. Parses the command line, joins the MPI job (a world of
// one without a launcher) and hands over to train().
#include "app/parse_command_line.h"
#include "dist/bootstrap.h"
#include "dist/process_group.h"
#include "lincls/knn_eval.h"
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
#include "train/trainer.h"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false, dry_run = false, eval_only = false;
  std::string source() const { return overrides.empty() ? config_path : config_path + " (with overrides)"; }
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("-c,--config", o.config_path, "YAML config file (see configs/)")->required();
  app.add_option("overrides", o.overrides, "key=value settings applied over the file, e.g. optim.base_lr=0.06");
  app.add_flag("--print-config", o.print_config, "print the effective configuration as YAML and exit");
  app.add_flag(
      "--dry-run", o.dry_run,
      "check the config, the data (the ranks' copies compared), train.output_dir and what would be resumed (its "
      "checksums read, as the run reads them; its data compared); print the effective config and the plan (world, "
      "device, steps, checkpoints); exit 0 without training or writing into train.output_dir. It writes one thing: "
      "an ImageFolder's file-list cache beside the data, where that folder is writable, as any scan writes it "
      "(never into train.output_dir; docs/data.md)");
  app.add_flag("--eval-only", o.eval_only,
               "no training: the kNN monitor (knn.*, as during training) on model.pretrained (a checkpoint, a run's "
               "output_dir, an "
               "export, random or raw_pixels; unset: the newest checkpoint of train.output_dir), beside the raw-pixel "
               "baseline; "
               "writes nothing into train.output_dir (an ImageFolder's file-list cache beside the data, where that "
               "folder is writable)")
      ->excludes("--dry-run");
  app.footer(
      "Config keys (YAML sections in the file, dotted on the command line):\n" + moco::run::config_reference() +
      "\nSignals: SIGUSR1, SIGTERM, SIGINT or SIGHUP stop every rank after the same step with a checkpoint (exit\n"
      "0; the same command resumes); a second SIGTERM, SIGINT or SIGHUP ends the process at once.\n"
      "Exit codes: 0 done (or stopped with a checkpoint), 1 failed while running, 2 bad command line or config, or\n"
      "train.output_dir in use by another run (its lock train.output_dir/moco.lock names the holder's host and pid).");
}

// The config file with the overrides applied, or the exit code: 2 for a bad config, 0 once printed
// (--print-config).
std::optional<int> read_config(const Options& o, moco::run::Config& config) {
  try {
    config = moco::run::load_config(o.config_path, o.overrides);
    if (o.print_config) {
      std::cout << moco::run::to_yaml(config);
      return 0;
    }
  } catch (const moco::run::ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", o.config_path, e.what());
    return 2;
  } catch (...) {
    spdlog::error("{}: unexpected error while reading the config", o.config_path);
    return 2;
  }
  return std::nullopt;
}

moco::run::RunContext make_context(const moco::run::Config& config, const moco::dist::WorldInfo& world, bool dry_run,
                                   const std::optional<moco::run::EarlyDevice>& early_device) {
  moco::run::RunContext context;
  context.dry_run = dry_run;
  context.device = moco::run::select_device(world, early_device);
  spdlog::info("{}", moco::run::describe_placement(world, context.device, early_device));
  context.local_size = world.local_size;
  context.group = moco::run::make_job_group(config, world.world_size, context.device);
  return context;
}

}  // namespace

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  moco::sys::keep_freed_host_memory();
  CLI::App app{
      "moco_dist: MoCo (Momentum Contrast) self-supervised training.\n"
      "Trains on the config's data, logs to train.output_dir/metrics.jsonl, reports kNN top-1.\n"
      "One process per device: run it under mpirun or srun for several ranks, plain for one."};
  Options o;
  add_options(app, o);
  if (const auto code = moco::app::parse_command_line(app, argc, argv)) return *code;

  moco::run::Config config;
  if (const auto code = read_config(o, config)) return *code;
  if (o.dry_run) std::cout << moco::run::to_yaml(config);

  moco::dist::WorldInfo world;
  std::optional<moco::run::LogUndo> log_undo;
  moco::sys::FolderLock folder_lock;  // held until main returns; the kernel drops it at any other end
  // Nothing may reach std::terminate: every failure ends as exit 1 or 2 with a message, and with
  // several ranks takes the others down too (they may wait in a collective this rank never joins).
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
    // The world size is known now: a batch that does not split over the ranks is the config's fault,
    // reported before any folder is made or data read.
    moco::run::validate_for_world(config, world.world_size, o.source());
    moco::run::check_data(config, o.source(), world.rank == 0, /*file_list_in_output_dir=*/!o.dry_run && !o.eval_only);
    if (!o.dry_run && !o.eval_only) {
      log_undo.emplace(config.train.output_dir, world.rank);
      // Before the first write into the folder: a second run there stops here, having written nothing.
      moco::run::lock_output_dir(config.train.output_dir, "train.output_dir", world.rank, folder_lock);
    }
    moco::run::setup_logging(config.train.output_dir, world.rank, world.world_size, config.dist.log_all_ranks,
                             !o.dry_run && !o.eval_only);
    moco::sys::log_workarounds();
    const auto context = make_context(config, world, o.dry_run, early_device);
    moco::run::check_ranks_agree_on_data(config, *context.group);  // before step 1: a stale copy is named
    if (o.eval_only) {
      moco::lincls::knn_eval_only(config, context);
    } else {
      moco::train::train(config, context);
    }
  } catch (const moco::run::FolderInUse& e) {
    // Every rank knows (lock_output_dir is collective): all end with exit 2, none aborts the others.
    if (world.rank == 0) spdlog::error("{}", e.what());
    moco::dist::finalize_world();
    return 2;
  } catch (const moco::run::ConfigError& e) {
    folder_lock.release();           // first: the undo removes a folder this run made only if empty
    if (log_undo) log_undo->undo();  // a refusal writes nothing: the log it started goes too
    // Found once the ranks could look (a checkpoint's saved config, the world size): still the
    // config's fault, still before any training.
    return fail(e.what(), 2);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  } catch (...) {
    return fail("unexpected error (not a std::exception)", 1);
  }
  moco::dist::finalize_world();
  return 0;
}
