#include "lincls/lincls.h"

#include "data/loader.h"
#include "eval/knn.h"
#include "lincls/backbone_pin.h"
#include "lincls/linear_classifier.h"
#include "lincls/views.h"
#include "preempt/preemption.h"
#include "run/checkpointing.h"
#include "run/clock.h"
#include "run/device.h"
#include "metrics/metrics_log.h"
#include "run/run_logging.h"  // defines: check_log_writes
#include "run/run_output.h"
#include "run/setup.h"
#include "sys/paths.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>

namespace moco::lincls {
namespace {

namespace fs = std::filesystem;
using run::Clock;
using run::Config;
using run::seconds_since;

}  // namespace

double learning_rate(const Config& c, int64_t epoch) {
  double lr = c.lincls.base_lr * static_cast<double>(c.lincls.batch_size) / 256.0;
  if (c.lincls.schedule == run::Schedule::kCosine)
    return lr * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(epoch) / static_cast<double>(c.lincls.epochs)));
  for (double milestone : c.lincls.milestones)
    if (static_cast<double>(epoch) >= milestone) lr *= c.lincls.gamma;
  return lr;
}

namespace {

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
  double& epoch_loss_sum() { return value(3); }  // batch losses x their images, this epoch so far

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

void log_lincls_plan(const Config& config, const Backbone& backbone, const run::Splits& splits,
                     const run::RunContext& context) {
  const auto& lc = config.lincls;
  spdlog::info(
      "lincls: {} ({}-dim features), {} classes, {}; lr {} (batch {}), {}, momentum {}, weight decay {}, {} epochs; "
      "{} rank(s) on {}",
      backbone.description(), backbone.feature_dim(), splits.train->num_classes(),
      lc.cached_features ? "cached features of the un-augmented images" : "a new augmented view every step",
      learning_rate(config, 0), lc.batch_size,
      lc.schedule == run::Schedule::kCosine
          ? std::string("cosine")
          : fmt::format("x{} at epochs [{}]", lc.gamma, fmt::join(lc.milestones, ", ")),
      lc.momentum, lc.weight_decay, lc.epochs, context.group->world_size(), context.device.str());
}

// The frozen backbone's features of the un-augmented (center-view) images.
struct ProbeFeatures {
  torch::Tensor val, val_labels;
  torch::Tensor train, train_labels;  // only for cached training or the standardisation statistics
};

// The backbone is frozen and in eval mode, so the val features are the same every epoch: extracted
// once. The train split's are needed for cached training and for the standardisation statistics.
ProbeFeatures extract_center_features(const Config& config, const Backbone& backbone, const run::Splits& splits,
                                      dist::ProcessGroup& group) {
  const int64_t per_rank = config.lincls.batch_size / group.world_size();
  const auto extract_start = Clock::now();
  const auto eval_view = run::augment_options(config);
  const eval::Featurizer center_features = [&](const torch::Tensor& images) {
    return backbone.features(center_view(images, eval_view));
  };
  ProbeFeatures f;
  std::tie(f.val, f.val_labels) = eval::extract_features(center_features, *splits.test, per_rank, 0, &group);
  if (config.lincls.cached_features || config.lincls.standardize)
    std::tie(f.train, f.train_labels) = eval::extract_features(center_features, *splits.train, per_rank, 0, &group);
  spdlog::info("features of {} val{} images extracted in {:.1f}s", f.val.size(0),
               f.train.defined() ? fmt::format(" and {} train", f.train.size(0)) : "", seconds_since(extract_start));
  return f;
}

// lincls.standardize: the features' mean and std over the train split, rank 0's on every rank.
void standardize_features(LinearClassifier& classifier, const torch::Tensor& train_features,
                          dist::ProcessGroup& group) {
  const auto f = train_features.to(torch::kDouble);
  const auto mean = f.mean(0);
  auto std = (f - mean).square().mean(0).sqrt();
  std = torch::where(std > 1e-6, std, torch::ones_like(std));  // a constant dimension carries nothing: left unscaled
  auto stats = std::vector<torch::Tensor>{mean.to(torch::kFloat).contiguous(), std.to(torch::kFloat).contiguous()};
  if (group.world_size() > 1)
    dist::broadcast_parameters(stats, group);  // bitwise rank 0's, whatever each rank's reduction order
  classifier.set_standardization(stats[0], stats[1]);
}

data::LoaderOptions lincls_loader_options(const Config& config, const run::RunContext& context) {
  data::LoaderOptions options;
  options.batch_size = config.lincls.batch_size / context.group->world_size();
  options.workers = run::data_workers(config.data.workers, context.device, context.local_size);
  options.prefetch = config.data.prefetch;
  options.seed = config.train.seed;
  options.rank = context.group->rank();
  options.world_size = context.group->world_size();
  options.key_view = false;
  options.drop_last = false;  // main_lincls.py: DistributedSampler and DataLoader keep the rest
  return options;
}

// What the ranks agree on after a step: one small all-reduce of the mean loss, rank 0's clock, and a
// stop signal seen by any rank.
struct LinclsStepAgreement {
  double loss = 0;          // mean over ranks
  double step_seconds = 0;  // rank 0's
  int stop_signal = 0;
};

LinclsStepAgreement agree_on_lincls_step(double loss, double rank0_seconds, dist::ProcessGroup& group) {
  const int world = group.world_size();
  auto shared =
      torch::tensor({loss, rank0_seconds, preempt::signal_code(preempt::preemption_signal())}, torch::kDouble);
  if (world > 1) group.all_reduce(shared, dist::ReduceOp::kSum);
  return {shared[0].item<double>() / world, shared[1].item<double>(),
          preempt::signal_from_code(shared[2].item<double>())};
}

// Everything a linear-probe run is made of, built in the order that fixes every random draw and
// collective.
struct LinclsRun {
  LinclsRun(const Config& c, const run::RunContext& ctx, const Backbone& b)
      : config(c),
        context(ctx),
        backbone(b),
        group(*ctx.group),
        checkpointing(c, group, run::Job::kLincls),  // before any data is read
        metrics(run::open_run_output(c, group.rank(), /*append=*/checkpointing.will_try_resume())),
        splits(run::load_splits(c)) {
    log_lincls_plan(c, b, splits, ctx);
    keep_backbone_pin(checkpointing, b);  // a resume reads this backbone again, or refuses
    features = extract_center_features(c, b, splits, group);
    classifier.emplace(b.feature_dim(), splits.train->num_classes(), c.lincls.momentum, c.lincls.weight_decay,
                       ctx.group, c.train.seed, ctx.device);
    if (c.lincls.standardize) standardize_features(*classifier, features.train, group);
    // On cached features a step is a [batch, d] x [d, classes] product: too small to share between
    // threads, and intra-op threads that spin for work only slow it (ten times on a busy 2-core machine).
    if (c.lincls.cached_features && ctx.device.is_cpu()) torch::set_num_threads(1);
  }
  // The loader (after the resume, as the reference run makes it) and the batches and images of a
  // rank's epoch, the last batch partial (main_lincls.py's drop_last=False).
  void make_loader() {
    if (!config.lincls.cached_features) loader.emplace(splits.train, train_view(config), loader_options);
    batches = data::batches_per_epoch(splits.train->size(), loader_options);
    images_per_rank = static_cast<int64_t>(data::epoch_order(splits.train->size(), loader_options, 0).size());
    if (batches < 1) throw std::invalid_argument("the train split has no images to train the linear classifier on");
  }

