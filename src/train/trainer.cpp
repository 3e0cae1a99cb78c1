#include "train/trainer.h"

#include "run/run_logging.h"  // defines: check_log_writes
#include "train/run_chores.h"
#include "train/training_run.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace moco::train {
namespace {

// "rank 1: all_to_all #5 did not complete" -> "rank 1: step 7: all_to_all #5 did not complete".
std::string with_step(const std::string& message, int64_t step) {
  if (message.rfind("step ", 0) == 0) return message;
  const std::string label = fmt::format("step {}: ", step);
  const auto colon = message.find(": ");
  if (message.rfind("rank ", 0) == 0 && colon != std::string::npos)
    return message.substr(0, colon + 2) + label + message.substr(colon + 2);
  return label + message;
}

}  // namespace

// The loop of MoCo's Algorithm 1: for each minibatch of two augmented views, one step of the method
// (run::Method::step: for MoCo the momentum update, the queue, the loss and the SGD update). What a
// run does between steps (the ranks' agreement, logs, checks, checkpoints, when to stop, the kNN
// monitor) is RunChores' one call after each step and each epoch.
TrainResult train(const run::Config& config, const run::RunContext& context) {
  TrainingRun run(config, context);
  if (context.dry_run) {
    run.log_plan();
    return {};
  }
  RunChores chores(run);
  try {
    for (int64_t epoch = chores.first_epoch(); !chores.done(); ++epoch) {
      chores.start_epoch(run.batches, epoch);
      while (const auto batch = chores.next_batch(run.batches)) {
        run.method->set_lr(chores.start_step());
        const auto out = run.method->step(*batch, chores.step() + 1);
        if (chores.after_step(out)) break;
      }
      chores.after_epoch(epoch);
    }
  } catch (const std::exception& e) {
    // Whatever failed (a collective that timed out, a worker, a check) happened in this step.
    throw std::runtime_error(with_step(e.what(), chores.step() + 1));
  }
  auto result = chores.finish();
  run::check_log_writes();
  return result;
}

}  // namespace moco::train
