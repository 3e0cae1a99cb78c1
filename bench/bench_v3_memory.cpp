// bench_v3_memory: one MoCo v3 setting's step on this machine's CPU: its time (median of the timed
// steps, after one untimed) and the process's peak resident memory, as one JSON line. One setting per
// process, since a process's peak only rises: bench/v3_memory.sh runs the settings of issue 58 (whole
// batch, optim.micro_batch, model.activation_checkpointing) one after another in one command and
// prints each against the whole batch's.
#include "app/methods.h"
#include "moco_v3/moco_v3.h"
#include "run/config.h"
#include "run/run_context.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

namespace {

double peak_resident_mb() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports kilobytes
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_v3_memory: a MoCo v3 step's time and peak resident memory for one setting"};
  std::string config_path, arch = "vit_small";
  int64_t side = 224, batch = 64, micro_batch = 0, steps = 2;
  bool checkpointing = false;
  int threads = 0;
  app.add_option("--config", config_path, "a v3 config (the repository's tests/fixtures/tiny_synthetic_v3.yaml)")
      ->required();
  app.add_option("--arch", arch, "model.arch");
  app.add_option("--side", side, "data.image_size");
  app.add_option("--batch", batch, "optim.batch_size (one rank)");
  app.add_option("--micro-batch", micro_batch, "optim.micro_batch");
  app.add_flag("--checkpointing", checkpointing, "model.activation_checkpointing");
  app.add_option("--steps", steps, "timed steps, after one untimed")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "intra-op threads (0: LibTorch's default)");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) torch::set_num_threads(threads);

  using namespace moco;
  const auto config = run::load_config(
      app::methods(), config_path,
      {"model.arch=" + arch, "model.width=0", "model.small_stem=false", "data.image_size=" + std::to_string(side),
       "data.synthetic_channels=3", "data.mean=[0.485,0.456,0.406]", "data.std=[0.229,0.224,0.225]",
       "optim.batch_size=" + std::to_string(batch), "data.synthetic_train_size=" + std::to_string(batch),
       "optim.micro_batch=" + std::to_string(micro_batch),
       std::string("model.activation_checkpointing=") + (checkpointing ? "true" : "false")});
  run::validate_for_world(config, 1, config_path);
  run::RunContext context;
  context.group = std::make_shared<dist::LocalProcessGroup>();
  moco_v3::MocoV3 method(config, context, /*in_channels=*/3);
  method.set_run_length(steps + 1);
  method.set_lr(1e-3);
  data::TwoViewBatch views;
  views.query = torch::randn({batch, 3, side, side});
  views.key = torch::randn({batch, 3, side, side});

  std::vector<double> seconds;
  for (int64_t step = 1; step <= steps + 1; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const auto out = method.step(views, step);
    (void)out.loss.item<double>();  // the step is done when its loss is read
    if (step > 1) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  nlohmann::json line{{"arch", arch},
                      {"side", side},
                      {"batch", batch},
                      {"micro_batch", micro_batch},
                      {"activation_checkpointing", checkpointing},
                      {"threads", torch::get_num_threads()},
                      {"step_s", seconds[seconds.size() / 2]},
                      {"peak_rss_mb", peak_resident_mb()}};
  std::cout << line.dump() << std::endl;
  return 0;
}
