// bench_gpu: images/s of the whole MoCo v2 training step on one GPU -- ResNet-50 at 224 px, MLP
// head, K = 65536, synthetic images -- in one of two modes:
//   --mode model (the default): the model's step alone as the trainer runs it (bf16 autocast and
//     channels-last by default), images already on the device, batch 256; bench/moco_step_pytorch.py
//     does the same step the official way (DDP-wrapped model, torch.autocast bf16) and
//     tools/gpu_check.sh runs both;
//   --mode trainer: the trainer's own step (moco_v2::MocoV2::step) at 32 images per GPU, as a rank
//     of an 8-GPU job gets them: the gradient reducer's buckets and hooks, the NaN/Inf skip and the
//     per-step BatchNorm broadcast, through the NCCL group at world size 1
//     (dist.world_group_at_one), from pinned host batches as the loader hands them over. Timed in
//     alternating blocks against the model's step at the same batch: trainer/model is what the
//     machinery around the model costs at a batch where the host may set the pace.
// --device cpu runs either mode on the CPU: a smoke test of the code path, not a figure.
#include "data/loader.h"
#include "app/methods.h"
#include "dist/bootstrap.h"
#include "moco_v2/moco.h"
#include "moco_v2/moco_v2.h"
#include "run/config.h"
#include "run/device.h"
#include "run/run_context.h"
#include "optim/sgd.h"
#include "sys/host_memory.h"
#include "sys/openblas_kernels.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>

