// defines: GradientReducer (DDP-style bucketed gradient averaging that overlaps backward),
// ReducerStats (what one step's reduction did), compute_bucket_layout, broadcast_parameters
#pragma once

#include <torch/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "dist/progress_thread.h"

namespace moco::dist {

// One flat buffer's worth of parameters. Every parameter of a bucket has the same device and dtype.
struct BucketSpec {
  std::vector<size_t> param_indices;  // into the reducer's parameter list, in slot order
  std::vector<int64_t> offsets;       // element offset of each parameter's slot in the flat buffer
  int64_t numel = 0;
  int64_t bytes = 0;
};

// Groups parameters into buckets as c10d does: walk them in reverse order (the order in which
// backward roughly produces their gradients), one open bucket per (device, dtype); close a bucket
// before a parameter would push it past its cap. The first bucket of each (device, dtype) uses
// first_bucket_cap_bytes. A bucket exceeds its cap only when it holds a single parameter larger than
// the cap. Buckets are numbered in the order they close; that is the order they are reduced in.
std::vector<BucketSpec> compute_bucket_layout(const std::vector<torch::Tensor>& params, int64_t bucket_cap_bytes,
                                              int64_t first_bucket_cap_bytes);

// What one step (one backward + finalize) of the reducer did. Indexed by bucket where it says so.
struct ReducerStats {
  std::vector<int64_t> launch_order;           // bucket indices in the order their all-reduce started
  std::vector<int64_t> hooks_fired_at_launch;  // per bucket: gradient hooks fired when it started
  int64_t num_params = 0;
  int64_t bytes_reduced = 0;
  double finalize_wait_seconds = 0.0;    // time finalize() spent waiting for the all-reduces
  int64_t buckets_waited_at_launch = 0;  // buckets whose all-reduce the launching hook waited for
  double launch_wait_seconds = 0.0;      // time the hooks spent in those waits (inside backward)
};

// Averages the gradients of `params` over the ranks of `group` while backward runs.
//
// Per step: run backward (hooks copy each gradient, pre-scaled by 1/world_size, into its bucket and
// start each bucket's all-reduce as soon as it and all lower-numbered buckets are complete), then
// call finalize() before the optimizer step: it waits and writes the averages into param.grad().
// Every parameter must get a gradient in every backward (no find_unused_parameters), and backward
// may run once per finalize() (no gradient accumulation over several backward passes).
//
// Disabled when world_size == 1: no buffers, no hooks, finalize() returns at once. set_enabled(true)
// forces the full path anyway (tests, overhead benchmarks, a world of one that rehearses world N:
// dist.world_group_at_one).
//
// After an exception from a hook or finalize() the step is abandoned: collectives already started
// are not waited for, so a multi-rank job must treat it as fatal.
class GradientReducer {
 public:
  static constexpr int64_t kDefaultBucketCapBytes = 25 * 1024 * 1024;
  static constexpr int64_t kDefaultFirstBucketCapBytes = 1024 * 1024;

  // params: leaves that require grad, dense, no duplicates. names: empty or one per parameter; used
  // in error messages only.
  GradientReducer(std::vector<torch::Tensor> params, std::shared_ptr<ProcessGroup> group,
                  int64_t bucket_cap_bytes = kDefaultBucketCapBytes,
                  int64_t first_bucket_cap_bytes = kDefaultFirstBucketCapBytes, std::vector<std::string> names = {});
  ~GradientReducer();

  // Hooks hold `this`.
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Between steps only (throws while a backward has started feeding gradients).
  void set_enabled(bool enabled);
  bool enabled() const { return enabled_.load(); }

  // For benchmarks only (bench_dist's no-overlap step): when on, the hook that launches a bucket
  // waits for its all-reduce before backward goes on, so no communication overlaps backward. The
  // collectives, their order and the averages are those of the overlapped mode, bit for bit; what
  // changes is only when backward is held (on CUDA a wait orders streams: it holds the backward's
  // stream, not the host). Between steps only (throws like set_enabled).
  void set_wait_at_launch(bool wait);
  bool wait_at_launch() const { return wait_at_launch_; }

  // DDP's no_sync(), for a step of several backward passes (optim.micro_batch): while on, a backward
  // only accumulates into param.grad (the hooks do nothing); the first backward after it is turned
  // off averages each parameter's accumulated gradient with its own, so that one finalize() averages
  // the step's sum once. Between steps, or between backward passes while on (throws like set_enabled).
  void accumulate_locally(bool on);

  // After backward, before the optimizer step. Throws naming any parameter that got no gradient.
  void finalize();

  const std::vector<BucketSpec>& buckets() const { return buckets_; }
  // Flat per-bucket buffers (empty until first enabled). For tests and diagnostics.
  const std::vector<torch::Tensor>& bucket_buffers() const { return flat_; }
  // Parameter `param_index`'s slice of its bucket, in the parameter's shape and memory order (empty
  // until first enabled). For tests and diagnostics.
  torch::Tensor gradient_view(size_t param_index) const {
    return param_index < slots_.size() ? slots_[param_index].view : torch::Tensor();
  }
  // The record of the last step that finalize() completed.
  const ReducerStats& last_stats() const { return last_stats_; }

 private:
  struct Slot {
    size_t bucket = 0;
    torch::Tensor view;  // this parameter's slice of its bucket's flat buffer, shaped and laid out like it
    bool ready = false;
  };

  void ensure_armed();
  void agree_on_layout() const;
  void on_gradient(size_t param_index, const torch::Tensor& grad);
  void launch_ready_buckets_in_order();
  void launch(size_t bucket);
  void wait_in_hook(size_t bucket);
  void throw_if_any_missing() const;
  void reset_step();
  std::string describe(size_t param_index) const;

  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<BucketSpec> buckets_;
  std::atomic<bool> enabled_{false};
  std::atomic<bool> local_only_{false};  // accumulate_locally(true)
  bool add_accumulated_ = false;         // the backward after accumulate_locally(false); guarded by mutex_
  bool wait_at_launch_ = false;          // guarded by mutex_
  bool armed_ = false;                   // buffers allocated and hooks registered
  std::vector<unsigned> hook_handles_;

  // Step state. Hooks of parameters on different devices run on different autograd threads.
  mutable std::mutex mutex_;
  std::vector<torch::Tensor> flat_;
  std::vector<Slot> slots_;
  std::vector<int64_t> pending_;  // per bucket: parameters still without gradient this step
  std::vector<std::shared_ptr<Work>> work_;
  size_t next_launch_ = 0;
  int64_t hooks_fired_ = 0;
  ReducerStats stats_;
  ReducerStats last_stats_;
  // See Note [Driving the all-reduces during backward]. Null where the backend needs no driving.
  // Last: destroyed (joined) first.
  std::unique_ptr<ProgressThread> progress_;
};

// Makes every rank's `tensors` equal to root's (model parameters and buffers at start). Tensors of
// one (device, dtype) travel as one flat buffer, so a model costs a collective or two; the only
// contiguous tensor of its kind travels in place, with no copy.
// Collective at any world size, one included: callers that need nothing there do not call it.
void broadcast_parameters(const std::vector<torch::Tensor>& tensors, ProcessGroup& group, int root = 0);

}  // namespace moco::dist
