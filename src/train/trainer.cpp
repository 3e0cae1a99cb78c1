#include "train/trainer.h"

#include "data/loader.h"
#include "dist/nccl_watchdog.h"  // defines: note_step
#include "dist/reducer.h"
#include "model/moco.h"
#include "preempt/preemption.h"
#include "sys/fault_hooks.h"
#include "train/bad_steps.h"
#include "train/checkpointing.h"
#include "train/clock.h"
#include "train/device.h"
#include "train/invariants.h"
#include "train/knn_monitor.h"
#include "metrics/metrics_log.h"
#include "train/replicas.h"
#include "train/run_control.h"
#include "train/run_logging.h"  // defines: check_log_writes
#include "train/run_output.h"
#include "train/schedule.h"
#include "train/setup.h"
#include "train/sgd.h"
#include "train/step_book.h"
#include "train/step_sync_check.h"
#include "train/train_log.h"
#include "train/train_state.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <optional>

namespace moco::train {
namespace {

// moco.bn_splits counts BatchNorm groups in the global batch; each rank runs its share. The math is
// then the same for any world size that divides it (a checkpoint resumes on another number of
// ranks exactly); with more ranks than groups, each rank's batch is one group, as in the reference.
int64_t bn_splits_per_rank(const Config& c, int world_size) {
  if (c.moco.bn_splits <= world_size) return 1;
  if (c.moco.bn_splits % world_size != 0) {
    spdlog::warn(
        "moco.bn_splits {} is not a multiple of the {} ranks: each rank normalises its batch as one BatchNorm group",
        c.moco.bn_splits, world_size);
    return 1;
  }
  return c.moco.bn_splits / world_size;
}

model::ResNetOptions encoder_options(const Config& c, int64_t in_channels, int world_size) {
  auto e = backbone_options(c, in_channels);
  e.bn_splits = bn_splits_per_rank(c, world_size);
  return e;
}

// "rank 1: all_to_all #5 did not complete" -> "rank 1: step 7: all_to_all #5 did not complete".
std::string with_step(const std::string& message, int64_t step) {
  if (message.rfind("step ", 0) == 0) return message;
  const std::string label = fmt::format("step {}: ", step);
  const auto colon = message.find(": ");
  if (message.rfind("rank ", 0) == 0 && colon != std::string::npos)
    return message.substr(0, colon + 2) + label + message.substr(colon + 2);
  return label + message;
}

// Threads and the seed, before anything draws; a batch that does not split over the ranks refused.
int prepare_process(const Config& config, int world) {
  const int threads = config.train.threads > 0 ? config.train.threads : available_cores();
  torch::set_num_threads(threads);
  torch::manual_seed(config.train.seed);
  if (config.optim.batch_size % world != 0)
    throw ConfigError(
        fmt::format("optim.batch_size {} is not divisible by the {} ranks", config.optim.batch_size, world));
  return threads;
}

model::Moco make_moco(const Config& config, const RunContext& context, int64_t in_channels) {
  const model::MocoOptions options{config.moco.queue_size, config.moco.momentum, config.moco.temperature,
                                   /*skip_nonfinite=*/true,
                                   /*bf16=*/config.train.precision == Precision::kBf16};
  model::Moco moco(encoder_options(config, in_channels, context.group->world_size()), options, context.group,
                   config.train.seed);
  moco->to(context.device);
  if (config.train.channels_last) use_channels_last(*moco);
  if (context.device.is_cuda()) at::globalContext().setBenchmarkCuDNN(config.train.cudnn_benchmark);
  moco->train();
  return moco;
}

std::vector<std::string> query_parameter_names(model::MocoImpl& moco) {
  std::vector<std::string> names;
  for (const auto& item : moco.encoder_q->named_parameters()) names.push_back("encoder_q." + item.key());
  return names;
}

data::LoaderOptions train_loader_options(const Config& config, const RunContext& context) {
  const int world = context.group->world_size();
  data::LoaderOptions options;
  options.batch_size = config.optim.batch_size / world;
  options.workers = data_workers(config.data.workers, context.device, context.local_size);
  options.prefetch = config.data.prefetch;
  options.seed = config.train.seed;
  options.rank = context.group->rank();
  options.world_size = world;
  options.pin_memory = context.device.is_cuda();
  spdlog::info("  data: {} decode/augmentation thread(s) per rank{}, {} batch(es) prefetched", options.workers,
               config.data.workers == 0 ? " (data.workers=0: from the cores)" : "", options.prefetch);
  return options;
}

// Everything a run is made of, built in the order that fixes every random draw and collective.
struct TrainingRun {
  TrainingRun(const Config& c, const RunContext& ctx)
      : config(c),
        context(ctx),
        group(*ctx.group),
        rank(group.rank()),
        world(group.world_size()),
        threads(prepare_process(c, world)),
        checkpointing(c, group),  // what to resume from, checked before any data is loaded
        metrics(open_run_output(c, rank, /*append=*/checkpointing.will_try_resume(), ctx.dry_run)),
        splits(load_splits(c)),
        moco(make_moco(c, ctx, splits.train->channels())),
        replicas(c, *moco, group) {
    replicas.broadcast_start();
    spdlog::info(
        "{}: {} parameters in the query encoder, feature dim {}, queue {}x{}, {} rank(s) on {}, {} threads, {}{}",
        c.model.arch, model::count_parameters(*moco->encoder_q), moco->encoder_q->feature_dim(), c.model.dim,
        c.moco.queue_size, world, ctx.device.str(), threads, c.train.precision,
        c.train.channels_last ? ", channels-last" : "");
    optimizer.emplace(moco->trainable_parameters(), c.optim.momentum, c.optim.weight_decay);
    reducer.emplace(moco->trainable_parameters(), ctx.group, static_cast<int64_t>(c.dist.bucket_mb * (1 << 20)),
                    static_cast<int64_t>(c.dist.first_bucket_mb * (1 << 20)), query_parameter_names(*moco));
    loader.emplace(splits.train, augment_options(c), train_loader_options(c, ctx));
    shape.steps_per_epoch = loader->batches_per_epoch();
    shape.world = world;
    if (shape.steps_per_epoch < 1)
      throw std::invalid_argument(fmt::format("the train split has {} images, fewer than one global batch of {}",
                                              splits.train->size(), c.optim.batch_size));
    shape.total_steps = static_cast<int64_t>(std::ceil(c.train.epochs * static_cast<double>(shape.steps_per_epoch)));
  }
  void log_plan() {
    train::log_plan(config, shape,
                    {splits.train.get(), splits.test.get(), model::count_parameters(*moco->encoder_q),
                     bn_splits_per_rank(config, world), context.device.str()},
                    checkpointing);
  }

