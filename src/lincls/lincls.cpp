#include "lincls/lincls.h"

#include "data/loader.h"
#include "eval/knn.h"
#include "lincls/backbone_pin.h"
#include "lincls/linear_classifier.h"
#include "lincls/linear_probe.h"
#include "lincls/views.h"
#include "metrics/metrics_log.h"
#include "preempt/preemption.h"
#include "run/checkpointing.h"
#include "run/clock.h"
#include "run/device.h"
#include "run/run_output.h"
#include "run/setup.h"
#include "sys/paths.h"
#include "train/loop.h"
#include "train/schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

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
  return train::learning_rate(train::linear_protocol_schedule(c), static_cast<double>(epoch));
}

namespace {

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

// Everything a linear-probe run is made of, built in the order that fixes every random draw and
// collective.
struct LinclsRun {
  LinclsRun(const Config& c, const run::RunContext& ctx, const Backbone& b)
      : config(c),
        context(ctx),
        backbone(b),
        group(*ctx.group),
        checkpointing(c, group, run::Job::kLincls),  // before any data is read
        metrics(run::open_run_output(c, group.rank(), checkpointing)),
        splits(run::load_splits(c)),
        loader_options(lincls_loader_options(c, ctx)) {
    log_lincls_plan(c, b, splits, ctx);
    keep_backbone_pin(checkpointing, b);  // a resume reads this backbone again, or refuses
    features = extract_center_features(c, b, splits, group);
    classifier.emplace(b.feature_dim(), splits.train->num_classes(), c.lincls.momentum, c.lincls.weight_decay,
                       ctx.group, c.train.seed, ctx.device);
    if (c.lincls.standardize) standardize_features(*classifier, features.train, group);
    // On cached features a step is a [batch, d] x [d, classes] product: too small to share between
    // threads, and intra-op threads that spin for work only slow it (ten times on a busy 2-core machine).
    if (c.lincls.cached_features && ctx.device.is_cpu()) torch::set_num_threads(1);
    const int64_t batches = data::batches_per_epoch(splits.train->size(), loader_options);
    if (batches < 1) throw std::invalid_argument("the train split has no images to train the linear classifier on");
    shape = {batches, batches * c.lincls.epochs, group.world_size()};
    images_per_rank = static_cast<int64_t>(data::epoch_order(splits.train->size(), loader_options, 0).size());
  }
  // The batches of a rank's epochs, the last one partial (main_lincls.py's drop_last=False): made after
  // the resume, as the reference run makes its loader.
  std::unique_ptr<run::BatchSource> make_batches() {
    if (config.lincls.cached_features)
      return std::make_unique<CachedFeatureBatches>(features.train, features.train_labels, loader_options);
    loader.emplace(splits.train, train_view(config), loader_options);
    return std::make_unique<ViewBatches>(*loader);
  }

  const Config& config;
  const run::RunContext& context;
  const Backbone& backbone;
  dist::ProcessGroup& group;
  run::Checkpointing checkpointing;
  std::optional<metrics::MetricsLog> metrics;  // rank 0's
  const run::Splits splits;
  const data::LoaderOptions loader_options;
  ProbeFeatures features;
  std::optional<LinearClassifier> classifier;
  std::optional<data::TwoViewLoader> loader;  // none with cached features
  train::RunShape shape;
  int64_t images_per_rank = 0;  // padded to equal shares, as DistributedSampler pads
};

// main_lincls.py's run on the loop (train/loop.h): its schedule, each epoch's val top-1/top-5 and the
// best so far, checkpoints every lincls.save_every_epochs, and at the end the sanity check.
class LinearProtocol final : public train::LoopJob {
 public:
  explicit LinearProtocol(LinclsRun& run) : run_(run), schedule_(train::linear_protocol_schedule(run.config)) {}

  train::TrainState::Layout progress_layout() const override {
    return {{"epoch", "batch_in_epoch", "step", "best_epoch"},
            {"train_seconds", "best_top1", "best_top5", "epoch_loss_sum"},
            false};
  }
  double learning_rate(int64_t epoch, double progress) const override {
    return train::learning_rate(schedule_, train::schedule_epoch(schedule_, epoch, progress));
  }
  void resumed(const std::string& dir, train::TrainState& state, train::StepMeter& epoch) override {
    best_epoch_ = state.counter("best_epoch");
    best_top1_ = state.value("best_top1");
    best_top5_ = state.value("best_top5");
    epoch.loss_x_images = state.value("epoch_loss_sum");  // the epoch's loss so far, added to in order
    result_.checkpoint = dir;
    spdlog::info("lincls: continuing at epoch {} batch {} (step {})", state.counter("epoch"),
                 state.counter("batch_in_epoch"), state.counter("step"));
  }
  bool after_epoch(const train::EpochEnd& end, train::StepMeter& epoch, const train::LoopStatus& status) override;
  void before_save(train::TrainState& state, const train::StepMeter& epoch) override {
    state.counter("best_epoch") = best_epoch_;
    state.value("best_top1") = best_top1_;
    state.value("best_top5") = best_top5_;
    state.value("epoch_loss_sum") = epoch.loss_x_images;
  }
  void finish(const train::LoopEnd& end, const train::LoopStatus& status) override;

  const LinclsResult& result() const { return result_; }

 private:
  void log_stopped_early(const train::LoopEnd& end) const;
  void report_result();

