#include "train/pretraining.h"

#include "preempt/preemption.h"
#include "run/run_logging.h"  // defines: check_log_writes

#include <spdlog/spdlog.h>

namespace moco::train {
namespace {

std::optional<run::OnlineProbe> online_probe(TrainingRun& run) {
  if (!run.config.eval.online_probe) return std::nullopt;
  return std::make_optional<run::OnlineProbe>(run.config, run.method->encoder()->feature_dim(),
                                              run.splits.train->num_classes(), run.context.device, run.group);
}

}  // namespace

TrainState::Layout pretraining_layout() {
  return {{"step", "epoch", "batch_in_epoch", "shuffle_steps"}, {"train_seconds", "knn_random_init"}, true};
}

Pretraining::Pretraining(TrainingRun& run)
    : run_(run),
      schedule_(pretraining_schedule(run.config)),
      probe_(online_probe(run)),
      knn_(run.config, run.splits, run.metrics ? &*run.metrics : nullptr, run.group) {
  initial_.emplace(run.method->encoder());  // before the loop's resume loads the trained weights
  result_.knn_trained = std::nan("");
}

std::vector<ckpt::StateEntry> Pretraining::state_entries() {
  return probe_ ? probe_->state_entries() : std::vector<ckpt::StateEntry>{};
}

double Pretraining::learning_rate(int64_t epoch, double progress) const {
  return train::learning_rate(schedule_, schedule_epoch(schedule_, epoch, progress));
}

void Pretraining::resumed(const std::string& /*dir*/, TrainState& state, StepMeter& /*epoch*/) {
  run_.method->set_draw_counter(state.counter("shuffle_steps"));
  knn_random_init_ = state.value("knn_random_init");
  if (!std::isnan(knn_random_init_)) initial_.reset();  // scored before the checkpoint
}

void Pretraining::after_step(const run::StepOutput& out, const torch::Tensor& labels) {
  if (probe_) probe_->train(out.features, labels, out.trained);
}

// The interval's metrics row and log line.
void Pretraining::report(const StepMeter& interval, const LoopStatus& s) {
  const auto scalars = run_.method->step_scalars();
  const auto r = step_record(run_.config, run_.shape, interval, s.step, s.bad_steps, s.lr, s.train_seconds,
                             s.gradient_bytes, scalars);
  if (run_.metrics) run_.metrics->write(r);
  log_step(run_.config, run_.shape, r, s.progress, scalars);
}

// The epoch's line and, when due, the kNN monitor and the online probe; none after the run's last
// step (finish scores them).
bool Pretraining::after_epoch(const EpochEnd& end, StepMeter& epoch, const LoopStatus& s) {
  if (end.run_stops) return false;
  log_epoch(epoch, end.epochs_done, s.bad_steps, s.train_seconds, run_.splits.train->bad_files(),
            run_.method->step_scalars());
  const int64_t every = run_.config.knn.every_epochs;
  if (every > 0 && end.epochs_done % every == 0) score_trained(s.step, static_cast<double>(end.epochs_done));
  score_probe(s.step, static_cast<double>(end.epochs_done));
  return false;
}

void Pretraining::before_save(TrainState& state, const StepMeter& /*epoch*/) {
  state.counter("shuffle_steps") = run_.method->draw_counter();
  state.value("knn_random_init") = knn_random_init_;
}

// The baselines every result is read against, scored with the run's first kNN evaluation rather
// than before its first step: on ImageNet they take minutes (Note [A start that does not grow with
// the dataset]). The raw pixels need no network, so each process scores them again (its final line
// reads the trained figure against them) and writes their row once; the random init is scored once
// in a run, from the encoder's initial weights, and carried in checkpoints.
void Pretraining::score_baselines() {
  if (baselines_scored_) return;
  baselines_scored_ = true;
  const bool fresh = std::isnan(knn_random_init_);
  result_.knn_raw_pixels =
      knn_.raw_baseline_enabled() ? knn_.evaluate_raw_pixels(0, 0, /*record=*/fresh) : std::nan("");
  if (!fresh) return;
  auto encoder = run_.method->encoder();
  initial_->lend(encoder, [&] { knn_random_init_ = knn_.evaluate(encoder, "random_init", 0, 0); });
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
void Pretraining::score_trained(int64_t step, double epoch) {
  score_baselines();
  run_.method->before_eval();
  result_.knn_trained = knn_.evaluate(run_.method->encoder(), "trained", step, epoch);
}

// The online probe's test top-1, at each epoch's end and the run's.
void Pretraining::score_probe(int64_t step, double epoch) {
  if (!probe_) return;
  const auto start = run::Clock::now();
  run_.method->before_eval();
  metrics::ProbeRecord r;
  r.top1 = probe_->score(run_.method->encoder(), *run_.splits.test, run::augment_options(run_.config));
  r.step = step;
  r.epoch = epoch;
  r.query_size = run_.config.eval.probe_val_size > 0
                     ? std::min(run_.config.eval.probe_val_size, run_.splits.test->size())
                     : run_.splits.test->size();
  r.seconds = run::seconds_since(start);
  if (run_.metrics) run_.metrics->write(r);
  spdlog::info("online probe (epoch {:.2f}): top-1 {:.2f}% ({} test images, {:.1f}s)", epoch, r.top1, r.query_size,
               r.seconds);
}

// The preempted or stopped line, or the trained kNN and its report.
void Pretraining::finish(const LoopEnd& end, const LoopStatus& /*status*/) {
  result_.steps = end.steps;
  result_.train_seconds = end.train_seconds;
  result_.preempted_by = end.preempted_by;
  result_.checkpoint = end.checkpoint;
  result_.knn_random_init = knn_random_init_;
  if (end.preempted_by != 0) {
    if (run_.metrics)
      run_.metrics->write(metrics::PreemptRecord{end.steps, preempt::signal_name(end.preempted_by), end.checkpoint});
    log_preempted(end.preempted_by, end.steps, run_.shape.total_steps, end.checkpoint);
    return;
  }
  if (!end.finished) {
    log_stopped(end.steps, run_.shape.total_steps, end.checkpoint);
    return;
  }
  result_.finished = true;
  const double epoch = static_cast<double>(end.steps) / static_cast<double>(run_.shape.steps_per_epoch);
  score_probe(end.steps, epoch);
  score_trained(end.steps, epoch);
  log_knn_report(result_);
  // A signal after the ranks' last agreement (during the final checkpoint or kNN) stops nothing: the
  // run had finished. Said, so that it is not taken for lost.
  if (const int sig = preempt::preemption_signal(); sig != 0)
    spdlog::warn(
        "{} came after the last step (during the final checkpoint or kNN evaluation): the run had finished, "
        "{} is committed, so it ends as it would have",
        preempt::signal_name(sig), end.checkpoint);
}

}  // namespace moco::train
