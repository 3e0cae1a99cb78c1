#include "train/train_log.h"

#include "preempt/preemption.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <csignal>

namespace moco::train {

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

void log_plan(const run::Config& c, const RunShape& shape, const PlanFacts& facts,
              const run::Checkpointing& checkpointing) {
  const auto& train_split = *facts.train_split;
  spdlog::info("dry run: nothing is trained or written");
  spdlog::info("  world: {} rank(s), this one on {}; {} image(s) per rank per step, global batch {}", shape.world,
               facts.device, c.optim.batch_size / shape.world, c.optim.batch_size);
  spdlog::info("  data: {} ({} train / {} test images of {}x{}x{}), {} steps per epoch", c.data.dataset,
               train_split.size(), facts.test_split->size(), train_split.channels(), train_split.height(),
               train_split.width(), shape.steps_per_epoch);
  spdlog::info("  model: {} ({} parameters in the query encoder), {}", c.model.arch, facts.parameters, facts.plan);
  spdlog::info("  schedule: {} steps ({} epochs){}, lr {} ({}, set every {}), stop at step {}", shape.total_steps,
               c.train.epochs,
               c.train.time_budget_s > 0
                   ? fmt::format(" or {} s of training, whichever comes first", c.train.time_budget_s)
                   : "",
               c.optim.base_lr * static_cast<double>(c.optim.batch_size) / 256.0, c.optim.schedule, c.optim.lr_update,
               c.train.stop_at_step > 0 ? std::to_string(c.train.stop_at_step) : "none");
  spdlog::info("  checkpoints: {} every {} steps / {} minutes and at the end ({}), keep the last {}{}",
               checkpointing.root(), c.ckpt.every_steps > 0 ? std::to_string(c.ckpt.every_steps) : "-",
               c.ckpt.every_minutes > 0 ? fmt::format("{}", c.ckpt.every_minutes) : "-",
               c.ckpt.async ? "in the background" : "synchronous", c.ckpt.keep_last,
               c.ckpt.keep_every_steps > 0 ? fmt::format(" and every {} steps", c.ckpt.keep_every_steps) : "");
  std::vector<std::string> skipped;
  const auto from = checkpointing.will_try_resume() ? checkpointing.would_resume_from(skipped) : std::nullopt;
  for (const auto& why : skipped) spdlog::warn("  resume: would skip {}", why);
  spdlog::info("  resume: {}", from ? "from " + *from + " (train.resume=" + c.train.resume + "; every tensor verified)"
                               : skipped.empty() ? std::string("none, a fresh start")
                                                 : "none: no checkpoint loads, a fresh start");
}

metrics::StepRecord step_record(const run::Config& c, const RunShape& shape, const StepMeter& interval, int64_t step,
                                int64_t bad_steps, double lr, double train_seconds, int64_t grad_bytes_per_step,
                                const std::vector<run::StepScalar>& scalars) {
  metrics::StepRecord r;
  r.step = step;
  r.epoch = static_cast<double>(step) / static_cast<double>(shape.steps_per_epoch);
  r.loss = interval.mean_loss();
  r.bad_steps = bad_steps;
  const auto means = interval.mean_scalars();
  for (size_t i = 0; i < scalars.size(); ++i)
    r.scalars.emplace_back(scalars[i].name, i < means.size() ? means[i] : std::nan(""));
  r.data_wait_s = interval.data_wait_s / static_cast<double>(interval.steps);
  r.data_wait_share = interval.data_wait_s / (interval.data_wait_s + interval.seconds);
  r.lr = lr;
  r.img_per_s = static_cast<double>(interval.steps * c.optim.batch_size) / interval.seconds;
  r.elapsed_s = train_seconds;
  r.shuffle_bytes_per_step = interval.trained_steps > 0 ? interval.shuffle_bytes / interval.trained_steps : 0;
  r.grad_bytes_per_step = grad_bytes_per_step;
  return r;
}

namespace {

// " acc@1 97.5% acc@5 99.1%": the method's scalars as its line shows them (those of the epoch's line only).
std::string scalars_text(const std::vector<run::StepScalar>& scalars, const std::vector<double>& values,
                         bool epoch_line, const char* separator) {
  std::string text;
  for (size_t i = 0; i < scalars.size() && i < values.size(); ++i)
    if (!epoch_line || scalars[i].in_epoch_line)
      text +=
          fmt::format("{}{} {:.{}f}{}", separator, scalars[i].label, values[i], scalars[i].decimals, scalars[i].unit);
  return text;
}

std::vector<double> values_of(const metrics::StepRecord& r) {
  std::vector<double> values;
  for (const auto& [name, value] : r.scalars) values.push_back(value);
  return values;
}

}  // namespace

void log_step(const run::Config& c, const RunShape& shape, const metrics::StepRecord& r, double progress,
              const std::vector<run::StepScalar>& scalars) {
  spdlog::info(
      "epoch {:.2f} step {}/{} loss {:.4f}{} lr {:.4g} {:.1f} img/s data wait "
      "{:.0f}% ETA {}{}",
      r.epoch, r.step, c.train.time_budget_s > 0 ? "~" : std::to_string(shape.total_steps), r.loss,
      scalars_text(scalars, values_of(r), false, " "), r.lr, r.img_per_s, 100 * r.data_wait_share,
      format_duration(r.elapsed_s * std::max(0.0, 1.0 - progress) / std::max(progress, 1e-9)),
      shape.world > 1 ? fmt::format(" | shuffle {:.1f} KiB/step, gradients {:.1f} MiB/step",
                                    r.shuffle_bytes_per_step / 1024.0, r.grad_bytes_per_step / 1048576.0)
                      : "");
}

void log_epoch(const StepMeter& epoch, int64_t epochs_done, int64_t bad_steps, double train_seconds, int64_t bad_files,
               const std::vector<run::StepScalar>& scalars) {
  if (epoch.trained_steps == 0) return;
  spdlog::info(
      "epoch {} done: mean loss {:.4f}{} over {} step(s); {} step(s) skipped so far; {} of "
      "training{}",
      epochs_done, epoch.mean_loss(), scalars_text(scalars, epoch.mean_scalars(), true, ", "), epoch.trained_steps,
      bad_steps, format_duration(train_seconds),
      bad_files > 0 ? fmt::format("; {} unreadable image file(s) skipped by this rank", bad_files) : "");
}

void log_preempted(int signal, int64_t step, int64_t total_steps, const std::string& checkpoint) {
  spdlog::info(
      "preempted by {} after step {} of {}: checkpoint {} committed; the same command continues from it "
      "(train.resume=auto)",
      preempt::signal_name(signal), step, total_steps, checkpoint);
}

void log_stopped(int64_t step, int64_t total_steps, const std::string& checkpoint) {
  spdlog::info(
      "stopped after step {} of {} (train.stop_at_step); the same command with train.stop_at_step=0 continues from "
      "{}",
      step, total_steps, checkpoint);
}

void log_knn_report(const TrainResult& result) {
  spdlog::info(
      "kNN top-1: {}random init {:.2f}%, trained {:.2f}% after {} steps ({:+.2f} points over random init), {:.0f}s of "
      "training",
      std::isnan(result.knn_raw_pixels) ? "" : fmt::format("raw pixels {:.2f}%, ", result.knn_raw_pixels),
      result.knn_random_init, result.knn_trained, result.steps, result.knn_trained - result.knn_random_init,
      result.train_seconds);
  if (result.knn_trained < result.knn_raw_pixels)
    spdlog::warn(
        "the trained features score {:.2f} points below the raw pixels they start from: as a kNN feature, training has "
        "not "
        "yet beaten the pixels",
        result.knn_raw_pixels - result.knn_trained);
}

}  // namespace moco::train