  const Config& config;
  const RunContext& context;
  dist::ProcessGroup& group;
  const int rank, world, threads;
  Checkpointing checkpointing;
  std::optional<metrics::MetricsLog> metrics;  // rank 0's
  const Splits splits;
  model::Moco moco;
  ReplicaSync replicas;
  std::optional<MomentumSgd> optimizer;
  std::optional<dist::GradientReducer> reducer;
  std::optional<data::TwoViewLoader> loader;
  RunShape shape;
};

Progress resume_run(TrainingRun& run, TrainState& state) {
  Progress at;
  if (const auto dir = run.checkpointing.resume(state.entries())) {
    at = state.restored_progress();
    if (at.epoch * run.shape.steps_per_epoch + at.batch_in_epoch != at.step)
      throw std::runtime_error(fmt::format("{}: step {} is not epoch {} batch {} of {} batches per epoch", *dir,
                                           at.step, at.epoch, at.batch_in_epoch, run.shape.steps_per_epoch));
    run.checkpointing.mark_saved(at.step, at.train_seconds);
    if (run.metrics) run.metrics->write(metrics::CheckpointRecord{"resume", at.step, *dir, 0, 0});
  }
  return at;
}

// The baseline every result is read against. It needs no network and takes seconds, so a resumed
// run computes it again rather than carrying it in the checkpoint; its row is written once.
TrainResult knn_baselines(KnnMonitor& knn, TrainingRun& run, Progress& at) {
  TrainResult result;
  result.knn_trained = std::nan("");
  result.train_seconds = at.train_seconds;
  const bool fresh = std::isnan(at.knn_random_init);
  result.knn_raw_pixels = knn.raw_baseline_enabled() ? knn.evaluate_raw_pixels(0, 0, /*record=*/fresh) : std::nan("");
  result.knn_random_init = fresh ? knn.evaluate(run.moco->encoder_q, "random_init", 0, 0) : at.knn_random_init;
  at.knn_random_init = result.knn_random_init;
  return result;
}

// What a step needs besides the run: the debug checks, the NaN test hook, the count of skipped steps.
struct StepHooks {
  DebugChecks debug;
  sys::NanInjection nan;
  BadSteps bad_steps;
};

// Algorithm 1's step `step + 1` on this rank's share of the batch: the forward (the key encoder's
// momentum update, shuffled keys, the enqueue), the backward, the gradient all-reduce and the SGD
// step. Where a rank's queries hold NaN or Inf, every rank keeps its state instead, decided on the
// device (Note [Skipping a step on the device]).
model::MocoOutput moco_step(TrainingRun& run, StepHooks& hooks, const data::TwoViewBatch& batch, int64_t step) {
  const bool channels_last = run.config.train.channels_last;
  hooks.debug.before_forward();
  auto query = to_device(batch.query, run.context.device, channels_last);
  if (hooks.nan.hits(step + 1, run.rank)) query.fill_(std::nan(""));
  auto out = run.moco->forward(query, to_device(batch.key, run.context.device, channels_last));
  hooks.debug.after_forward(step + 1, out.trained);
  run.optimizer->zero_grad();
  out.loss.backward();
  run.reducer->finalize();
  run.optimizer->step(out.trained);
  hooks.debug.after_step(step + 1);
  return out;
}

// Where the run stands after step `step`, the `batches_done`-th of `epoch`: the loader's position.
void advance_progress(Progress& at, int64_t step, int64_t epoch, int64_t batches_done, int64_t steps_per_epoch) {
  at.step = step;
  at.epoch = batches_done == steps_per_epoch ? epoch + 1 : epoch;
  at.batch_in_epoch = batches_done == steps_per_epoch ? 0 : batches_done;
}

// The interval's metrics row and log line; the interval starts again.
void report_interval(TrainingRun& run, StepMeter& interval, int64_t step, double lr, int64_t bad_steps, double progress,
                     double train_seconds) {
  const auto r = step_record(run.config, run.shape, interval, step, bad_steps, lr, train_seconds,
                             run.reducer->last_stats().bytes_reduced);
  if (run.metrics) run.metrics->write(r);
  log_step(run.config, run.shape, r, progress);
  interval.reset();
}

void save_train_checkpoint(TrainingRun& run, TrainState& state, Progress& at, int64_t step, double train_seconds) {
  run.replicas.broadcast_bn_for_save();  // BN buffers follow rank 0 from the next step on: save those
  at.shuffle_steps = run.moco->shuffle_steps();
  at.train_seconds = train_seconds;
  const auto saved =
      run.checkpointing.save(state.entries_for_save(at), step,
                             static_cast<double>(step) / static_cast<double>(run.shape.steps_per_epoch), train_seconds);
  if (run.metrics)
    run.metrics->write(metrics::CheckpointRecord{"checkpoint", step, saved.path, saved.seconds, saved.bytes});
}

// After the last step: the final checkpoint, then the preempted or stopped line, or the trained kNN.
TrainResult finish_run(TrainingRun& run, const RunControl& control, TrainState& state, Progress& at, KnnMonitor& knn,
                       TrainResult result) {
  const int64_t step = result.steps;
  check_log_writes();  // no final checkpoint after a log line was lost
  if (!run.checkpointing.saved_at(step)) save_train_checkpoint(run, state, at, step, result.train_seconds);
  run.checkpointing.finish();
  result.checkpoint = ckpt::step_dir(run.checkpointing.root(), step);
  if (result.preempted_by != 0) {
    if (run.metrics)
      run.metrics->write(metrics::PreemptRecord{step, preempt::signal_name(result.preempted_by), result.checkpoint});
    log_preempted(result.preempted_by, step, run.shape.total_steps, result.checkpoint);
    return result;
  }
  if (control.progress(step, result.train_seconds) < 1.0) {
    log_stopped(step, run.shape.total_steps, result.checkpoint);
    return result;
  }
  result.finished = true;
  run.replicas.broadcast_bn_for_eval();
  result.knn_trained = knn.evaluate(run.moco->encoder_q, "trained", step,
                                    static_cast<double>(step) / static_cast<double>(run.shape.steps_per_epoch));
  log_knn_report(result);
  return result;
}

}  // namespace

TrainResult train(const Config& config, const RunContext& context) {
  TrainingRun run(config, context);
  if (context.dry_run) {
    run.log_plan();
    return {};
  }
  TrainState state(*run.moco, *run.optimizer, run.replicas.bn_rank_local());
  Progress at = resume_run(run, state);
  KnnMonitor knn(config, run.splits, run.metrics ? &*run.metrics : nullptr, run.group);
  TrainResult result = knn_baselines(knn, run, at);
  const RunControl control(config, run.shape.total_steps, run.checkpointing);
  StepHooks hooks{DebugChecks(config.debug, *run.moco), sys::hooks().nan_injection(),
                  BadSteps(config.train.max_bad_steps, run.checkpointing.root())};
  StepBook book(run.group, hooks.bad_steps, at.step, at.train_seconds);
  int64_t step = at.step;
  bool done = control.stops_after(step, result.train_seconds);
  if (done) spdlog::info("nothing to train: the run is at step {} of {}", step, run.shape.total_steps);
  try {
    for (int64_t epoch = at.epoch, first_batch = at.batch_in_epoch; !done; ++epoch, first_batch = 0) {
      run.loader->start_epoch(epoch, first_batch);
      for (int64_t batch_in_epoch = first_batch + 1;; ++batch_in_epoch) {  // counting this step's batch
        const auto wait_start = Clock::now();
        auto batch = run.loader->next();
        if (!batch) break;
        const double data_wait = seconds_since(wait_start);
        const auto step_start = Clock::now();
        const double lr =
            learning_rate(config, schedule_epoch(config, epoch, control.progress(step, result.train_seconds)));
        run.optimizer->set_lr(lr);
        dist::note_step(step + 1);  // for the NCCL watchdog's message, written from its own thread
        {
          const StepSyncCheck no_host_sync(config.debug.check_step_syncs, context.device);
          run.replicas.before_step(step + 1);
          const auto out = moco_step(run, hooks, *batch, step);
          advance_progress(at, ++step, epoch, batch_in_epoch, run.shape.steps_per_epoch);
          book.after_step(step, out, seconds_since(step_start), data_wait, run.moco->last_shuffle_bytes());
        }
        // Decided on the agreement every rank has (Note [The step's agreement does not block the step]).
        done = control.stops_after(step, book.agreed().train_seconds, book.agreed().stop_signal);
        if (step % config.train.log_every == 0 || done) {
          book.catch_up();
          done = control.stops_after(step, book.agreed().train_seconds, book.agreed().stop_signal);
          report_interval(run, book.interval, step, lr, hooks.bad_steps.total(),
                          control.progress(step, book.agreed().train_seconds), book.agreed().train_seconds);
        }
        result.train_seconds = book.agreed().train_seconds;
        result.preempted_by = book.agreed().stop_signal;
        run.replicas.check_after_step(step);
        check_log_writes();  // a run whose rank<N>.log cannot be written stops, as for metrics.jsonl
        if (done) break;
        if (control.checkpoint_due(step, result.train_seconds)) {
          book.catch_up();  // a checkpoint never holds a step that should have ended the run
          save_train_checkpoint(run, state, at, step, result.train_seconds);
        }
      }
      if (!done) {
        book.catch_up();
        log_epoch(book.epoch, epoch + 1, hooks.bad_steps.total(), result.train_seconds, run.splits.train->bad_files());
      }
      book.epoch.reset();
      if (!done && control.knn_due(epoch + 1)) {
        run.replicas.broadcast_bn_for_eval();
        knn.evaluate(run.moco->encoder_q, "trained", step, static_cast<double>(epoch + 1));
      }
    }
  } catch (const std::exception& e) {
    // Whatever failed (a collective that timed out, a worker, a check) happened in this step.
    throw std::runtime_error(with_step(e.what(), step + 1));
  }
  result.steps = step;
  result = finish_run(run, control, state, at, knn, result);
  check_log_writes();
  return result;
}

}  // namespace moco::train
