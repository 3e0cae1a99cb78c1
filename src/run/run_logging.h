// defines: LogUndo (a refusal takes back the log it started), make_output_dir (train.output_dir, created or a clear
// error naming it), setup_logging (rank-prefixed spdlog sinks: the console for rank 0 or all ranks, a file per rank)
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace moco::run {

// Creates the folder (and its parents); throws std::runtime_error naming train.output_dir and the
// path when it cannot be created or is not a folder.
void make_output_dir(const std::string& output_dir);

// Every rank logs to output_dir/rank<N>.log (appended; none with to_files off, for dry runs); the
// console gets rank 0's lines, or every rank's when
// all_ranks_to_console. With several ranks each line carries "[rank N]".
void setup_logging(const std::string& output_dir, int rank, int world_size, bool all_ranks_to_console,
                   bool to_files = true);

// A write to rank<N>.log that failed (a full disk): spdlog's error handler, set by setup_logging,
// keeps the first failure (from any thread) and says so once on stderr; training goes on only until
// the next check_log_writes, which throws std::runtime_error naming the file and the system's reason.
// Called by the training loop after every step and before the final checkpoint, as a failed
// metrics.jsonl write stops it. It also throws, naming the folder, once train.output_dir (or this
// rank's log file) is no longer the one setup_logging opened: deleted, moved or replaced mid-run,
// where every write would still succeed into files no one can read.
void check_log_writes();

// One more check of the output folder for check_log_writes to run after its own (rank 0's lock on the
// folder: run_output.h), or none (an empty function); it may throw as they do. Taken back by LogUndo.
void set_output_check(std::function<void()> check);

// What setup_logging is about to add to the file system, noted first, so that a refusal (exit 2)
// found after it leaves the file system as it found it: undo() stops logging to the file, puts
// rank<N>.log back as it was (removed, or cut back to its old length) and, on rank 0, removes
// train.output_dir if it was not there before and holds nothing else.
class LogUndo {
 public:
  LogUndo(const std::string& output_dir, int rank);
  void undo() const;

 private:
  std::string dir_, file_;
  int rank_;
  bool dir_existed_, file_existed_;
  std::uintmax_t file_size_ = 0;
};

}  // namespace moco::run