  const Config& config;
  const run::RunContext& context;
  const Backbone& backbone;
  dist::ProcessGroup& group;
  run::Checkpointing checkpointing;
  std::optional<metrics::MetricsLog> metrics;  // rank 0's
  const run::Splits splits;
  ProbeFeatures features;
  std::optional<LinearClassifier> classifier;
  data::LoaderOptions loader_options;
  std::optional<data::TwoViewLoader> loader;  // none with cached features
  int64_t batches = 0;
  int64_t images_per_rank = 0;  // padded to equal shares, as DistributedSampler pads
};

// This rank's features and labels of batch `b` of the epoch (`order`: the cached features' epoch order).
std::pair<torch::Tensor, torch::Tensor> batch_features(LinclsRun& run, const std::vector<int64_t>& order, int64_t b) {
  if (!run.config.lincls.cached_features) {
    auto batch = run.loader->next();
    return {run.backbone.features(batch->query), batch->labels};
  }
  const int64_t per_rank = run.loader_options.batch_size;
  const int64_t end = std::min<int64_t>((b + 1) * per_rank, static_cast<int64_t>(order.size()));
  const auto indices =
      torch::tensor(std::vector<int64_t>(order.begin() + b * per_rank, order.begin() + end), torch::kLong);
  return {run.features.train.index_select(0, indices), run.features.train_labels.index_select(0, indices)};
}

// The batches of `epoch` from where the run stands; returns the stop signal, or 0. Stops (with
// `stopped`) at a signal or train.stop_at_step.
int train_epoch(LinclsRun& run, Progress& at, int64_t epoch, double lr, bool& stopped) {
  std::vector<int64_t> order;
  if (run.config.lincls.cached_features) {
    order = data::epoch_order(run.features.train.size(0), run.loader_options, epoch);
  } else {
    run.loader->start_epoch(epoch, at.batch_in_epoch());
  }
  for (int64_t b = at.batch_in_epoch(); b < run.batches; ++b) {
    const auto step_start = Clock::now();
    const auto [features, labels] = batch_features(run, order, b);
    const double loss = run.classifier->step(features, labels, lr);
    const auto agreed = agree_on_lincls_step(loss, run.group.rank() == 0 ? seconds_since(step_start) : 0.0, run.group);
    at.epoch_loss_sum() += agreed.loss * static_cast<double>(labels.size(0));  // main_lincls.py's AverageMeter
    at.train_seconds() += agreed.step_seconds;
    at.batch_in_epoch() = b + 1;
    ++at.step();
    run::check_log_writes();  // a run whose rank<N>.log cannot be written stops, as moco_dist's does
    if (agreed.stop_signal != 0 || (run.config.train.stop_at_step > 0 && at.step() >= run.config.train.stop_at_step)) {
      stopped = true;
      return agreed.stop_signal;
    }
  }
  return 0;
}

// After the epoch's last batch: its row and line, with the val accuracy and the best so far.
void end_epoch(LinclsRun& run, Progress& at, int64_t epoch, double lr) {
  metrics::LinclsRecord r;
  r.epoch = epoch + 1;
  r.step = at.step();
  r.loss = at.epoch_loss_sum() / static_cast<double>(run.images_per_rank);
  r.lr = lr;
  at.epoch() = epoch + 1;
  at.batch_in_epoch() = 0;
  at.epoch_loss_sum() = 0;
  const TopK val = evaluate_classifier(*run.classifier, run.features.val, run.features.val_labels, run.group, 1024);
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
  if (run.metrics) run.metrics->write(r);
  spdlog::info(
      "lincls epoch {}/{}: loss {:.4f} lr {:.4g} | val top-1 {:.2f}% top-5 {:.2f}% (best top-1 {:.2f}% at epoch {}) "
      "| {:.1f}s of training",
      epoch + 1, run.config.lincls.epochs, r.loss, lr, r.top1, r.top5, r.best_top1, r.best_epoch, r.train_seconds);
}

void save_lincls_checkpoint(LinclsRun& run, Progress& at, const std::vector<ckpt::StateEntry>& entries,
                            LinclsResult& result) {
  const double epoch =
      static_cast<double>(at.epoch()) + static_cast<double>(at.batch_in_epoch()) / static_cast<double>(run.batches);
  const auto saved = run.checkpointing.save(entries, at.step(), epoch, at.train_seconds());
  result.checkpoint = saved.path;
  if (run.metrics)
    run.metrics->write(metrics::CheckpointRecord{"checkpoint", at.step(), saved.path, saved.seconds, saved.bytes});
}

void log_stopped_early(LinclsRun& run, int stop_signal, int64_t step, const std::string& checkpoint) {
  if (stop_signal != 0) {
    const std::string signal = preempt::signal_name(stop_signal);
    if (run.metrics) run.metrics->write(metrics::PreemptRecord{step, signal, checkpoint});
    spdlog::info("lincls: stopped by {} after step {}: checkpoint {}; the same command continues from it", signal, step,
                 checkpoint);
  } else {
    spdlog::info(
        "lincls: stopped after step {} (train.stop_at_step); the same command with train.stop_at_step=0 continues "
        "from {}",
        step, checkpoint);
  }
}

// After all epochs: the last val accuracy, the backbone's sanity check, the result row and line.
void finish_lincls(LinclsRun& run, Progress& at, LinclsResult& result) {
  const TopK last = evaluate_classifier(*run.classifier, run.features.val, run.features.val_labels, run.group, 1024);
  result.last_top1 = last.top1();
  result.last_top5 = last.top5();
  result.best_top1 = at.best_top1();
  result.best_top5 = at.best_top5();
  result.best_epoch = at.best_epoch();
  result.sanity_tensors = run.backbone.check_unchanged(run.config);
  if (run.backbone.kind() != Backbone::Kind::kRawPixels)
    spdlog::info("sanity check passed: all {} backbone tensors are bitwise those of {}", result.sanity_tensors,
                 run.backbone.description());
  result.finished = true;
  if (run.metrics) {
    metrics::LinclsResultRecord r;
    r.encoder = run.backbone.label();
    r.pretrained = run.backbone.description();
    r.best_top1 = result.best_top1;
    r.best_top5 = result.best_top5;
    r.best_epoch = result.best_epoch;
    r.last_top1 = result.last_top1;
    r.last_top5 = result.last_top5;
    r.epochs = result.epochs;
    r.steps = result.steps;
    r.train_seconds = result.train_seconds;
    r.sanity_tensors = result.sanity_tensors;
    run.metrics->write(r);
  }
  spdlog::info(
      "linear probe top-1 ({}: {}): {:.2f}% (best {:.2f}% at epoch {}), top-5 {:.2f}%, after {} epochs ({} steps, "
      "{:.0f}s of training)",
      run.backbone.label(), run.backbone.description(), result.last_top1, result.best_top1, result.best_epoch,
      result.last_top5, result.epochs, result.steps, result.train_seconds);
}

// The folders that model.pretrained reads: the path itself and, for a checkpoint folder or a
// `checkpoints/` folder, the run's output folder above it.
std::vector<std::string> pretrained_folders(const std::string& source) {
  const auto path = fs::weakly_canonical(fs::path(source));
  std::vector<std::string> folders{path.string()};
  if (path.filename() == "checkpoints") folders.push_back(path.parent_path().string());
  if (path.parent_path().filename() == "checkpoints") folders.push_back(path.parent_path().parent_path().string());
  return folders;
}

}  // namespace

