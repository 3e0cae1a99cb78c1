#include "moco_v2/batch_shuffle.h"

#include <torch/torch.h>

#include <random>
#include <stdexcept>
#include <string>

namespace moco::moco_v2 {
namespace {

// The rows to take, on `device`. A CUDA copy from pageable memory waits for the stream (a host sync
// every step), so the index goes from pinned memory, without blocking; the pinned block is reused
// only once the copy is done (LibTorch's host allocator records the copy's event).
torch::Tensor as_index(const std::vector<int64_t>& v, torch::Device device) {
  auto index = torch::tensor(v, torch::kLong);
  if (!device.is_cuda()) return index;
  return index.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace

BatchShuffle::BatchShuffle(const std::vector<int64_t>& perm, int rank, int world_size) : rank_(rank) {
  const auto total = static_cast<int64_t>(perm.size());
  if (world_size < 1 || total % world_size != 0)
    throw std::invalid_argument("BatchShuffle: a global batch of " + std::to_string(total) + " does not split over " +
                                std::to_string(world_size) + " ranks");
  rows_ = total / world_size;
  send_counts_.assign(world_size, 0);
  recv_counts_.assign(world_size, 0);
  // Destination r's slice is read in position order, so sender and receiver agree on the row order
  // within each (source, destination) pair without exchanging any metadata.
  for (int dest = 0; dest < world_size; ++dest) {
    for (int64_t p = dest * rows_; p < (dest + 1) * rows_; ++p) {
      if (perm[p] / rows_ == rank) {
        send_rows_.push_back(perm[p] - rank * rows_);
        ++send_counts_[dest];
      }
    }
  }
  for (int source = 0; source < world_size; ++source) {
    for (int64_t p = rank * rows_; p < (rank + 1) * rows_; ++p) {
      if (perm[p] / rows_ == source) {
        recv_slots_.push_back(p - rank * rows_);
        ++recv_counts_[source];
      }
    }
  }
  shuffled_globals_.assign(perm.begin() + rank * rows_, perm.begin() + (rank + 1) * rows_);
}

torch::Tensor BatchShuffle::shuffle(const torch::Tensor& local, dist::ProcessGroup& group) const {
  if (local.size(0) != rows_)
    throw std::invalid_argument("BatchShuffle: expected " + std::to_string(rows_) + " rows, got " +
                                std::to_string(local.size(0)));
  // Channels-last images travel as the NHWC tensor they are in memory: rows are gathered, exchanged
  // and placed as they lie, and the key encoder gets channels-last images back, with no permuting
  // copy on the way (index_select and all_to_all would otherwise return NCHW-contiguous rows).
  const bool nhwc =
      local.dim() == 4 && !local.is_contiguous() && local.is_contiguous(torch::MemoryFormat::ChannelsLast);
  const auto rows = nhwc ? local.permute({0, 2, 3, 1}) : local;
  const auto received = group.all_to_all(rows.index_select(0, as_index(send_rows_, local.device())).contiguous(),
                                         send_counts_, recv_counts_);
  auto shuffled = torch::empty_like(received);
  shuffled.index_copy_(0, as_index(recv_slots_, local.device()), received);
  return nhwc ? shuffled.permute({0, 3, 1, 2}) : shuffled;
}

torch::Tensor BatchShuffle::unshuffle(const torch::Tensor& shuffled, dist::ProcessGroup& group) const {
  // The exact reverse: what arrived from each rank goes back to it, in the order it came.
  const auto back = group.all_to_all(shuffled.index_select(0, as_index(recv_slots_, shuffled.device())).contiguous(),
                                     recv_counts_, send_counts_);
  auto local = torch::empty_like(back);
  local.index_copy_(0, as_index(send_rows_, shuffled.device()), back);
  return local;
}

int64_t BatchShuffle::rows_sent_to_others() const {
  int64_t n = 0;
  for (size_t r = 0; r < send_counts_.size(); ++r)
    if (static_cast<int>(r) != rank_) n += send_counts_[r];
  return n;
}

std::vector<int64_t> shared_permutation(int64_t n, uint64_t seed, int64_t step) {
  // Fisher-Yates with the generator's raw output: the same permutation on every platform (the
  // standard distributions are implementation-defined).
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(step) + 0x5bd1e995ULL);
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto bound = static_cast<uint64_t>(i + 1);
    uint64_t x;
    do x = rng();
    while (x >= UINT64_MAX - UINT64_MAX % bound);  // reject the biased tail
    std::swap(perm[i], perm[x % bound]);
  }
  return perm;
}

}  // namespace moco::moco_v2
