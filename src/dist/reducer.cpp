#include "dist/reducer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <stdexcept>
#include <unordered_set>
#include <utility>

// Note [Gradient hook]
// ~~~~~~~~~~~~~~~~~~~~
// A gradient is copied into its bucket from a hook registered with the public
// Tensor::register_hook on each parameter (a leaf). The autograd engine runs a leaf's
// AccumulateGrad node once per backward, after it has summed every incoming gradient (a parameter
// used twice in the graph still gets one call, with the total), and calls the leaf's hooks right
// before accumulating; so the hook fires exactly once per parameter per backward with the complete
// gradient of that backward. That holds on LibTorch 1.13 (AccumulateGrad::apply -> callHooks) and
// on 2.x (the leaf's tensor pre-hooks of AccumulateGrad), with the same call on both.
//
// c10d instead adds a FunctionPostHook to the AccumulateGrad node
// (torch::autograd::impl::grad_accumulator) and reads param.grad() after accumulation. We do not:
// it is internal API whose hook interface has grown between versions (2.x adds compiled_args), and
// the variable keeps only a weak_ptr to its accumulator, so the reducer would have to own the nodes
// to keep its hooks from silently vanishing. What c10d gains by it, reducing a .grad accumulated
// over several backward passes (no_sync) or making .grad a view of the bucket, is out of scope.
// Consequence: we reduce this backward's gradient, not param.grad(); finalize() replaces
// param.grad() with the average, so whatever AccumulateGrad put there is overwritten.
//
// On 1.13 AccumulateGrad skips its hooks when the incoming gradient is undefined, so such a
// parameter reads as "no gradient" at finalize(). If a hook does get an undefined gradient (2.x),
// the slot is zero-filled: the parameter is in the graph and every rank must still reduce its
// bucket.

// Note [Bucket launch order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every rank must issue the same all-reduces in the same order, but gradients may become ready in
// a different order on different ranks (threads, devices, data-dependent graphs). So a complete
// bucket is launched only once every lower-numbered bucket has been launched; the launch sequence
// is then 0, 1, 2, ... on every rank whatever the hook order. Bucket 0 holds the parameters whose
// gradients backward produces first, so its communication starts while backward is still running.

// Note [Layout agreed once]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A checking backend agrees with every peer on each collective before its data moves, a round trip
// that holds the caller until the slowest rank arrives. For a bucket launched from a gradient hook
// that stall lands in the middle of backward, once per bucket per step, and on two oversubscribed
// cores it was most of the communication a step exposed. The buckets are the same every step, so
// the ranks compare the whole layout (bucket count, each bucket's elements, dtype and device type)
// once, when the reducer is made, and each bucket is then launched with all_reduce_async_preagreed.
// A rank that issued another number of collectives is still caught by the next checked collective
// (the sequence numbers count the buckets), and a rank whose model differs is named here, before
// the first step.

// Note [Driving the all-reduces during backward]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Open MPI's non-blocking collectives (libnbc) advance only inside MPI calls: a bucket launched in
// a gradient hook moves its first round and then waits for the next MPI call, which in a backward
// full of convolutions is finalize(), so nothing overlaps. Testing the launched buckets in each
// hook helped a little (hooks come tens of milliseconds apart while a convolution's gradient is
// computed: exposed communication 0.75 of no-overlap's, resnet18 across a 1 Gbit/s link); a thread
// that tests them every kProgressInterval keeps the bytes flowing between hooks. It runs only
// between a bucket's launch and finalize(), which pauses it before waiting, so that no Work is
// touched by two threads at once; each MPI call takes the process's MPI mutex, as
// MPI_THREAD_SERIALIZED requires. NCCL progresses by itself and gets no thread. The last bucket
// still launches when backward ends and cannot overlap: small buckets (dist.bucket_mb) shrink it.

