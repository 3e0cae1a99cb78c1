// defines: AsyncSaver, checkpoints written by a background thread while training goes on: at the
// step boundary the state is copied to host memory (the only time the loop is blocked), then each
// rank writes its shard and rank 0 commits, exactly as save_checkpoint does; at most one save is in
// flight.
#pragma once

#include "ckpt/checkpoint.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace moco::ckpt {

class AsyncSaver {
 public:
  // on_commit runs on rank 0's writer thread after each commit (retention, say); `timeout` bounds
  // rank 0's wait for the other ranks' shards.
  AsyncSaver(dist::ProcessGroup& group, std::function<void(int64_t step)> on_commit = {},
             std::chrono::seconds timeout = std::chrono::seconds(1800));
  ~AsyncSaver();  // waits for the save in flight; errors are logged, not thrown
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Collective, at a step boundary: finishes the save in flight (its failure throws here, on every
  // rank), refuses a non-finite `state` as save_checkpoint does (throwing on every rank, nothing
  // written), snapshots `state` and starts writing it. Returns the folder it will commit. A save still
  // being written when the next is due (a file system slower than the cadence) is waited for, and
  // the log says so: never two saves, nor two snapshots, at once.
  std::string save(const std::string& root, const std::vector<StateEntry>& state, const SaveInfo& info);
  // Collective: waits for the save in flight, if any; a failure throws the same CheckpointError on
  // every rank, once rank 0 has removed the failed save's .tmp folder.
  void wait();
  bool in_flight() const { return thread_.joinable(); }
  bool writing() const { return writing_.load(); }  // in flight and not yet done

 private:
  void wait_logged(int64_t step);  // wait(), logged when a save is in flight as `step` is due
  void write_in_background(std::string root, std::string tmp_dir, std::vector<StateEntry> snapshot,
                           std::vector<int> writers, SaveInfo info, int64_t token);

  dist::ProcessGroup& group_;
  std::function<void(int64_t)> on_commit_;
  std::chrono::seconds timeout_;
  std::thread thread_;
  std::string error_;  // written by the thread, read after join
  std::atomic<bool> writing_{false};
  std::string tmp_dir_;  // of the save in flight
  int64_t step_ = -1;    // of the save in flight
};

}  // namespace moco::ckpt
