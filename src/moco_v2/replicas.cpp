#include "moco_v2/replicas.h"

#include "moco_v2/v2_settings.h"

#include "dist/reducer.h"
#include "run/host_reads.h"

#include <ATen/record_function.h>
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace moco::moco_v2 {
namespace {

std::vector<torch::Tensor> joined_tensors(std::vector<torch::Tensor> a, const std::vector<torch::Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

uint64_t fnv1a_hash(const torch::Tensor& tensor, uint64_t hash = 1469598103934665603ULL) {
  const auto t = run::read_on_host(tensor).contiguous();  // on check steps only (dist.queue_check_every)
  const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ULL;  // any flipped bit changes it
  return hash;
}

// The tensors' bytes, one after the other, in one new tensor on their device: a copy taken inside
// the step, read on the host after it.
torch::Tensor bytes_of(const std::vector<torch::Tensor>& flats) {
  std::vector<torch::Tensor> bytes;
  for (const auto& f : flats) bytes.push_back(f.contiguous().view(torch::kUInt8));
  return torch::cat(bytes);
}

// Stops the run, naming the ranks whose queue or pointer differ from rank 0's, or whose BN buffers
// differed from rank 0's at the step's start (bn_hash, of a copy taken right after the step's broadcast; 0
// when the buffers are rank-local). The queue is never broadcast: it stays identical only because
// every rank enqueues the same all-gathered keys.
void check_replicas(moco_v2::MocoImpl& moco, uint64_t bn_hash, dist::ProcessGroup& group, int64_t step) {
  const auto mine =
      torch::tensor({static_cast<int64_t>(fnv1a_hash(moco.queue())),
                     run::read_on_host(moco.queue_state()[1]).item<int64_t>(), static_cast<int64_t>(bn_hash)},
                    torch::kLong)
          .view({1, 3});
  const auto all = group.all_gather(mine);
  std::string queue_differs, bn_differs;
  for (int64_t r = 1; r < all.size(0); ++r) {
    if (!torch::equal(all[r].narrow(0, 0, 2), all[0].narrow(0, 0, 2)))
      queue_differs += (queue_differs.empty() ? "" : ", ") + std::to_string(r);
    if (!torch::equal(all[r][2], all[0][2])) bn_differs += (bn_differs.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!queue_differs.empty())
    throw std::runtime_error(
        fmt::format("step {}: the queue or its pointer on rank(s) {} differs from rank 0's", step, queue_differs));
  if (!bn_differs.empty())
    throw std::runtime_error(
        fmt::format("step {}: the BatchNorm buffers on rank(s) {} differed from rank 0's at the step's start, "
                    "after their broadcast (dist.broadcast_buffers)",
                    step, bn_differs));
}

}  // namespace

ReplicaSync::ReplicaSync(const run::Config& config, moco_v2::MocoImpl& moco, dist::ProcessGroup& group)
    : moco_(moco),
      group_(group),
      world_(group.world_size()),
      communicates_(world_ > 1 || config.dist.world_group_at_one),
      broadcast_buffers_(settings(config).broadcast_buffers),
      check_every_(settings(config).queue_check_every) {}

void ReplicaSync::broadcast_start() {
  if (!communicates_) return;
  dist::broadcast_parameters(
      joined_tensors(joined_tensors(moco_.encoder_q->parameters(), moco_.encoder_q->buffers()), moco_.queue_state()),
      group_);
  moco_.copy_query_to_key();
}

bool ReplicaSync::check_step(int64_t step) const {
  return communicates_ && check_every_ > 0 && step % check_every_ == 0;
}

void ReplicaSync::before_step(int64_t step) {
  if (communicates_ && broadcast_buffers_) {
    RECORD_USER_SCOPE("update/bn_broadcast");                  // Note [Update scopes] (sys/op_count.h)
    dist::broadcast_parameters(moco_.buffer_flats(), group_);  // one collective per dtype, in place
  }
  bn_at_start_ = check_step(step) && broadcast_buffers_ ? bytes_of(moco_.buffer_flats()) : torch::Tensor();
}

void ReplicaSync::check_after_step(int64_t step) {
  if (!check_step(step)) return;
  const uint64_t bn_hash = bn_at_start_.defined() ? fnv1a_hash(bn_at_start_) : 0;
  bn_at_start_ = torch::Tensor();
  check_replicas(moco_, bn_hash, group_, step);
}

void ReplicaSync::broadcast_bn_for_save() {
  if (communicates_ && broadcast_buffers_) dist::broadcast_parameters(moco_.buffer_flats(), group_);
}

void ReplicaSync::broadcast_bn_for_eval() {
  if (communicates_) dist::broadcast_parameters(moco_.buffer_flats(), group_);
}

}  // namespace moco::moco_v2