void check_own_output_dir(const Config& c, const Backbone& backbone) {
  if (backbone.kind() != Backbone::Kind::kPretrained) return;
  for (const auto& folder : pretrained_folders(backbone.source()))
    if (sys::lies_within(c.train.output_dir, folder) || sys::lies_within(folder, c.train.output_dir))
      throw run::ConfigError(fmt::format(
          "train.output_dir '{}' and model.pretrained ({}) overlap: the linear classifier may not write inside the "
          "pre-training run it reads ({}), nor hold it; give it a folder of its own",
          c.train.output_dir, backbone.source(), folder));
}

LinclsResult run_lincls(const Config& config, const run::RunContext& context, const Backbone& backbone) {
  torch::set_num_threads(run::intra_op_threads(config.train.threads, context.local_size));
  run::validate_for_world(config, context.group->world_size(), "config", run::Job::kLincls);
  check_own_output_dir(config, backbone);
  LinclsRun run(config, context, backbone);
  const auto& lc = config.lincls;

  Progress at;
  auto entries = run.classifier->state_entries();
  at.add_entries(entries);
  LinclsResult result;
  if (const auto dir = run.checkpointing.resume(entries)) {
    run.checkpointing.mark_saved(at.step(), at.train_seconds());
    result.checkpoint = *dir;
    if (run.metrics) run.metrics->write(metrics::CheckpointRecord{"resume", at.step(), *dir, 0, 0});
    spdlog::info("lincls: continuing at epoch {} batch {} (step {})", at.epoch(), at.batch_in_epoch(), at.step());
  }
  run.loader_options = lincls_loader_options(config, context);
  run.make_loader();

  int stop_signal = 0;
  bool stopped = false;
  for (int64_t epoch = at.epoch(); epoch < lc.epochs && !stopped; ++epoch) {
    const double lr = learning_rate(config, epoch);
    stop_signal = train_epoch(run, at, epoch, lr, stopped);
    if (at.batch_in_epoch() < run.batches) break;  // stopped mid-epoch
    end_epoch(run, at, epoch, lr);
    if (lc.save_every_epochs > 0 && at.epoch() % lc.save_every_epochs == 0 && at.epoch() < lc.epochs && !stopped)
      save_lincls_checkpoint(run, at, entries, result);
  }
  run::check_log_writes();  // no final checkpoint after a log line was lost
  if (!run.checkpointing.saved_at(at.step())) save_lincls_checkpoint(run, at, entries, result);
  run.checkpointing.finish();
  result.steps = at.step();
  result.epochs = at.epoch();
  result.train_seconds = at.train_seconds();
  if (at.epoch() < lc.epochs) {
    log_stopped_early(run, stop_signal, at.step(), result.checkpoint);
    return result;
  }
  finish_lincls(run, at, result);
  run::check_log_writes();
  return result;
}

}  // namespace moco::lincls
