// bench_gpu: images/s of the whole MoCo v2 training step on one GPU -- ResNet-50 at 224 px, MLP
// head, K = 65536, synthetic images already on the device -- as the trainer runs it (bf16 autocast
// and channels-last by default). bench/moco_step_pytorch.py does the same step the official way
// (DDP-wrapped model, torch.autocast bf16); tools/gpu_check.sh runs both in one command.
#include "model/moco.h"
#include "run/device.h"
#include "run/sgd.h"
#include "sys/host_memory.h"
#include "sys/openblas_kernels.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <iostream>

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  moco::sys::keep_freed_host_memory();          // host memory as moco_dist runs it
  CLI::App app{"bench_gpu: MoCo v2 ResNet-50 training-step throughput on cuda:0 (synthetic data)"};
  int64_t batch = 256, queue = 65536;
  int warmup = 10, steps = 30;
  std::string precision = "bf16", json_path = "bench_gpu.json";
  bool channels_last = true;
  app.add_option("--batch", batch, "images per step");
  app.add_option("--queue-size", queue, "K");
  app.add_option("--warmup", warmup, "untimed steps (cuDNN benchmark mode tries its algorithms here)");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--precision", precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--channels-last", channels_last, "channels-last images and weights (true/false)");
  app.add_option("--json", json_path, "where to write the result");
  CLI11_PARSE(app, argc, argv);
  if (!torch::cuda::is_available()) {
    std::cerr << "bench_gpu: no CUDA device visible to LibTorch (or a CPU-only LibTorch)\n";
    return 77;
  }
  const torch::Device device(torch::kCUDA, 0);
  at::globalContext().setBenchmarkCuDNN(true);

  auto encoder = moco::model::resnet_options_for("resnet50");
  encoder.small_stem = false;
  encoder.mlp_head = true;
  moco::model::MocoOptions options;
  options.queue_size = queue;
  options.temperature = 0.2;
  options.bf16 = precision == "bf16";
  moco::model::Moco moco(encoder, options, std::make_shared<moco::dist::LocalProcessGroup>(), 0);
  moco->to(device);
  if (channels_last) moco::run::use_channels_last(*moco);
  moco->train();
  moco::run::MomentumSgd sgd(moco->trainable_parameters(), 0.9, 1e-4);
  sgd.set_lr(0.03);

  auto images = [&] {
    auto x = torch::randn({batch, 3, 224, 224}, torch::TensorOptions().device(device));
    return channels_last ? x.contiguous(torch::MemoryFormat::ChannelsLast) : x;
  };
  const auto im_q = images(), im_k = images();
  auto step = [&] {
    auto out = moco->forward(im_q, im_k);
    sgd.zero_grad();
    out.loss.backward();
    moco->end_step(out);
    sgd.step();
  };
  for (int i = 0; i < warmup; ++i) step();
  torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  torch::cuda::synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double rate = static_cast<double>(batch * steps) / seconds;

  const nlohmann::json result = {{"impl", "moco_dist"},
                                 {"arch", "resnet50"},
                                 {"image", 224},
                                 {"batch", batch},
                                 {"queue_size", queue},
                                 {"precision", precision},
                                 {"channels_last", channels_last},
                                 {"steps", steps},
                                 {"img_per_s", rate}};
  std::ofstream(json_path) << result.dump(2) << "\n";
  std::cout << "moco_dist: " << rate << " img/s (resnet50 224px, batch " << batch << ", " << precision
            << (channels_last ? ", channels-last" : "") << ")\n";
  return 0;
}
