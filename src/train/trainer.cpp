#include "train/trainer.h"

#include "data/idx.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "eval/knn.h"
#include "model/moco.h"
#include "train/metrics.h"
#include "train/schedule.h"

#include <sched.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace moco::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

struct Splits {
  std::shared_ptr<data::Dataset> train, test;
};

Splits load_splits(const Config& c) {
  if (c.data.dataset == "synthetic") {
    const int64_t side = c.data.image_size;
    return {std::make_shared<data::SyntheticDataset>(c.data.synthetic_train_size, c.data.synthetic_channels, side, side, 10, c.train.seed),
            std::make_shared<data::SyntheticDataset>(c.data.synthetic_test_size, c.data.synthetic_channels, side, side, 10, c.train.seed + 1)};
  }
  return {data::load_mnist_style(c.data.root, data::Split::kTrain), data::load_mnist_style(c.data.root, data::Split::kTest)};
}

data::AugmentOptions augment_options(const Config& c) {
  data::AugmentOptions a;
  a.out_size = c.data.image_size;
  a.scale_min = c.data.crop_scale_min;
  a.flip_prob = c.data.flip_prob;
  a.jitter_prob = c.data.jitter_prob;
  a.brightness = c.data.brightness;
  a.contrast = c.data.contrast;
  a.mean = c.data.mean;
  a.std = c.data.std;
  return a;
}

model::ResNetOptions encoder_options(const Config& c, int64_t in_channels) {
  auto e = model::resnet_options_for(c.model.arch);
  e.in_channels = in_channels;
  e.small_stem = c.model.small_stem;
  if (c.model.width > 0) e.width = c.model.width;
  e.out_dim = c.model.dim;
  e.mlp_head = c.model.mlp;
  return e;
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

class KnnMonitor {
 public:
  KnnMonitor(const Config& c, const Splits& splits, MetricsLog& metrics)
      : config_(c), splits_(splits), metrics_(metrics), normalisation_(augment_options(c)) {}

  double evaluate(model::ResNet& encoder, const std::string& label, int64_t step, double epoch) {
    const auto start = Clock::now();
    const auto [memory, memory_labels] = eval::extract_features(encoder, *splits_.train, normalisation_, config_.knn.batch_size, config_.knn.memory_size);
    const auto [queries, query_labels] = eval::extract_features(encoder, *splits_.test, normalisation_, config_.knn.batch_size, config_.knn.query_size);
    eval::KnnOptions options;
    options.k = config_.knn.k;
    options.temperature = config_.knn.temperature;
    KnnRecord r;
    r.top1 = eval::knn_top1(memory, memory_labels, queries, query_labels, splits_.train->num_classes(), options);
    r.encoder = label;
    r.step = step;
    r.epoch = epoch;
    r.memory_size = memory.size(0);
    r.query_size = queries.size(0);
    r.seconds = seconds_since(start);
    metrics_.write(r);
    spdlog::info("kNN ({} encoder, epoch {:.2f}): top-1 {:.2f}% ({} memory, {} queries, k={}, {:.1f}s)", label, epoch,
                 r.top1, r.memory_size, r.query_size, options.k, r.seconds);
    return r.top1;
  }

 private:
  const Config& config_;
  Splits splits_;
  MetricsLog& metrics_;
  data::AugmentOptions normalisation_;
};

}  // namespace

