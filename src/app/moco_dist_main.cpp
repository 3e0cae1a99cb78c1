// moco_dist: MoCo self-supervised training. Parses the command line and hands over to train().
#include "dist/process_group.h"
#include "train/config.h"
#include "train/trainer.h"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"moco_dist: MoCo (Momentum Contrast) self-supervised training.\n"
               "Trains on the config's data, logs to train.output_dir/metrics.jsonl, reports kNN top-1."};
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  app.add_option("-c,--config", config_path, "YAML config file (see configs/)")->required();
  app.add_option("overrides", overrides, "key=value settings applied over the file, e.g. optim.base_lr=0.06");
  app.add_flag("--print-config", print_config, "print the effective configuration as YAML and exit");
  app.footer("Config keys (YAML sections in the file, dotted on the command line):\n" + moco::train::config_reference() +
             "\nExit codes: 0 done, 1 failed while running, 2 bad command line or config.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }

  moco::train::Config config;
  try {
    config = moco::train::load_config(config_path, overrides);
  } catch (const moco::train::ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  if (print_config) {
    std::cout << moco::train::to_yaml(config);
    return 0;
  }
  try {
    moco::train::train(config, std::make_shared<moco::dist::LocalProcessGroup>());
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  return 0;
}