namespace {

struct Setup {
  std::string mode = "model", arch = "resnet50", precision = "bf16", device_name = "cuda";
  int64_t batch = 256, queue = 65536, image = 224;
  bool channels_last = true;
  torch::Device device = torch::kCPU;
};

void synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

torch::Tensor images(const Setup& s, torch::Device device) {
  auto x = torch::randn({s.batch, 3, s.image, s.image}, torch::TensorOptions().device(device));
  return s.channels_last ? x.contiguous(torch::MemoryFormat::ChannelsLast) : x;
}

// The model's step: forward (skip off), backward, SGD; images already on the device.
std::function<void()> model_step(const Setup& s) {
  auto encoder = moco::model::resnet_options_for(s.arch);
  encoder.small_stem = false;
  encoder.mlp_head = true;
  moco::moco_v2::MocoOptions options;
  options.queue_size = s.queue;
  options.temperature = 0.2;
  options.bf16 = s.precision == "bf16";
  moco::moco_v2::Moco moco(encoder, options, std::make_shared<moco::dist::LocalProcessGroup>(), 0);
  moco->to(s.device);
  if (s.channels_last) moco::run::use_channels_last(*moco);
  moco->train();
  auto sgd = std::make_shared<moco::optim::MomentumSgd>(moco->trainable_parameters(), 0.9, 1e-4);
  sgd->set_lr(0.03);
  return [moco, sgd, im_q = images(s, s.device), im_k = images(s, s.device)]() mutable {
    auto out = moco->forward(im_q, im_k);
    sgd->zero_grad();
    out.loss.backward();
    moco->end_step(out);
    sgd->step();
  };
}

// The trainer's step. MocoV2 keeps references to its config and context: they live beside it.
struct TrainerStep {
  moco::run::Config config;
  moco::run::RunContext context;
  std::unique_ptr<moco::moco_v2::MocoV2> method;
  moco::data::TwoViewBatch batch;
  int64_t steps = 0;
};

// One BatchNorm group, as a rank of 8 has with the paper's moco.bn_splits of 8: the same network as
// the model's step, its keys shuffled in place through the group's all-to-all.
std::shared_ptr<TrainerStep> trainer_step(const Setup& s) {
  auto t = std::make_shared<TrainerStep>();
  t->config = moco::run::load_config_text(
      moco::app::methods(),
      fmt::format("model: {{arch: {}, small_stem: false, mlp: true}}\n"
                  "moco: {{queue_size: {}, momentum: 0.999, temperature: 0.2, bn_splits: 1}}\n"
                  "data: {{dataset: synthetic, image_size: {}}}\n"
                  "optim: {{batch_size: {}, base_lr: 0.03}}\n"
                  "train: {{precision: {}, channels_last: {}, cudnn_benchmark: true}}\n"
                  "dist: {{world_group_at_one: true, queue_check_every: 0}}\n",
                  s.arch, s.queue, s.image, s.batch, s.precision, s.channels_last),
      "bench_gpu --mode trainer");
  t->context.device = s.device;
  t->context.group = moco::run::make_job_group(t->config, /*world_size=*/1, s.device);
  t->method = std::make_unique<moco::moco_v2::MocoV2>(t->config, t->context, /*in_channels=*/3);
  t->method->set_lr(0.03);
  // Float batches in host memory, pinned on CUDA, as the loader hands them to the step.
  const auto host = [&] {
    auto x = torch::randn({s.batch, 3, s.image, s.image});
    return s.device.is_cuda() ? x.pin_memory() : x;
  };
  t->batch = {host(), host(), torch::zeros({s.batch}, torch::kLong), torch::arange(s.batch)};
  return t;
}

// Seconds of `steps` calls, the device drained before and after.
double time_steps(const std::function<void()>& step, int steps, torch::Device device) {
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::json describe(const Setup& s, int steps) {
  return {{"impl", "moco_dist"},      {"mode", s.mode},
          {"arch", s.arch},           {"image", s.image},
          {"batch", s.batch},         {"queue_size", s.queue},
          {"precision", s.precision}, {"channels_last", s.channels_last},
          {"device", s.device.str()}, {"steps", steps}};
}

nlohmann::json run_model_mode(const Setup& s, int warmup, int steps) {
  const auto step = model_step(s);
  for (int i = 0; i < warmup; ++i) step();
  const double rate = static_cast<double>(s.batch * steps) / time_steps(step, steps, s.device);
  std::cout << "moco_dist: " << rate << " img/s (" << s.arch << " " << s.image << "px, batch " << s.batch << ", "
            << s.precision << (s.channels_last ? ", channels-last" : "") << ")\n";
  auto result = describe(s, steps);
  result["img_per_s"] = rate;
  return result;
}

// Two blocks of each, alternated (trainer, model, trainer, model), so that drift in the device's
// clock falls on both alike.
nlohmann::json run_trainer_mode(const Setup& s, int warmup, int steps) {
  const auto trainer = trainer_step(s);
  const std::function<void()> train = [trainer] { trainer->method->step(trainer->batch, ++trainer->steps); };
  const auto model = model_step(s);
  for (int i = 0; i < warmup; ++i) train(), model();
  double trainer_s = 0, model_s = 0;
  for (int round = 0; round < 2; ++round) {
    trainer_s += time_steps(train, steps, s.device);
    model_s += time_steps(model, steps, s.device);
  }
  const double images = static_cast<double>(2 * s.batch * steps);
  const double trainer_rate = images / trainer_s, model_rate = images / model_s;
  std::cout << "moco_dist trainer step: " << trainer_rate << " img/s, the model's step alone " << model_rate
            << " img/s, trainer/model " << trainer_rate / model_rate << " (" << s.arch << " " << s.image << "px, batch "
            << s.batch << ", " << s.precision << (s.channels_last ? ", channels-last" : "")
            << ", reducer + skip + BN broadcast through the world group at world size 1)\n";
  auto result = describe(s, 2 * steps);
  result["img_per_s"] = trainer_rate;
  result["model_img_per_s"] = model_rate;
  result["trainer_over_model"] = trainer_rate / model_rate;
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  moco::sys::keep_freed_host_memory();          // host memory as moco_dist runs it
  CLI::App app{"bench_gpu: MoCo v2 training-step throughput on cuda:0 (synthetic data)"};
  Setup s;
  int warmup = 10, steps = 30;
  std::string json_path = "bench_gpu.json";
  app.add_option("--mode", s.mode,
                 "model: the model's step alone; trainer: the trainer's step (reducer, skip, BN "
                 "broadcast) through the world group at world size 1, against the model's")
      ->check(CLI::IsMember({"model", "trainer"}));
  app.add_option("--batch", s.batch, "images per step (default 256; 32 with --mode trainer)");
  app.add_option("--queue-size", s.queue, "K");
  app.add_option("--arch", s.arch, "resnet50 (the figure), or a smaller one for a smoke test")
      ->check(CLI::IsMember({"resnet_tiny", "resnet18", "resnet34", "resnet50"}));
  app.add_option("--image", s.image, "image side in pixels");
  app.add_option("--device", s.device_name, "cuda (the figure) or cpu (a smoke test)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--warmup", warmup, "untimed steps (cuDNN benchmark mode tries its algorithms here)");
  app.add_option("--steps", steps, "timed steps (per block in --mode trainer: two blocks of each step)");
  app.add_option("--precision", s.precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--channels-last", s.channels_last, "channels-last images and weights (true/false)");
  app.add_option("--json", json_path, "where to write the result");
  CLI11_PARSE(app, argc, argv);
  if (s.mode == "trainer" && app.count("--batch") == 0) s.batch = 32;
  if (s.device_name == "cuda") {
    if (!torch::cuda::is_available()) {
      std::cerr << "bench_gpu: no CUDA device visible to LibTorch (or a CPU-only LibTorch): nothing to measure "
                   "(--device cpu runs the same code on the CPU, as a smoke test)\n";
      return 77;
    }
    s.device = torch::Device(torch::kCUDA, 0);
    at::globalContext().setBenchmarkCuDNN(true);
  }

  nlohmann::json result;
  if (s.mode == "model") {
    result = run_model_mode(s, warmup, steps);
  } else {
    moco::dist::init_world(&argc, &argv);  // the world group of one: MPI, NCCL on CUDA
    result = run_trainer_mode(s, warmup, steps);
    moco::dist::finalize_world();
  }
  std::ofstream(json_path) << result.dump(2) << "\n";
  return 0;
}
