#include "train/loop.h"

#include "ckpt/checkpoint_dir.h"
#include "dist/nccl_watchdog.h"  // defines: note_step
#include "run/run_logging.h"     // defines: check_log_writes

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

namespace moco::train {
namespace {

// Where the run stands after step `step`, the `batches_done`-th of `epoch`: the loader's position.
void advance_progress(Progress& at, int64_t step, int64_t epoch, int64_t batches_done, int64_t steps_per_epoch) {
  at.step = step;
  at.epoch = batches_done == steps_per_epoch ? epoch + 1 : epoch;
  at.batch_in_epoch = batches_done == steps_per_epoch ? 0 : batches_done;
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

// The method's entries, then the job's.
std::vector<ckpt::StateEntry> state_entries(run::Method& method, LoopJob& job) {
  auto entries = method.state_entries();
  for (auto& entry : job.state_entries()) entries.push_back(std::move(entry));
  return entries;
}

}  // namespace

Loop::Loop(const LoopParts& parts, LoopJob& job)
    : parts_(parts),
      job_(job),
      state_(state_entries(parts.method, job), job.progress_layout()),
      control_(parts.shape.total_steps, parts.time_budget_s, parts.stop_at_step, parts.checkpointing),
      bad_steps_(parts.max_bad_steps, parts.checkpointing.root()) {
  StepMeter resumed_epoch;
  resume(resumed_epoch);
  train_seconds_ = at_.train_seconds;
  book_.emplace(parts_.group, bad_steps_, at_.step, at_.train_seconds);
  book_->epoch = resumed_epoch;
  step_ = at_.step;
  done_ = control_.stops_after(step_, train_seconds_);
  if (done_) spdlog::info("nothing to train: the run is at step {} of {}", step_, parts_.shape.total_steps);
}

void Loop::resume(StepMeter& epoch) {
  const auto dir = parts_.checkpointing.resume(state_.entries());
  if (!dir) return;
  at_ = state_.restored_progress();
  place_in_epoch(*dir);
  parts_.checkpointing.mark_saved(at_.step, at_.train_seconds);
  if (parts_.metrics) parts_.metrics->write(metrics::CheckpointRecord{"resume", at_.step, *dir, 0, 0});
  job_.resumed(*dir, state_, epoch);
}

// The checkpoint's (epoch, batch) is its step's place at this run's batches per epoch, unless the
// train split changed size under train.resume_on_changed_data: then the step keeps counting (the
// schedule with it) and its place is counted again from it.
void Loop::place_in_epoch(const std::string& dir) {
  const int64_t per_epoch = parts_.shape.steps_per_epoch;
  if (at_.epoch * per_epoch + at_.batch_in_epoch == at_.step) return;
  const auto where = fmt::format("{}: step {} is not epoch {} batch {} of {} batches per epoch", dir, at_.step,
                                 at_.epoch, at_.batch_in_epoch, per_epoch);
  if (!parts_.position_from_step) throw std::runtime_error(where);
  at_.epoch = at_.step / per_epoch;
  at_.batch_in_epoch = at_.step % per_epoch;
  spdlog::warn(
      "resume: {} (the train split changed size; train.resume_on_changed_data=true): step {} goes on as "
      "epoch {} batch {}",
      where, at_.step, at_.epoch, at_.batch_in_epoch);
}

LoopStatus Loop::status() const {
  return {step_, lr_, train_seconds_, control_.progress(step_, train_seconds_), bad_steps_.total(), gradient_bytes_};
}

void Loop::start_epoch(run::BatchSource& batches, int64_t epoch) {
  epoch_ = epoch;
  batch_in_epoch_ = epoch == at_.epoch ? at_.batch_in_epoch : 0;  // at_ is where the loader stands
  batches.start_epoch(epoch, batch_in_epoch_);
}

// A batch fetched ahead (DeviceBatches' lookahead) is not counted until it is handed out here.
std::optional<data::TwoViewBatch> Loop::next_batch(run::BatchSource& batches) {
  const auto wait_start = run::Clock::now();
  auto batch = batches.next();
  if (!batch) return batch;
  data_wait_ = run::seconds_since(wait_start);
  ++batch_in_epoch_;  // counting this step's batch
  labels_ = batch->labels;
  return batch;
}

double Loop::start_step() {
  step_start_ = run::Clock::now();
  lr_ = job_.learning_rate(epoch_, control_.progress(step_, train_seconds_));
  dist::note_step(step_ + 1);  // for the NCCL watchdog's message, written from its own thread
  no_host_sync_.emplace(parts_.check_step_syncs, parts_.device);
  return lr_;
}

bool Loop::after_step(const run::StepOutput& out) {
  job_.after_step(out, labels_);
  advance_progress(at_, ++step_, epoch_, batch_in_epoch_, parts_.shape.steps_per_epoch);
  book_->after_step(step_, out, run::seconds_since(step_start_), data_wait_, out.exchanged_bytes,
                    labels_.defined() ? labels_.size(0) : 0);
  no_host_sync_.reset();
  gradient_bytes_ = out.gradient_bytes;
  // Decided on the agreement every rank has (Note [The step's agreement does not block the step]).
  done_ = control_.stops_after(step_, book_->agreed().train_seconds, book_->agreed().stop_signal);
  if (job_.reports_after(step_) || done_) {
    book_->catch_up();
    done_ = control_.stops_after(step_, book_->agreed().train_seconds, book_->agreed().stop_signal);
    train_seconds_ = book_->agreed().train_seconds;
    job_.report(book_->interval, status());
    book_->interval.reset();
  }
  train_seconds_ = book_->agreed().train_seconds;
  preempted_by_ = book_->agreed().stop_signal;
  parts_.method.check_after_step(step_);
  run::check_log_writes();  // a run whose rank<N>.log cannot be written stops, as for metrics.jsonl
  if (done_) return true;
  if (control_.checkpoint_due(step_, train_seconds_)) {
    book_->catch_up();  // a checkpoint never holds a step that should have ended the run
    save_checkpoint();
  }
  return false;
}

void Loop::after_epoch(int64_t epoch) {
  const EpochEnd end{epoch + 1, batch_in_epoch_ == parts_.shape.steps_per_epoch, done_};
  book_->catch_up();
  const bool save = job_.after_epoch(end, book_->epoch, status());
  if (end.complete) book_->epoch.reset();  // a run stopped mid-epoch checkpoints the epoch so far
  if (save && !parts_.checkpointing.saved_at(step_)) save_checkpoint();
}

void Loop::save_checkpoint() {
  parts_.method.before_save();  // e.g. BN buffers that follow rank 0 from the next step on: save those
  job_.before_save(state_, book_->epoch);
  at_.train_seconds = train_seconds_;
  const double epoch = static_cast<double>(step_) / static_cast<double>(parts_.shape.steps_per_epoch);
  const auto saved = parts_.checkpointing.save(state_.entries_for_save(at_), step_, epoch, train_seconds_);
  if (parts_.metrics)
    parts_.metrics->write(metrics::CheckpointRecord{"checkpoint", step_, saved.path, saved.seconds, saved.bytes});
}

LoopEnd Loop::finish() {
  LoopEnd end;
  end.steps = step_;
  end.train_seconds = train_seconds_;
  end.preempted_by = preempted_by_;
  run::check_log_writes();  // no final checkpoint after a log line was lost
  end.finished = end.preempted_by == 0 && control_.progress(step_, train_seconds_) >= 1.0;
  if (end.finished) job_.before_final_save();
  if (!parts_.checkpointing.saved_at(step_)) save_checkpoint();
  parts_.checkpointing.finish();
  end.checkpoint = ckpt::step_dir(parts_.checkpointing.root(), step_);
  job_.finish(end, status());
  return end;
}

LoopEnd run_loop(Loop& loop, run::Method& method, run::BatchSource& batches) {
  try {
    for (int64_t epoch = loop.first_epoch(); !loop.done(); ++epoch) {
      loop.start_epoch(batches, epoch);
      while (const auto batch = loop.next_batch(batches)) {
        method.set_lr(loop.start_step());
        const auto out = method.step(*batch, loop.step() + 1);
        if (loop.after_step(out)) break;
      }
      loop.after_epoch(epoch);
    }
  } catch (const std::exception& e) {
    // Whatever failed (a collective that timed out, a worker, a check) happened in this step.
    throw std::runtime_error(with_step(e.what(), loop.step() + 1));
  }
  auto end = loop.finish();
  run::check_log_writes();
  return end;
}

}  // namespace moco::train