namespace moco::dist {
namespace {

constexpr std::chrono::microseconds kProgressInterval{2000};

int64_t nbytes_of(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

bool same_kind(const torch::Tensor& a, const torch::Tensor& b) {
  return a.device() == b.device() && a.scalar_type() == b.scalar_type();
}

void check_cap(int64_t cap, const char* what) {
  if (cap <= 0) {
    throw std::invalid_argument(std::string("compute_bucket_layout: ") + what + " must be positive, got " +
                                std::to_string(cap));
  }
}

void append(BucketSpec& bucket, size_t index, const torch::Tensor& param) {
  bucket.param_indices.push_back(index);
  bucket.offsets.push_back(bucket.numel);
  bucket.numel += param.numel();
  bucket.bytes += nbytes_of(param);
}

}  // namespace

std::vector<BucketSpec> compute_bucket_layout(const std::vector<torch::Tensor>& params, int64_t bucket_cap_bytes,
                                              int64_t first_bucket_cap_bytes) {
  check_cap(bucket_cap_bytes, "bucket_cap_bytes");
  check_cap(first_bucket_cap_bytes, "first_bucket_cap_bytes");
  struct Open {
    size_t exemplar;  // a parameter of this (device, dtype)
    BucketSpec bucket;
    bool closed_one = false;  // the small first cap applies until the first bucket closes
  };
  std::vector<Open> open;
  std::vector<BucketSpec> closed;
  for (size_t i = params.size(); i-- > 0;) {
    const torch::Tensor& p = params[i];
    auto it = std::find_if(open.begin(), open.end(), [&](const Open& o) { return same_kind(params[o.exemplar], p); });
    if (it == open.end()) it = open.insert(open.end(), Open{i, {}, false});
    const int64_t cap = it->closed_one ? bucket_cap_bytes : first_bucket_cap_bytes;
    if (!it->bucket.param_indices.empty() && it->bucket.bytes + nbytes_of(p) > cap) {
      closed.push_back(std::move(it->bucket));
      it->bucket = BucketSpec{};
      it->closed_one = true;
    }
    append(it->bucket, i, p);
  }
  for (Open& o : open) {
    if (!o.bucket.param_indices.empty()) closed.push_back(std::move(o.bucket));
  }
  return closed;
}

GradientReducer::GradientReducer(std::vector<torch::Tensor> params, std::shared_ptr<ProcessGroup> group,
                                 int64_t bucket_cap_bytes, int64_t first_bucket_cap_bytes,
                                 std::vector<std::string> names)
    : params_(std::move(params)), names_(std::move(names)), group_(std::move(group)) {
  if (!group_) throw std::invalid_argument("GradientReducer: null process group");
  if (!names_.empty() && names_.size() != params_.size()) {
    throw std::invalid_argument("GradientReducer: " + std::to_string(names_.size()) + " names for " +
                                std::to_string(params_.size()) + " parameters");
  }
  std::unordered_set<const void*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    std::string problem;
    if (!p.defined()) {
      problem = "is undefined";
    } else if (!p.requires_grad() || !p.is_leaf()) {
      problem = "must be a leaf that requires grad";
    } else if (p.layout() != torch::kStrided) {
      problem = "must be dense";
    } else if (!seen.insert(p.unsafeGetTensorImpl()).second) {
      problem = "appears twice in the parameter list";
    }
    if (!problem.empty()) throw std::invalid_argument("GradientReducer: " + describe(i) + " " + problem);
  }
  buckets_ = compute_bucket_layout(params_, bucket_cap_bytes, first_bucket_cap_bytes);
  if (group_->world_size() > 1) agree_on_layout();
  set_enabled(group_->world_size() > 1);
}

GradientReducer::~GradientReducer() {
  // The hooks capture `this`; the parameters usually outlive the reducer.
  for (size_t i = 0; i < hook_handles_.size(); ++i) {
    try {
      params_[i].remove_hook(hook_handles_[i]);
    } catch (...) {  // a destructor must not throw; a leaked no-op hook is harmless once disabled
    }
  }
}

std::string GradientReducer::describe(size_t param_index) const {
  std::ostringstream out;
  out << "parameter " << param_index;
  if (!names_.empty()) {
    out << " ('" << names_[param_index] << "')";
  } else if (params_[param_index].defined()) {
    out << " (shape " << params_[param_index].sizes() << ")";
  }
  return out.str();
}

void GradientReducer::agree_on_layout() const {
  // See Note [Layout agreed once]. FNV-1a over the layout; a CPU tensor, so MPI carries it.
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](int64_t v) {
    hash ^= static_cast<uint64_t>(v);
    hash *= 1099511628211ull;
  };
  for (const BucketSpec& b : buckets_) {
    const torch::Tensor& exemplar = params_[b.param_indices.front()];
    mix(b.numel);
    mix(static_cast<int64_t>(b.param_indices.size()));
    mix(static_cast<int64_t>(exemplar.scalar_type()));
    mix(static_cast<int64_t>(exemplar.device().type()));
  }
  const auto mine = torch::tensor({static_cast<int64_t>(buckets_.size()), static_cast<int64_t>(hash)}, torch::kInt64);
  const auto all = group_->all_gather(mine).view({-1, 2});
  std::vector<int64_t> differ;
  for (int64_t r = 1; r < all.size(0); ++r)
    if (!torch::equal(all[r], all[0])) differ.push_back(r);
  if (differ.empty()) return;
  const int64_t rank0_buckets = all[0][0].item<int64_t>();  // host read: at setup, to name the mismatch
  std::ostringstream out;
  out << "GradientReducer: the gradient buckets of rank(s) ";
  for (size_t k = 0; k < differ.size(); ++k) out << (k ? ", " : "") << differ[k];
  out << " differ from rank 0's (" << rank0_buckets << " buckets there, " << buckets_.size()
      << " here): every rank must build the same model with the same bucket caps";
  throw std::runtime_error(out.str());
}