TrainResult train(const Config& config, std::shared_ptr<dist::ProcessGroup> group) {
  const int threads = config.train.threads > 0 ? config.train.threads : available_cores();
  torch::set_num_threads(threads);
  torch::manual_seed(config.train.seed);

  const std::filesystem::path out_dir(config.train.output_dir);
  std::filesystem::create_directories(out_dir);
  std::ofstream(out_dir / "config.yaml") << to_yaml(config);
  MetricsLog metrics((out_dir / "metrics.jsonl").string());

  const Splits splits = load_splits(config);
  const int world = group->world_size();
  if (config.optim.batch_size % world != 0)
    throw std::invalid_argument(fmt::format("optim.batch_size {} is not divisible by the {} ranks", config.optim.batch_size, world));

  auto encoder = encoder_options(config, splits.train->channels());
  if (world == 1) encoder.bn_splits = config.moco.bn_splits;
  model::MocoOptions moco_options{config.moco.queue_size, config.moco.momentum, config.moco.temperature};
  model::Moco moco(encoder, moco_options, group, config.train.seed);
  moco->train();
  spdlog::info("{}: {} parameters in the query encoder, feature dim {}, queue {}x{}, {} threads", config.model.arch,
               model::count_parameters(*moco->encoder_q), moco->encoder_q->feature_dim(), config.model.dim,
               config.moco.queue_size, threads);

  torch::optim::SGD optimizer(moco->trainable_parameters(),
                              torch::optim::SGDOptions(learning_rate(config, 0))
                                  .momentum(config.optim.momentum)
                                  .weight_decay(config.optim.weight_decay));

  data::LoaderOptions loader_options;
  loader_options.batch_size = config.optim.batch_size / world;
  loader_options.workers = config.data.workers;
  loader_options.prefetch = config.data.prefetch;
  loader_options.seed = config.train.seed;
  loader_options.rank = group->rank();
  loader_options.world_size = world;
  data::TwoViewLoader loader(splits.train, augment_options(config), loader_options);
  const int64_t steps_per_epoch = loader.batches_per_epoch();
  if (steps_per_epoch < 1)
    throw std::invalid_argument(fmt::format("the train split has {} images, fewer than one batch of {}", splits.train->size(), config.optim.batch_size));
  const auto total_steps = static_cast<int64_t>(std::ceil(config.train.epochs * static_cast<double>(steps_per_epoch)));

  KnnMonitor knn(config, splits, metrics);
  TrainResult result;
  result.knn_random_init = knn.evaluate(moco->encoder_q, "random_init", 0, 0);

  // Progress in [0, 1]: steps done, or the share of the time budget spent, whichever is ahead.
  auto progress = [&](int64_t step) {
    double p = static_cast<double>(step) / static_cast<double>(total_steps);
    if (config.train.time_budget_s > 0) p = std::max(p, result.train_seconds / config.train.time_budget_s);
    return p;
  };

  int64_t step = 0;
  double loss_sum = 0;
  int64_t interval_steps = 0;
  double interval_seconds = 0;
  bool done = false;
  for (int64_t epoch = 0; !done; ++epoch) {
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      const auto step_start = Clock::now();
      const double lr = learning_rate(config, progress(step) * config.train.epochs);
      for (auto& group_options : optimizer.param_groups()) group_options.options().set_lr(lr);

      const auto out = moco->forward(batch->query, batch->key);
      optimizer.zero_grad();
      out.loss.backward();
      optimizer.step();
      const double loss = out.loss.item<double>();
      if (!std::isfinite(loss)) throw std::runtime_error(fmt::format("the loss became {} at step {}", loss, step));

      ++step;
      const double step_seconds = seconds_since(step_start);
      result.train_seconds += step_seconds;
      interval_seconds += step_seconds;
      loss_sum += loss;
      ++interval_steps;
      const double p = progress(step);
      done = p >= 1.0;
      if (step % config.train.log_every == 0 || done) {
        StepRecord r;
        r.step = step;
        r.epoch = static_cast<double>(step) / static_cast<double>(steps_per_epoch);
        r.loss = loss_sum / static_cast<double>(interval_steps);
        r.lr = lr;
        r.img_per_s = static_cast<double>(interval_steps * config.optim.batch_size) / interval_seconds;
        r.elapsed_s = result.train_seconds;
        metrics.write(r);
        spdlog::info("epoch {:.2f} step {}/{} loss {:.4f} lr {:.4g} {:.1f} img/s ETA {}", r.epoch, step,
                     config.train.time_budget_s > 0 ? "~" : std::to_string(total_steps), r.loss, lr, r.img_per_s,
                     format_duration(result.train_seconds * std::max(0.0, 1.0 - p) / std::max(p, 1e-9)));
        loss_sum = 0;
        interval_steps = 0;
        interval_seconds = 0;
      }
      if (done) break;
    }
    const int64_t epochs_done = epoch + 1;
    if (!done && config.knn.every_epochs > 0 && epochs_done % config.knn.every_epochs == 0)
      knn.evaluate(moco->encoder_q, "trained", step, static_cast<double>(epochs_done));
  }
  result.steps = step;
  result.knn_trained = knn.evaluate(moco->encoder_q, "trained", step, static_cast<double>(step) / static_cast<double>(steps_per_epoch));
  spdlog::info("kNN top-1: random init {:.2f}% -> trained {:.2f}% ({:+.2f} points) after {} steps, {:.0f}s of training",
               result.knn_random_init, result.knn_trained, result.knn_trained - result.knn_random_init, step,
               result.train_seconds);
  return result;
}

}  // namespace moco::train
