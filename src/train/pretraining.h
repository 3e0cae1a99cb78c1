// defines: Pretraining (the self-supervised run on the loop, train/loop.h: optim.*'s schedule, the step
// lines every train.log_every steps, the epoch's line, the kNN monitor with its baselines, the online
// probe, the final report), pretraining_layout (what its checkpoints hold of its progress)
#pragma once

#include "run/initial_weights.h"
#include "run/knn_monitor.h"
#include "run/online_probe.h"
#include "train/loop.h"
#include "train/schedule.h"
#include "train/trainer.h"
#include "train/training_run.h"

#include <cmath>
#include <optional>

namespace moco::train {

// progress/{step,epoch,batch_in_epoch,shuffle_steps,train_seconds,knn_random_init} and rng/torch_cpu:
// shuffle_steps is the method's draw counter (run::Method::draw_counter), knn_random_init the
// random-init baseline's kNN top-1 (NaN until scored).
TrainState::Layout pretraining_layout();

class Pretraining final : public LoopJob {
 public:
  // Copies the encoder as initialised, before the loop's resume loads the trained weights.
  explicit Pretraining(TrainingRun& run);

  TrainState::Layout progress_layout() const override { return pretraining_layout(); }
  std::vector<ckpt::StateEntry> state_entries() override;
  double learning_rate(int64_t epoch, double progress) const override;
  void resumed(const std::string& dir, TrainState& state, StepMeter& epoch) override;
  void after_step(const run::StepOutput& out, const torch::Tensor& labels) override;
  bool reports_after(int64_t step) const override { return step % run_.config.train.log_every == 0; }
  void report(const StepMeter& interval, const LoopStatus& status) override;
  bool after_epoch(const EpochEnd& end, StepMeter& epoch, const LoopStatus& status) override;
  void before_save(TrainState& state, const StepMeter& epoch) override;
  void before_final_save() override { score_baselines(); }  // a finished run's last checkpoint holds its figure
  void finish(const LoopEnd& end, const LoopStatus& status) override;

  const TrainResult& result() const { return result_; }

 private:
  void score_baselines();  // once per process, before its first kNN evaluation
  void score_trained(int64_t step, double epoch);
  void score_probe(int64_t step, double epoch);

  TrainingRun& run_;
  const Schedule schedule_;
  std::optional<run::OnlineProbe> probe_;  // eval.online_probe
  // The encoder as initialised, until the random-init baseline is scored (nullopt after).
  std::optional<run::InitialWeights> initial_;
  run::KnnMonitor knn_;
  double knn_random_init_ = std::nan("");  // progress/knn_random_init
  TrainResult result_;
  bool baselines_scored_ = false;
};

}  // namespace moco::train
