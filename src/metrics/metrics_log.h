// defines: MetricsLog, the machine-readable record of a run (one JSON object per line)
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moco::metrics {

class TensorBoardWriter;

struct StepRecord {
  int64_t step = 0;
  double epoch = 0;  // fractional: epochs completed
  double loss = 0;
  double lr = 0;
  double img_per_s = 0;
  double elapsed_s = 0;
  int64_t shuffle_bytes_per_step = 0;  // images and keys this rank sent to other ranks for shuffle-BN
  int64_t grad_bytes_per_step = 0;     // gradient bytes all-reduced by this rank
  int64_t bad_steps = 0;               // steps skipped so far for NaN/Inf queries
  // The method's own numbers, by name (MoCo: acc1, acc5, the positive key ranked first / in the top 5, %).
  std::vector<std::pair<std::string, double>> scalars;
  double data_wait_s = 0;      // per step, waiting for the loader
  double data_wait_share = 0;  // of the wall time of the steps
};

struct KnnRecord {
  std::string encoder;  // "raw_pixels", "random_init" or "trained" (also after intermediate epochs)
  double top1 = 0;
  int64_t step = 0;
  double epoch = 0;
  int64_t memory_size = 0, query_size = 0;
  double seconds = 0;
};

// The online probe (eval.online_probe) scored on the test split.
struct ProbeRecord {
  double top1 = 0;
  int64_t step = 0;
  double epoch = 0;
  int64_t query_size = 0;
  double seconds = 0;
};

// A checkpoint written ("checkpoint") or resumed from ("resume"). After a "resume" row the run goes
// on from `step`: rows of a killed attempt beyond that step, if any, are superseded by the ones after it.
struct CheckpointRecord {
  std::string event;  // "checkpoint" | "resume"
  int64_t step = 0;
  std::string path;
  double seconds = 0;  // to write or to load
  int64_t bytes = 0;
};

// The run stopped on a signal after `step`, with a checkpoint (launch/slurm/moco.sbatch requeues the
// job when the signal was SIGUSR1).
struct PreemptRecord {
  int64_t step = 0;
  std::string signal;  // "SIGUSR1" | "SIGTERM" | "other rank"
  std::string checkpoint;
};

// One epoch of the linear protocol (moco_lincls): the classifier's accuracy on the val split.
struct LinclsRecord {
  int64_t epoch = 0;  // epochs done
  int64_t step = 0;
  double top1 = 0, top5 = 0;  // on the val (test) split, %
  double loss = 0;            // mean training loss of the epoch
  double lr = 0;
  double best_top1 = 0;
  int64_t best_epoch = 0;
  double train_seconds = 0;  // so far, evaluation excluded
};

// The end of a linear-protocol run: best and last accuracy, and the sanity check.
struct LinclsResultRecord {
  std::string encoder;     // "trained" | "random_init" | "raw_pixels"
  std::string pretrained;  // what model.pretrained loaded
  double best_top1 = 0, best_top5 = 0;
  int64_t best_epoch = 0;
  double last_top1 = 0, last_top5 = 0;
  int64_t epochs = 0, steps = 0;
  double train_seconds = 0;
  int64_t sanity_tensors = 0;  // backbone tensors found bitwise unchanged
};

// Each record is flushed as it is written, so a killed run keeps every line it logged.
class MetricsLog {
 public:
  // Truncates, or appends (a resumed run keeps every line logged before); throws naming the path.
  // With a tensorboard_dir, the numbers also go to a TensorBoard event file there.
  MetricsLog(const std::string& path, bool append, const std::string& tensorboard_dir = "");
  ~MetricsLog();
  void write(const StepRecord& record);
  void write(const KnnRecord& record);
  void write(const ProbeRecord& record);
  void write(const CheckpointRecord& record);
  void write(const PreemptRecord& record);
  void write(const LinclsRecord& record);
  void write(const LinclsResultRecord& record);

 private:
  void write_line(const std::string& line);
  std::string path_;
  std::ofstream out_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace moco::metrics
