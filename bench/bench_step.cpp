// bench_step: images/s of the full MoCo training step against the compute it cannot avoid.
//
// For each network: "step" is what the trainer does per batch (two augmented views from the loader,
// query forward+backward, momentum update, key forward, logits against the queue, enqueue, SGD; the
// NaN/Inf skip on the device as train.* always has it: MocoOptions::skip_nonfinite, the gradients
// checked by MomentumSgd::nonfinite_gradients, Moco::end_step's flag, MomentumSgd stepped with the
// step's `trained`);
// "floor" is the same network's forward+backward plus a key forward on ready tensors, nothing else.
// step/floor near 1 means the MoCo machinery costs nothing beyond the convolutions.
#include "data/loader.h"
#include "data/synthetic.h"
#include "moco_v2/moco.h"
#include "run/device.h"
#include "optim/sgd.h"
#include "sys/host_memory.h"
#include "sys/op_count.h"
#include "sys/openblas_kernels.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  std::string name, arch;
  int64_t side, channels, batch;
  bool small_stem;
  double width;
};

double seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

moco::model::ResNetOptions encoder_for(const Case& c) {
  auto o = moco::model::resnet_options_for(c.arch);
  o.in_channels = c.channels;
  o.small_stem = c.small_stem;
  if (c.width > 0) o.width = c.width;
  o.mlp_head = true;
  return o;
}

// The q-quantile (0.5: the median) by nearest rank.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}
double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

struct Rates {
  double step, floor;               // images per second: the median over the timed calls
  double paired;                    // step/floor: the median of floor_i / step_i over adjacent pairs
  double paired_q1, paired_q3;      // their quartiles: how far the machine's noise spreads the pairs
  int64_t ops = 0, update_ops = 0;  // ATen ops of one step, and those of its updates (Note [Update scopes])
};

// Images per second of `step` and of `floor` over `steps` timed calls each after `warmup` untimed
// ones. The two alternate, so that drift in the machine's speed (a shared or virtual machine's is
// large) falls on both alike; the ratio is taken pair by pair, each step against the floor timed
// right after it. On this project's 2-core VM two identical lambdas gave a ratio of medians of
// 0.975-0.995 over 30 pairs and a paired median of 1.003-1.004.
template <typename Step, typename Floor>
Rates images_per_second(const Case& c, int warmup, int steps, Step step, Floor floor) {
  for (int i = 0; i < warmup; ++i) step(), floor();
  std::vector<double> step_s, floor_s;
  for (int i = 0; i < steps; ++i) {
    auto start = Clock::now();
    step();
    step_s.push_back(seconds(start));
    start = Clock::now();
    floor();
    floor_s.push_back(seconds(start));
  }
  std::vector<double> ratios;
  for (size_t i = 0; i < step_s.size(); ++i) ratios.push_back(floor_s[i] / step_s[i]);
  Rates rates{static_cast<double>(c.batch) / median(step_s), static_cast<double>(c.batch) / median(floor_s),
              median(ratios), quantile(ratios, 0.25), quantile(ratios, 0.75)};
  const moco::sys::OpCount count;  // one more step, untimed: counting slows every op down
  step();
  rates.ops = count.ops();
  rates.update_ops = count.update_ops();
  return rates;
}

