// defines: start_process (what every program does first), read_config (a config file with overrides,
// or the exit code of a bad one), JobProgram and run_job (the start-up and shutdown of the programs
// that join the MPI job: the world, the checks that need it, the output folder's lock, the logs, the
// run's context, and every failure turned into exit code 1 or 2 on every rank), run_tool (the tools'
// failures as exit codes)
#pragma once

#include "app/methods.h"
#include "run/config.h"
#include "run/run_context.h"

#include <torch/types.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace moco::app {

// The first lines of every main(): OpenBLAS's settings (may re-execute the program), host memory kept.
void start_process();

// The config file with the overrides applied, or the exit code: 2 for a bad config (said), 0 once
// printed (`print_config`).
std::optional<int> read_config(const std::string& path, const std::vector<std::string>& overrides, bool print_config,
                               run::Config& config);

struct JobProgram {
  run::Job job = run::Job::kMoco;
  std::string source;         // the config file, "(with overrides)" when given some
  bool writes_output = true;  // takes train.output_dir's lock and writes rank<N>.log there
  bool dry_run = false;       // the context's (the run checks and plans, trains nothing)
  // After the world and the data are checked (the ranks' copies compared once the group is made, before
  // the body), before the output folder is locked; may throw ConfigError.
  std::function<void(const run::Config&, torch::Device device)> before_output;
  std::function<void(const run::RunContext&)> body;  // the run
};

// Joins the MPI job (a world of one without a launcher), checks what needs the world, locks and logs
// into train.output_dir (writes_output), builds the context and runs the body. Exit codes: 0 done, 1
// failed while running (every rank taken down), 2 a bad config found here (nothing left behind) or an
// output folder another run holds.
int run_job(const JobProgram& program, const run::Config& config, int argc, char** argv);

// A refusal of the command line or of what it names: exit 2, nothing written.
class Refusal : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The tools' (moco_ckpt, moco_pack) body: its code, or 2 for a Refusal (or another exception of the
// kinds `refusals` recognises), 1 for any other failure, each said as "<program>: <why>".
int run_tool(const std::string& program, const std::function<int()>& body,
             const std::function<bool(const std::exception&)>& is_refusal = {});

}  // namespace moco::app
