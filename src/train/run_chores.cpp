#include "train/run_chores.h"

#include "dist/nccl_watchdog.h"  // defines: note_step
#include "preempt/preemption.h"
#include "run/run_logging.h"  // defines: check_log_writes
#include "train/schedule.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <stdexcept>

namespace moco::train {
namespace {

// Where the run stands after step `step`, the `batches_done`-th of `epoch`: the loader's position.
void advance_progress(Progress& at, int64_t step, int64_t epoch, int64_t batches_done, int64_t steps_per_epoch) {
  at.step = step;
  at.epoch = batches_done == steps_per_epoch ? epoch + 1 : epoch;
  at.batch_in_epoch = batches_done == steps_per_epoch ? 0 : batches_done;
}

std::optional<run::OnlineProbe> online_probe(TrainingRun& run) {
  if (!run.config.eval.online_probe) return std::nullopt;
  return std::make_optional<run::OnlineProbe>(run.config, run.method->encoder()->feature_dim(),
                                              run.splits.train->num_classes(), run.context.device, run.group);
}

// The method's, then the probe's.
std::vector<ckpt::StateEntry> state_entries(run::Method& method, const std::optional<run::OnlineProbe>& probe) {
  auto entries = method.state_entries();
  if (probe)
    for (auto& entry : probe->state_entries()) entries.push_back(std::move(entry));
  return entries;
}

}  // namespace

RunChores::RunChores(TrainingRun& run)
    : run_(run),
      probe_(online_probe(run)),
      state_(state_entries(*run.method, probe_)),
      knn_(run.config, run.splits, run.metrics ? &*run.metrics : nullptr, run.group),
      control_(run.config, run.shape.total_steps, run.checkpointing),
      bad_steps_(run.config.train.max_bad_steps, run.checkpointing.root()) {
  initial_.emplace(run.method->encoder());  // before resume() loads the trained weights
  resume();
  if (!std::isnan(at_.knn_random_init)) initial_.reset();  // scored before the checkpoint
  result_.knn_trained = std::nan("");
  result_.knn_random_init = at_.knn_random_init;
  result_.train_seconds = at_.train_seconds;
  book_.emplace(run.group, bad_steps_, at_.step, at_.train_seconds);
  step_ = at_.step;
  done_ = control_.stops_after(step_, result_.train_seconds);
  if (done_) spdlog::info("nothing to train: the run is at step {} of {}", step_, run.shape.total_steps);
}

void RunChores::resume() {
  const auto dir = run_.checkpointing.resume(state_.entries());
  if (!dir) return;
  at_ = state_.restored_progress();
  run_.method->set_draw_counter(at_.shuffle_steps);
  if (at_.epoch * run_.shape.steps_per_epoch + at_.batch_in_epoch != at_.step)
    throw std::runtime_error(fmt::format("{}: step {} is not epoch {} batch {} of {} batches per epoch", *dir, at_.step,
                                         at_.epoch, at_.batch_in_epoch, run_.shape.steps_per_epoch));
  run_.checkpointing.mark_saved(at_.step, at_.train_seconds);
  if (run_.metrics) run_.metrics->write(metrics::CheckpointRecord{"resume", at_.step, *dir, 0, 0});
}

// The baselines every result is read against, scored with the run's first kNN evaluation rather
// than before its first step: on ImageNet they take minutes (Note [A start that does not grow with
// the dataset]). The raw pixels need no network, so each process scores them again (its final line
// reads the trained figure against them) and writes their row once; the random init is scored once
// in a run, from the encoder's initial weights, and carried in checkpoints.
void RunChores::score_baselines() {
  if (baselines_scored_) return;
  baselines_scored_ = true;
  const bool fresh = std::isnan(at_.knn_random_init);
  result_.knn_raw_pixels =
      knn_.raw_baseline_enabled() ? knn_.evaluate_raw_pixels(0, 0, /*record=*/fresh) : std::nan("");
  if (!fresh) return;
  auto encoder = run_.method->encoder();
  initial_->lend(encoder, [&] { result_.knn_random_init = knn_.evaluate(encoder, "random_init", 0, 0); });
  at_.knn_random_init = result_.knn_random_init;
  initial_.reset();
}

// Note [A start that does not grow with the dataset]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Everything between launch and the first step is bounded by the run's configuration, never by its
// dataset's size, except the scan of the file list (cached, docs/benchmarks.md). The kNN baselines
// embed up to knn.memory_size + knn.query_size images: scored before step 1, they kept a 1.28M-file
// run from its first step for minutes with every accelerator idle. They are scored with the first
// kNN evaluation instead (an epoch's end or the run's), the random init from a host copy of the
// encoder as initialised (run::InitialWeights), taken before a resume: the construction is seeded,
// so a resumed process copies the same weights.

// The trained encoder's kNN, after the baselines.
void RunChores::score_trained(double epoch) {
  score_baselines();
  run_.method->before_eval();
  result_.knn_trained = knn_.evaluate(run_.method->encoder(), "trained", step_, epoch);
}

void RunChores::start_epoch(run::DeviceBatches& batches, int64_t epoch) {
  epoch_ = epoch;
  batch_in_epoch_ = epoch == at_.epoch ? at_.batch_in_epoch : 0;  // at_ is where the loader stands
  batches.start_epoch(epoch, batch_in_epoch_);
}

// A batch fetched ahead (DeviceBatches' lookahead) is not counted until it is handed out here.
std::optional<data::TwoViewBatch> RunChores::next_batch(run::DeviceBatches& batches) {
  const auto wait_start = run::Clock::now();
  auto batch = batches.next();
  if (!batch) return batch;
  data_wait_ = run::seconds_since(wait_start);
  ++batch_in_epoch_;  // counting this step's batch
  labels_ = batch->labels;
  return batch;
}

double RunChores::start_step() {
  step_start_ = run::Clock::now();
  const auto& c = run_.config;
  lr_ = learning_rate(c, schedule_epoch(c, epoch_, control_.progress(step_, result_.train_seconds)));
  dist::note_step(step_ + 1);  // for the NCCL watchdog's message, written from its own thread
  no_host_sync_.emplace(c.debug.check_step_syncs, run_.context.device);
  return lr_;
}

bool RunChores::after_step(const run::StepOutput& out) {
  if (probe_) probe_->train(out.features, labels_, out.trained);
  advance_progress(at_, ++step_, epoch_, batch_in_epoch_, run_.shape.steps_per_epoch);
  book_->after_step(step_, out, run::seconds_since(step_start_), data_wait_, out.exchanged_bytes);
  no_host_sync_.reset();
  gradient_bytes_ = out.gradient_bytes;
  // Decided on the agreement every rank has (Note [The step's agreement does not block the step]).
  done_ = control_.stops_after(step_, book_->agreed().train_seconds, book_->agreed().stop_signal);
  if (step_ % run_.config.train.log_every == 0 || done_) {
    book_->catch_up();
    done_ = control_.stops_after(step_, book_->agreed().train_seconds, book_->agreed().stop_signal);
    report_interval();
  }
  result_.train_seconds = book_->agreed().train_seconds;
  result_.preempted_by = book_->agreed().stop_signal;
  run_.method->check_after_step(step_);
  run::check_log_writes();  // a run whose rank<N>.log cannot be written stops, as for metrics.jsonl
  if (done_) return true;
  if (control_.checkpoint_due(step_, result_.train_seconds)) {
    book_->catch_up();  // a checkpoint never holds a step that should have ended the run
    save_checkpoint();
  }
  return false;
}

// The interval's metrics row and log line; the interval starts again.
void RunChores::report_interval() {
  const double seconds = book_->agreed().train_seconds;
  const auto r =
      step_record(run_.config, run_.shape, book_->interval, step_, bad_steps_.total(), lr_, seconds, gradient_bytes_);
  if (run_.metrics) run_.metrics->write(r);
  log_step(run_.config, run_.shape, r, control_.progress(step_, seconds));
  book_->interval.reset();
}

void RunChores::after_epoch(int64_t epoch) {
  if (!done_) {
    book_->catch_up();
    log_epoch(book_->epoch, epoch + 1, bad_steps_.total(), result_.train_seconds, run_.splits.train->bad_files());
  }
  book_->epoch.reset();
  if (!done_ && control_.knn_due(epoch + 1)) score_trained(static_cast<double>(epoch + 1));
  if (!done_) score_probe(static_cast<double>(epoch + 1));
}

// The online probe's test top-1, at each epoch's end and the run's.
void RunChores::score_probe(double epoch) {
  if (!probe_) return;
  const auto start = run::Clock::now();
  run_.method->before_eval();
  metrics::ProbeRecord r;
  r.top1 = probe_->score(run_.method->encoder(), *run_.splits.test, run::augment_options(run_.config));
  r.step = step_;
  r.epoch = epoch;
  r.query_size = run_.config.eval.probe_val_size > 0
                     ? std::min(run_.config.eval.probe_val_size, run_.splits.test->size())
                     : run_.splits.test->size();
  r.seconds = run::seconds_since(start);
  if (run_.metrics) run_.metrics->write(r);
  spdlog::info("online probe (epoch {:.2f}): top-1 {:.2f}% ({} test images, {:.1f}s)", epoch, r.top1, r.query_size,
               r.seconds);
}

void RunChores::save_checkpoint() {
  run_.method->before_save();  // e.g. BN buffers that follow rank 0 from the next step on: save those
  at_.shuffle_steps = run_.method->draw_counter();
  at_.train_seconds = result_.train_seconds;
  const double epoch = static_cast<double>(step_) / static_cast<double>(run_.shape.steps_per_epoch);
  const auto saved = run_.checkpointing.save(state_.entries_for_save(at_), step_, epoch, result_.train_seconds);
  if (run_.metrics)
    run_.metrics->write(metrics::CheckpointRecord{"checkpoint", step_, saved.path, saved.seconds, saved.bytes});
}

TrainResult RunChores::finish() {
  result_.steps = step_;
  run::check_log_writes();  // no final checkpoint after a log line was lost
  const bool finished = result_.preempted_by == 0 && control_.progress(step_, result_.train_seconds) >= 1.0;
  if (finished) score_baselines();  // a finished run's last checkpoint holds its random-init figure
  if (!run_.checkpointing.saved_at(step_)) save_checkpoint();
  run_.checkpointing.finish();
  result_.checkpoint = ckpt::step_dir(run_.checkpointing.root(), step_);
  if (result_.preempted_by != 0) {
    if (run_.metrics)
      run_.metrics->write(
          metrics::PreemptRecord{step_, preempt::signal_name(result_.preempted_by), result_.checkpoint});
    log_preempted(result_.preempted_by, step_, run_.shape.total_steps, result_.checkpoint);
    return result_;
  }
  if (!finished) {
    log_stopped(step_, run_.shape.total_steps, result_.checkpoint);
    return result_;
  }
  result_.finished = true;
  score_probe(static_cast<double>(step_) / static_cast<double>(run_.shape.steps_per_epoch));
  score_trained(static_cast<double>(step_) / static_cast<double>(run_.shape.steps_per_epoch));
  log_knn_report(result_);
  // A signal after the ranks' last agreement (during the final checkpoint or kNN) stops nothing: the
  // run had finished. Said, so that it is not taken for lost.
  if (const int sig = preempt::preemption_signal(); sig != 0)
    spdlog::warn(
        "{} came after the last step (during the final checkpoint or kNN evaluation): the run had finished, "
        "{} is committed, so it ends as it would have",
        preempt::signal_name(sig), result_.checkpoint);
  return result_;
}

}  // namespace moco::train