// channels_last: weights and every batch in channels-last order, as train.channels_last does.
// skip: the NaN/Inf skip as the trainer has it; false times the plain step, to see what the skip costs.
nlohmann::json run_case(const Case& c, int warmup, int steps, int64_t queue_size, bool channels_last, bool skip) {
  moco::moco_v2::MocoOptions options;
  options.queue_size = queue_size;
  options.skip_nonfinite = skip;
  moco::moco_v2::Moco moco(encoder_for(c), options, std::make_shared<moco::dist::LocalProcessGroup>(), 0);
  moco->train();
  if (channels_last) moco::run::use_channels_last(*moco);
  const auto format = channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  moco::optim::MomentumSgd optimizer(moco->trainable_parameters(), 0.9, 1e-4);
  optimizer.set_lr(0.03);

  auto dataset =
      std::make_shared<moco::data::SyntheticDataset>(c.batch * (warmup + steps + 2), c.channels, c.side, c.side, 10, 0);
  moco::data::AugmentOptions augment;
  augment.out_size = c.side;
  moco::data::LoaderOptions loader_options;
  loader_options.batch_size = c.batch;
  moco::data::TwoViewLoader loader(dataset, augment, loader_options);
  loader.start_epoch(0);

  const auto im_q = torch::randn({c.batch, c.channels, c.side, c.side}).contiguous(format);
  const auto im_k = torch::randn({c.batch, c.channels, c.side, c.side}).contiguous(format);
  const auto rates = images_per_second(
      c, warmup, steps,
      [&] {
        auto batch = loader.next();
        auto out = moco->forward(batch->query.contiguous(format), batch->key.contiguous(format));
        optimizer.zero_grad();
        out.loss.backward();
        // Without the skip: no flag, the plain in-place step (out.trained undefined).
        moco->end_step(out, skip ? optimizer.nonfinite_gradients() : torch::Tensor());
        optimizer.step(out.trained);
      },
      [&] {
        moco->encoder_q->forward(im_q).sum().backward();
        torch::NoGradGuard no_grad;
        moco->encoder_k->forward(im_k);
      });
  return {{"case", c.name},
          {"arch", c.arch},
          {"channels_last", channels_last},
          {"skip_nonfinite", skip},
          {"image", c.side},
          {"batch", c.batch},
          {"steps", steps},
          {"queue_size", queue_size},
          {"step_img_per_s", rates.step},
          {"floor_img_per_s", rates.floor},
          {"step_over_floor", rates.paired},
          {"step_over_floor_quartiles", {rates.paired_q1, rates.paired_q3}},
          {"ratio_of_medians", rates.step / rates.floor},
          {"ops_per_step", rates.ops},
          {"update_ops_per_step", rates.update_ops},
          {"threads", torch::get_num_threads()}};
}

}  // namespace

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  moco::sys::keep_freed_host_memory();
  CLI::App app{"bench_step: MoCo training-step throughput against the forward/backward floor"};
  int warmup = 2, steps = 20, threads = 0;
  int64_t queue_size = 16384;
  std::string only, json_path = "bench_step.json";
  app.add_option("--warmup", warmup, "untimed steps per measurement");
  app.add_option("--steps", steps, "timed steps per measurement");
  app.add_option("--queue-size", queue_size, "K");
  app.add_option("--threads", threads, "intra-op threads (0: one per core)");
  app.add_option("--only", only, "run only this case: tiny28, r18_32, r50_224");
  app.add_option("--json", json_path, "where to write the results");
  bool both_formats = false, no_skip = false;
  app.add_flag("--no-skip", no_skip,
               "the step without the NaN/Inf skip (the trainer always has it): what the skip costs");
  app.add_flag("--channels-last", both_formats,
               "each case twice: contiguous, then weights and batches channels-last (train.channels_last)");
  CLI11_PARSE(app, argc, argv);
  // Debian's LibTorch starts with one intra-op thread; the trainer uses every core, so do the same.
  torch::set_num_threads(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));

  const std::vector<Case> cases = {
      {"tiny28", "resnet_tiny", 28, 1, 256, true, 0},
      {"r18_32", "resnet18", 32, 3, 64, true, 0},
      {"r50_224", "resnet50", 224, 3, 8, false, 0},
  };
  nlohmann::json results = nlohmann::json::array();
  std::cout << fmt::format("{:<9} {:>4} {:>6} {:>6} {:>12} {:>12} {:>11} {:>13} {:>9} {:>11}\n", "case", "CL", "image",
                           "batch", "step img/s", "floor img/s", "step/floor", "quartiles", "ops/step", "update ops");
  for (const auto& c : cases) {
    if (!only.empty() && only != c.name) continue;
    for (const bool channels_last : {false, true}) {
      if (channels_last && !both_formats) continue;
      const auto r = run_case(c, warmup, c.name == "r50_224" ? std::max(2, steps / 4) : steps, queue_size,
                              channels_last, !no_skip);
      std::cout << fmt::format("{:<9} {:>4} {:>6} {:>6} {:>12.1f} {:>12.1f} {:>11.3f}   {:.3f}-{:.3f} {:>9} {:>11}\n",
                               c.name, channels_last ? "on" : "off", c.side, c.batch, r["step_img_per_s"].get<double>(),
                               r["floor_img_per_s"].get<double>(), r["step_over_floor"].get<double>(),
                               r["step_over_floor_quartiles"][0].get<double>(),
                               r["step_over_floor_quartiles"][1].get<double>(), r["ops_per_step"].get<int64_t>(),
                               r["update_ops_per_step"].get<int64_t>());
      results.push_back(r);
    }
  }
  std::ofstream(json_path) << results.dump(2) << "\n";
  std::cout << "results written to " << json_path << "\n";
  return 0;
}