void GradientReducer::set_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (hooks_fired_ > 0) {
    throw std::logic_error(
        "GradientReducer::set_enabled: a backward has started feeding gradients; call finalize() first");
  }
  if (enabled) ensure_armed();
  enabled_.store(enabled);
}

void GradientReducer::accumulate_locally(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (hooks_fired_ > 0) {
    throw std::logic_error(
        "GradientReducer::accumulate_locally: a backward has started feeding gradients; call finalize() first");
  }
  if (local_only_.load() && !on) add_accumulated_ = true;
  local_only_.store(on);
}

void GradientReducer::set_wait_at_launch(bool wait) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (hooks_fired_ > 0) {
    throw std::logic_error(
        "GradientReducer::set_wait_at_launch: a backward has started feeding gradients; call finalize() first");
  }
  wait_at_launch_ = wait;
}

namespace {

// `segment` (a flat slice of a bucket) as a tensor of `param`'s shape and memory order: a
// channels-last weight gets a channels-last view, so that copying its gradient in and the average
// back out are straight copies, not permutations. The bytes of the bucket then hold that
// parameter in NHWC order; every rank lays it out alike, and the all-reduce is element-wise.
torch::Tensor shaped_like(const torch::Tensor& segment, const torch::Tensor& param) {
  if (param.dim() == 4 && !param.is_contiguous() && param.is_contiguous(torch::MemoryFormat::ChannelsLast)) {
    const auto s = param.sizes();
    return segment.view({s[0], s[2], s[3], s[1]}).permute({0, 3, 1, 2});
  }
  return segment.view(param.sizes());
}

}  // namespace

void GradientReducer::ensure_armed() {
  if (armed_) return;
  torch::NoGradGuard no_grad;
  flat_.clear();
  slots_.assign(params_.size(), Slot{});
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketSpec& spec = buckets_[b];
    const torch::Tensor& exemplar = params_[spec.param_indices.front()];
    flat_.push_back(torch::zeros({spec.numel}, exemplar.options().requires_grad(false)));
    for (size_t k = 0; k < spec.param_indices.size(); ++k) {
      const size_t i = spec.param_indices[k];
      slots_[i].bucket = b;
      slots_[i].view = shaped_like(flat_[b].narrow(0, spec.offsets[k], params_[i].numel()), params_[i]);
    }
  }
  // See Note [Gradient hook].
  for (size_t i = 0; i < params_.size(); ++i) {
    hook_handles_.push_back(params_[i].register_hook([this, i](const torch::Tensor& grad) { on_gradient(i, grad); }));
  }
  // Started with the hooks, so that a disabled reducer (a world of one) has no thread.
  if (group_->progresses_only_inside_calls()) progress_ = std::make_unique<ProgressThread>(kProgressInterval);
  armed_ = true;
  reset_step();
}

