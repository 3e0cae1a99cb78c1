#include "lincls/lincls.h"

#include "data/loader.h"
#include "eval/knn.h"
#include "lincls/linear_classifier.h"
#include "lincls/views.h"
#include "metrics/metrics_log.h"
#include "preempt/preemption.h"
#include "train/checkpointing.h"
#include "train/device.h"
#include "train/run_logging.h"
#include "train/setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>

namespace moco::lincls {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using train::Config;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// main_lincls.py's adjust_learning_rate: x gamma at each milestone reached (epochs counted from 0).
double learning_rate(const Config& c, int64_t epoch) {
  double lr = c.lincls.base_lr * static_cast<double>(c.lincls.batch_size) / 256.0;
  for (double milestone : c.lincls.milestones)
    if (static_cast<double>(epoch) >= milestone) lr *= c.lincls.gamma;
  return lr;
}

// Where a run stands, as tensors that its checkpoints carry (progress/<name>).
class Progress {
 public:
  int64_t& epoch() { return counter(0); }           // epochs done
  int64_t& batch_in_epoch() { return counter(1); }  // the next batch of the current epoch
  int64_t& step() { return counter(2); }
  int64_t& best_epoch() { return counter(3); }
  double& train_seconds() { return value(0); }
  double& best_top1() { return value(1); }
  double& best_top5() { return value(2); }
  double& epoch_loss_sum() { return value(3); }  // of the current epoch's batches so far

  void add_entries(std::vector<ckpt::StateEntry>& entries) {
    const char* counter_names[] = {"epoch", "batch_in_epoch", "step", "best_epoch"};
    const char* value_names[] = {"train_seconds", "best_top1", "best_top5", "epoch_loss_sum"};
    for (int64_t i = 0; i < 4; ++i)
      entries.push_back({std::string("progress/") + counter_names[i], counters_.narrow(0, i, 1)});
    for (int64_t i = 0; i < 4; ++i)
      entries.push_back({std::string("progress/") + value_names[i], values_.narrow(0, i, 1)});
  }

 private:
  int64_t& counter(int i) { return counters_.data_ptr<int64_t>()[i]; }
  double& value(int i) { return values_.data_ptr<double>()[i]; }
  torch::Tensor counters_ = torch::zeros({4}, torch::kInt64);
  torch::Tensor values_ = torch::zeros({4}, torch::kFloat64);
};

// The pre-training run's checkpoints must not become this run's resume candidates.
void check_own_output_dir(const Config& c, const Backbone& backbone) {
  if (backbone.kind() != Backbone::Kind::kPretrained) return;
  const auto mine = fs::weakly_canonical(fs::path(c.train.output_dir)).string();
  const auto source = fs::weakly_canonical(fs::path(backbone.source())).string();
  if (source == mine || source.rfind(mine + "/", 0) == 0)
    throw train::ConfigError(
        fmt::format("train.output_dir '{}' holds model.pretrained ({}): give the linear classifier a folder of its own",
                    c.train.output_dir, backbone.source()));
}

}  // namespace

