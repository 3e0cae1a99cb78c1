// moco_lincls: the linear classification protocol on a frozen backbone (MoCo's main_lincls.py).
// Parses the command line, joins the MPI job (a world of one without a launcher), loads
// model.pretrained and hands over to run_lincls().
#include "app/parse_command_line.h"
#include "app/program.h"
#include "lincls/backbone_pin.h"
#include "lincls/frozen_backbone.h"
#include "lincls/lincls.h"
#include "run/config.h"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  moco::app::start_process();
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
      "train.{seed,output_dir,threads,resume,resume_on_changed_data,stop_at_step,tensorboard}, ckpt.* (as moco_dist:\n"
      "its checkpoints come every lincls.save_every_epochs epochs and at the cadence of ckpt.every_steps and\n"
      "ckpt.every_minutes) and dist.*):\n" +
      moco::run::config_reference(*moco::app::methods()) +
      "\nSignals: SIGUSR1, SIGTERM, SIGINT or SIGHUP stop every rank after the same step with a checkpoint (exit\n"
      "0; the same command resumes); a second SIGTERM, SIGINT or SIGHUP ends the process at once.\n"
      "Exit codes: 0 done (or stopped with a checkpoint), 1 failed while running (or a corrupt checkpoint), 2 bad\n"
      "command line or config (a model.pretrained that does not fit model.*, naming the tensor), or train.output_dir\n"
      "in use by another run (its lock train.output_dir/moco.lock names the holder's host and pid).");
  if (const auto code = moco::app::parse_command_line(app, argc, argv)) return *code;

  moco::run::Config config;
  if (const auto code = moco::app::read_config(config_path, overrides, print_config, config)) return *code;
  std::optional<moco::lincls::Backbone> backbone;
  moco::app::JobProgram program;
  program.job = moco::run::Job::kLincls;
  program.source = overrides.empty() ? config_path : config_path + " (with overrides)";
  // Before any folder is made: a backbone that does not fit the config is the config's fault.
  program.before_output = [&](const moco::run::Config& c, torch::Device device) {
    backbone.emplace(moco::lincls::load_run_backbone(c, device));  // a resume's: the pinned one
    moco::lincls::check_own_output_dir(c, *backbone);
  };
  program.body = [&](const moco::run::RunContext& context) { moco::lincls::run_lincls(config, context, *backbone); };
  return moco::app::run_job(program, config, argc, argv);
}