void GradientReducer::on_gradient(size_t param_index, const torch::Tensor& grad) {
  if (!enabled_.load() || local_only_.load()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Slot& slot = slots_[param_index];
  if (slot.ready) {
    throw std::runtime_error("GradientReducer: " + describe(param_index) +
                             " marked ready twice in one step: call finalize() after every backward");
  }
  torch::NoGradGuard no_grad;
  // The hook runs before autograd adds `grad` to param.grad: that holds the earlier backward passes' sum.
  const torch::Tensor& earlier = params_[param_index].grad();
  if (add_accumulated_ && earlier.defined()) {
    torch::add_out(slot.view, earlier, grad.defined() ? grad : torch::zeros_like(earlier));
    slot.view.div_(static_cast<double>(group_->world_size()));
  } else if (grad.defined()) {
    // Pre-scale so that the sum over ranks is the average (and stays in range for half types).
    torch::div_out(slot.view, grad, torch::scalar_tensor(static_cast<double>(group_->world_size()), torch::kDouble));
  } else {
    slot.view.zero_();
  }
  slot.ready = true;
  ++hooks_fired_;
  if (--pending_[slot.bucket] == 0) launch_ready_buckets_in_order();
}

void GradientReducer::launch_ready_buckets_in_order() {
  // See Note [Bucket launch order].
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void GradientReducer::launch(size_t bucket) {
  stats_.launch_order.push_back(static_cast<int64_t>(bucket));
  stats_.hooks_fired_at_launch[bucket] = hooks_fired_;
  stats_.bytes_reduced += buckets_[bucket].bytes;
  // The layout was agreed once (see Note [Layout agreed once]); a world of one forced on agrees trivially.
  work_[bucket] = group_->all_reduce_async_preagreed(flat_[bucket], ReduceOp::kSum);
  if (wait_at_launch_) {
    wait_in_hook(bucket);
  } else if (progress_) {
    progress_->add(work_[bucket]);  // see Note [Driving the all-reduces during backward]
  }
}

void GradientReducer::wait_in_hook(size_t bucket) {
  // Backward is held here until the bucket is reduced: the no-overlap baseline. finalize() waits
  // again, which returns at once for a finished collective.
  const auto start = std::chrono::steady_clock::now();
  work_[bucket]->wait();
  stats_.launch_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.buckets_waited_at_launch;
}

void GradientReducer::throw_if_any_missing() const {
  constexpr size_t kNamedAtMost = 8;
  std::vector<size_t> missing;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].ready) missing.push_back(i);
  }
  if (missing.empty()) return;
  std::ostringstream out;
  out << "GradientReducer::finalize: " << missing.size() << " of " << params_.size()
      << " parameters got no gradient in this backward: ";
  for (size_t k = 0; k < std::min(missing.size(), kNamedAtMost); ++k) out << (k ? ", " : "") << describe(missing[k]);
  if (missing.size() > kNamedAtMost) out << ", ...";
  out << " (every parameter must contribute to the loss; unused parameters are not supported)";
  throw std::runtime_error(out.str());
}

void GradientReducer::finalize() {
  if (!enabled_.load()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    if (progress_) progress_->pause();  // wait() below is this thread's alone
    throw_if_any_missing();
    launch_ready_buckets_in_order();  // a no-op once every parameter is ready; kept for robustness
    const auto start = std::chrono::steady_clock::now();
    for (const auto& work : work_) work->wait();
    stats_.finalize_wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& grad = params_[i].mutable_grad();
      if (grad.defined()) {
        grad.copy_(slots_[i].view);
      } else {
        grad = slots_[i].view.clone();
      }
    }
  } catch (...) {
    reset_step();
    throw;
  }
  last_stats_ = std::move(stats_);
  reset_step();
}

void GradientReducer::reset_step() {
  for (Slot& slot : slots_) slot.ready = false;
  add_accumulated_ = false;
  pending_.clear();
  for (const BucketSpec& spec : buckets_) pending_.push_back(static_cast<int64_t>(spec.param_indices.size()));
  work_.assign(buckets_.size(), nullptr);
  next_launch_ = 0;
  hooks_fired_ = 0;
  stats_ = ReducerStats{};
  stats_.num_params = static_cast<int64_t>(params_.size());
  stats_.hooks_fired_at_launch.assign(buckets_.size(), -1);
}

void broadcast_parameters(const std::vector<torch::Tensor>& tensors, ProcessGroup& group, int root) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined())
      throw std::invalid_argument("broadcast_parameters: tensor " + std::to_string(i) + " is undefined");
  }
  // No shortcut at world size 1: a caller that rehearses a bigger world there (dist.world_group_at_one)
  // wants the collective; the others do not call at world size 1.
  // Indices grouped by (device, dtype), in first-seen order so every rank forms the same groups.
  std::vector<std::vector<size_t>> kinds;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto it = std::find_if(kinds.begin(), kinds.end(),
                           [&](const auto& k) { return same_kind(tensors[k.front()], tensors[i]); });
    if (it == kinds.end()) it = kinds.insert(kinds.end(), std::vector<size_t>{});
    it->push_back(i);
  }
  torch::NoGradGuard no_grad;  // parameters are leaves that require grad: in-place writes need this
  for (const auto& kind : kinds) {
    torch::Tensor only = tensors[kind.front()];  // shares storage: a broadcast into it writes the caller's tensor
    if (kind.size() == 1 && only.is_contiguous()) {
      group.broadcast(only, root);  // e.g. a model's flat buffer of BatchNorm buffers
      continue;
    }
    std::vector<torch::Tensor> pieces;
    for (size_t i : kind) pieces.push_back(tensors[i].reshape({-1}));
    torch::Tensor flat = torch::cat(pieces);
    group.broadcast(flat, root);
    if (group.rank() == root) continue;
    int64_t offset = 0;
    for (size_t i : kind) {
      torch::Tensor t = tensors[i];  // shares storage: copy_ writes the caller's tensor
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace moco::dist