LinclsResult run_lincls(const Config& config, const train::RunContext& context, const Backbone& backbone) {
  dist::ProcessGroup& group = *context.group;
  const int rank = group.rank(), world = group.world_size();
  torch::set_num_threads(config.train.threads > 0 ? config.train.threads : train::available_cores());
  train::validate_for_world(config, world, "config", train::Job::kLincls);
  check_own_output_dir(config, backbone);
  train::Checkpointing checkpointing(config, group, train::Job::kLincls);  // before any data is read

  const fs::path out_dir(config.train.output_dir);
  train::make_output_dir(out_dir.string());
  std::optional<metrics::MetricsLog> metrics;
  if (rank == 0) {
    std::ofstream config_out(out_dir / "config.yaml");
    config_out << train::to_yaml(config);
    config_out.flush();
    if (!config_out)
      throw std::runtime_error("train.output_dir '" + out_dir.string() + "': cannot write config.yaml in it");
    metrics.emplace((out_dir / "metrics.jsonl").string(), /*append=*/checkpointing.will_try_resume(),
                    config.train.tensorboard ? (out_dir / "tb").string() : std::string());
  }

  const auto& lc = config.lincls;
  const bool cached = lc.cached_features;
  const train::Splits splits = train::load_splits(config);
  const int64_t per_rank = lc.batch_size / world;
  spdlog::info(
      "lincls: {} ({}-dim features), {} classes, {}; lr {} (batch {}), x{} at epochs [{}], momentum {}, weight decay "
      "{}, {} epochs; "
      "{} rank(s) on {}",
      backbone.description(), backbone.feature_dim(), splits.train->num_classes(),
      cached ? "cached features of the un-augmented images" : "a new augmented view every step",
      learning_rate(config, 0), lc.batch_size, lc.gamma, fmt::join(lc.milestones, ", "), lc.momentum, lc.weight_decay,
      lc.epochs, world, context.device.str());

  // The backbone is frozen and in eval mode, so the val features are the same every epoch: extracted
  // once. The train split's are needed for cached training and for the standardisation statistics.
  const auto extract_start = Clock::now();
  const auto eval_view = train::augment_options(config);
  const eval::Featurizer center_features = [&](const torch::Tensor& images) {
    return backbone.features(center_view(images, eval_view));
  };
  const auto [val_features, val_labels] = eval::extract_features(center_features, *splits.test, per_rank, 0, &group);
  torch::Tensor train_features, train_labels;
  if (cached || lc.standardize)
    std::tie(train_features, train_labels) =
        eval::extract_features(center_features, *splits.train, per_rank, 0, &group);
  spdlog::info("features of {} val{} images extracted in {:.1f}s", val_features.size(0),
               train_features.defined() ? fmt::format(" and {} train", train_features.size(0)) : "",
               seconds_since(extract_start));

  LinearClassifier classifier(backbone.feature_dim(), splits.train->num_classes(), lc.momentum, lc.weight_decay,
                              context.group, config.train.seed, context.device);
  if (lc.standardize) {
    const auto f = train_features.to(torch::kDouble);
    const auto mean = f.mean(0);
    auto std = (f - mean).square().mean(0).sqrt();
    std = torch::where(std > 1e-6, std, torch::ones_like(std));  // a constant dimension carries nothing: left unscaled
    auto stats = std::vector<torch::Tensor>{mean.to(torch::kFloat).contiguous(), std.to(torch::kFloat).contiguous()};
    if (world > 1) dist::broadcast_parameters(stats, group);  // bitwise rank 0's, whatever each rank's reduction order
    classifier.set_standardization(stats[0], stats[1]);
  }

  // On cached features a step is a [batch, d] x [d, classes] product: too small to share between
  // threads, and intra-op threads that spin for work only slow it (ten times on a busy 2-core machine).
  if (cached && context.device.is_cpu()) torch::set_num_threads(1);

  Progress at;
  auto entries = classifier.state_entries();
  at.add_entries(entries);
  LinclsResult result;
  if (const auto dir = checkpointing.resume(entries)) {
    checkpointing.mark_saved(at.step(), at.train_seconds());
    result.checkpoint = *dir;
    if (metrics) metrics->write(metrics::CheckpointRecord{"resume", at.step(), *dir, 0, 0});
    spdlog::info("lincls: continuing at epoch {} batch {} (step {})", at.epoch(), at.batch_in_epoch(), at.step());
  }

  data::LoaderOptions loader_options;
  loader_options.batch_size = per_rank;
  loader_options.workers = train::data_workers(config.data.workers, context.device, context.local_size);
  loader_options.prefetch = config.data.prefetch;
  loader_options.seed = config.train.seed;
  loader_options.rank = rank;
  loader_options.world_size = world;
  loader_options.key_view = false;
  std::optional<data::TwoViewLoader> loader;
  if (!cached) loader.emplace(splits.train, train_view(config), loader_options);
  const int64_t batches = cached ? train_features.size(0) / lc.batch_size : loader->batches_per_epoch();
  if (batches < 1)
    throw std::invalid_argument(
        fmt::format("the train split has {} images, fewer than one global batch of {} (lincls.batch_size)",
                    splits.train->size(), lc.batch_size));

  auto save = [&] {
    const double epoch =
        static_cast<double>(at.epoch()) + static_cast<double>(at.batch_in_epoch()) / static_cast<double>(batches);
    const auto saved = checkpointing.save(entries, at.step(), epoch, at.train_seconds());
    result.checkpoint = saved.path;
    if (metrics)
      metrics->write(metrics::CheckpointRecord{"checkpoint", at.step(), saved.path, saved.seconds, saved.bytes});
  };

  int stop_signal = 0;
  bool stopped = false;
  for (int64_t epoch = at.epoch(); epoch < lc.epochs && !stopped; ++epoch) {
    const double lr = learning_rate(config, epoch);
    std::vector<int64_t> order;
    if (cached) {
      order = data::epoch_order(train_features.size(0), loader_options, epoch);
    } else {
      loader->start_epoch(epoch, at.batch_in_epoch());
    }
    for (int64_t b = at.batch_in_epoch(); b < batches; ++b) {
      const auto step_start = Clock::now();
      torch::Tensor features, labels;
      if (cached) {
        const auto indices = torch::tensor(
            std::vector<int64_t>(order.begin() + b * per_rank, order.begin() + (b + 1) * per_rank), torch::kLong);
        features = train_features.index_select(0, indices);
        labels = train_labels.index_select(0, indices);
      } else {
        auto batch = loader->next();
        features = backbone.features(batch->query);
        labels = batch->labels;
      }
      const double loss = classifier.step(features, labels, lr);
      // One small all-reduce per step: the mean loss, rank 0's clock, and a stop signal seen by any rank.
      auto shared = torch::tensor(
          {loss, rank == 0 ? seconds_since(step_start) : 0.0, preempt::signal_code(preempt::preemption_signal())},
          torch::kDouble);
      if (world > 1) group.all_reduce(shared, dist::ReduceOp::kSum);
      at.epoch_loss_sum() += shared[0].item<double>() / world;
      at.train_seconds() += shared[1].item<double>();
      at.batch_in_epoch() = b + 1;
      ++at.step();
      stop_signal = preempt::signal_from_code(shared[2].item<double>());
      if (stop_signal != 0 || (config.train.stop_at_step > 0 && at.step() >= config.train.stop_at_step)) {
        stopped = true;
        break;
      }
    }
    if (at.batch_in_epoch() < batches) break;  // stopped mid-epoch

    metrics::LinclsRecord r;
    r.epoch = epoch + 1;
    r.step = at.step();
    r.loss = at.epoch_loss_sum() / static_cast<double>(batches);
    r.lr = lr;
    at.epoch() = epoch + 1;
    at.batch_in_epoch() = 0;
    at.epoch_loss_sum() = 0;
    const TopK val = evaluate_classifier(classifier, val_features, val_labels, group, 1024);
    if (val.top1() > at.best_top1()) {
      at.best_top1() = val.top1();
      at.best_top5() = val.top5();
      at.best_epoch() = epoch + 1;
    }
    r.top1 = val.top1();
    r.top5 = val.top5();
    r.best_top1 = at.best_top1();
    r.best_epoch = at.best_epoch();
    r.train_seconds = at.train_seconds();
    if (metrics) metrics->write(r);
    spdlog::info(
        "lincls epoch {}/{}: loss {:.4f} lr {:.4g} | val top-1 {:.2f}% top-5 {:.2f}% (best top-1 {:.2f}% at epoch {}) "
        "| {:.1f}s of training",
        epoch + 1, lc.epochs, r.loss, lr, r.top1, r.top5, r.best_top1, r.best_epoch, r.train_seconds);
    if (lc.save_every_epochs > 0 && at.epoch() % lc.save_every_epochs == 0 && at.epoch() < lc.epochs && !stopped)
      save();
  }
  if (!checkpointing.saved_at(at.step())) save();
  checkpointing.finish();
  result.steps = at.step();
  result.epochs = at.epoch();
  result.train_seconds = at.train_seconds();
  if (at.epoch() < lc.epochs) {
    if (stop_signal != 0) {
      const std::string signal = stop_signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
      if (metrics) metrics->write(metrics::PreemptRecord{at.step(), signal, result.checkpoint});
      spdlog::info("lincls: stopped by {} after step {}: checkpoint {}; the same command continues from it", signal,
                   at.step(), result.checkpoint);
    } else {
      spdlog::info(
          "lincls: stopped after step {} (train.stop_at_step); the same command with train.stop_at_step=0 continues "
          "from {}",
          at.step(), result.checkpoint);
    }
    return result;
  }

  const TopK last = evaluate_classifier(classifier, val_features, val_labels, group, 1024);
  result.last_top1 = last.top1();
  result.last_top5 = last.top5();
  result.best_top1 = at.best_top1();
  result.best_top5 = at.best_top5();
  result.best_epoch = at.best_epoch();
  result.sanity_tensors = backbone.check_unchanged(config);
  if (backbone.kind() != Backbone::Kind::kRawPixels)
    spdlog::info("sanity check passed: all {} backbone tensors are bitwise those of {}", result.sanity_tensors,
                 backbone.description());
  result.finished = true;
  if (metrics) {
    metrics::LinclsResultRecord r;
    r.encoder = backbone.label();
    r.pretrained = backbone.description();
    r.best_top1 = result.best_top1;
    r.best_top5 = result.best_top5;
    r.best_epoch = result.best_epoch;
    r.last_top1 = result.last_top1;
    r.last_top5 = result.last_top5;
    r.epochs = result.epochs;
    r.steps = result.steps;
    r.train_seconds = result.train_seconds;
    r.sanity_tensors = result.sanity_tensors;
    metrics->write(r);
  }
  spdlog::info(
      "linear probe top-1 ({}: {}): {:.2f}% (best {:.2f}% at epoch {}), top-5 {:.2f}%, after {} epochs ({} steps, "
      "{:.0f}s of training)",
      backbone.label(), backbone.description(), result.last_top1, result.best_top1, result.best_epoch, result.last_top5,
      result.epochs, result.steps, result.train_seconds);
  return result;
}

}  // namespace moco::lincls
