#include "train/trainer.h"

#include "train/loop.h"
#include "train/pretraining.h"
#include "train/training_run.h"

namespace moco::train {

// What a pre-training run is made of (TrainingRun), what it does between the method's steps
// (Pretraining: the step lines, kNN, the online probe) and the loop every program shares (run_loop:
// for each minibatch, one step of the method, then the loop's chores).
TrainResult train(const run::Config& config, const run::RunContext& context) {
  TrainingRun run(config, context);
  if (context.dry_run) {
    run.log_plan();
    return {};
  }
  Pretraining job(run);
  Loop loop({*run.method, run.group, run.checkpointing, run.metrics ? &*run.metrics : nullptr, run.shape,
             config.train.time_budget_s, config.train.stop_at_step, config.train.max_bad_steps,
             config.debug.check_step_syncs, context.device, config.train.resume_on_changed_data},
            job);
  run_loop(loop, *run.method, run.batches);
  return job.result();
}

}  // namespace moco::train
