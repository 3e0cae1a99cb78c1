// moco_dist: MoCo self-supervised training. Parses the command line, joins the MPI job (a world of
// one without a launcher) and hands over to train().
#include "app/methods.h"
#include "app/parse_command_line.h"
#include "app/program.h"
#include "lincls/knn_eval.h"
#include "run/config.h"
#include "run/device.h"
#include "train/trainer.h"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <iostream>
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
      "Config keys (YAML sections in the file, dotted on the command line):\n" +
      moco::run::config_reference(*moco::app::methods()) +
      "\nSignals: SIGUSR1, SIGTERM, SIGINT or SIGHUP stop every rank after the same step with a checkpoint (exit\n"
      "0; the same command resumes); a second SIGTERM, SIGINT or SIGHUP ends the process at once.\n"
      "Exit codes: 0 done (or stopped with a checkpoint), 1 failed while running, 2 bad command line or config, or\n"
      "train.output_dir in use by another run (its lock train.output_dir/moco.lock names the holder's host and pid).");
}

}  // namespace

int main(int argc, char** argv) {
  moco::app::start_process();
  CLI::App app{
      "moco_dist: MoCo (Momentum Contrast) self-supervised training.\n"
      "Trains on the config's data, logs to train.output_dir/metrics.jsonl, reports kNN top-1.\n"
      "One process per device: run it under mpirun or srun for several ranks, plain for one."};
  Options o;
  add_options(app, o);
  if (const auto code = moco::app::parse_command_line(app, argc, argv)) return *code;

  moco::run::Config config;
  if (const auto code = moco::app::read_config(o.config_path, o.overrides, o.print_config, config)) return *code;
  if (o.dry_run) std::cout << moco::run::to_yaml(config);
  moco::app::JobProgram program;
  program.source = o.source();
  program.writes_output = !o.dry_run && !o.eval_only;
  program.dry_run = o.dry_run;
  // Before any folder is made: what the config asks of the device (the evaluation trains nothing).
  if (!o.eval_only)
    program.before_output = [&](const moco::run::Config& c, torch::Device device) {
      moco::run::check_precision_for_device(c, device, program.source);
    };
  program.body = [&](const moco::run::RunContext& context) {
    if (o.eval_only)
      moco::lincls::knn_eval_only(config, context);
    else
      moco::train::train(config, context);
  };
  return moco::app::run_job(program, config, argc, argv);
}