  LinclsRun& run_;
  const train::Schedule schedule_;
  int64_t best_epoch_ = 0;
  double best_top1_ = 0, best_top5_ = 0;
  LinclsResult result_;
};

// After an epoch's last batch: its row and line, with the val accuracy and the best so far.
bool LinearProtocol::after_epoch(const train::EpochEnd& end, train::StepMeter& epoch, const train::LoopStatus& status) {
  if (!end.complete) return false;
  metrics::LinclsRecord r;
  r.epoch = end.epochs_done;
  r.step = status.step;
  r.loss = epoch.loss_x_images / static_cast<double>(run_.images_per_rank);  // main_lincls.py's AverageMeter
  r.lr = status.lr;
  const TopK val = evaluate_classifier(*run_.classifier, run_.features.val, run_.features.val_labels, run_.group, 1024);
  if (val.top1() > best_top1_) {
    best_top1_ = val.top1();
    best_top5_ = val.top5();
    best_epoch_ = end.epochs_done;
  }
  r.top1 = val.top1();
  r.top5 = val.top5();
  r.best_top1 = best_top1_;
  r.best_epoch = best_epoch_;
  r.train_seconds = status.train_seconds;
  if (run_.metrics) run_.metrics->write(r);
  spdlog::info(
      "lincls epoch {}/{}: loss {:.4f} lr {:.4g} | val top-1 {:.2f}% top-5 {:.2f}% (best top-1 {:.2f}% at epoch {}) "
      "| {:.1f}s of training",
      end.epochs_done, run_.config.lincls.epochs, r.loss, r.lr, r.top1, r.top5, r.best_top1, r.best_epoch,
      r.train_seconds);
  const int64_t every = run_.config.lincls.save_every_epochs;
  return every > 0 && end.epochs_done % every == 0 && end.epochs_done < run_.config.lincls.epochs && !end.run_stops;
}

void LinearProtocol::log_stopped_early(const train::LoopEnd& end) const {
  if (end.preempted_by != 0) {
    const std::string signal = preempt::signal_name(end.preempted_by);
    if (run_.metrics) run_.metrics->write(metrics::PreemptRecord{end.steps, signal, end.checkpoint});
    spdlog::info("lincls: stopped by {} after step {}: checkpoint {}; the same command continues from it", signal,
                 end.steps, end.checkpoint);
  } else {
    spdlog::info(
        "lincls: stopped after step {} (train.stop_at_step); the same command with train.stop_at_step=0 continues "
        "from {}",
        end.steps, end.checkpoint);
  }
}

// After all epochs: the last val accuracy, the backbone's sanity check, the result row and line.
void LinearProtocol::finish(const train::LoopEnd& end, const train::LoopStatus& /*status*/) {
  result_.steps = end.steps;
  result_.epochs = end.steps / run_.shape.steps_per_epoch;
  result_.train_seconds = end.train_seconds;
  result_.checkpoint = end.checkpoint;
  if (result_.epochs < run_.config.lincls.epochs) {
    log_stopped_early(end);
    return;
  }
  const TopK last =
      evaluate_classifier(*run_.classifier, run_.features.val, run_.features.val_labels, run_.group, 1024);
  result_.last_top1 = last.top1();
  result_.last_top5 = last.top5();
  result_.best_top1 = best_top1_;
  result_.best_top5 = best_top5_;
  result_.best_epoch = best_epoch_;
  result_.sanity_tensors = run_.backbone.check_unchanged(run_.config);
  if (run_.backbone.kind() != Backbone::Kind::kRawPixels)
    spdlog::info("sanity check passed: all {} backbone tensors are bitwise those of {}", result_.sanity_tensors,
                 run_.backbone.description());
  result_.finished = true;
  report_result();
}

void LinearProtocol::report_result() {
  if (run_.metrics) {
    metrics::LinclsResultRecord r;
    r.encoder = run_.backbone.label();
    r.pretrained = run_.backbone.description();
    r.best_top1 = result_.best_top1;
    r.best_top5 = result_.best_top5;
    r.best_epoch = result_.best_epoch;
    r.last_top1 = result_.last_top1;
    r.last_top5 = result_.last_top5;
    r.epochs = result_.epochs;
    r.steps = result_.steps;
    r.train_seconds = result_.train_seconds;
    r.sanity_tensors = result_.sanity_tensors;
    run_.metrics->write(r);
  }
  spdlog::info(
      "linear probe top-1 ({}: {}): {:.2f}% (best {:.2f}% at epoch {}), top-5 {:.2f}%, after {} epochs ({} steps, "
      "{:.0f}s of training)",
      run_.backbone.label(), run_.backbone.description(), result_.last_top1, result_.best_top1, result_.best_epoch,
      result_.last_top5, result_.epochs, result_.steps, result_.train_seconds);
}

}  // namespace

namespace {

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
  LinearProbe probe(*run.classifier, backbone, config.lincls.cached_features);
  LinearProtocol job(run);
  train::Loop loop({probe, run.group, run.checkpointing, run.metrics ? &*run.metrics : nullptr, run.shape,
                    /*time_budget_s=*/0, config.train.stop_at_step, config.train.max_bad_steps,
                    /*check_step_syncs=*/false, context.device},
                   job);
  const auto batches = run.make_batches();
  train::run_loop(loop, probe, *batches);
  return job.result();
}

}  // namespace moco::lincls
