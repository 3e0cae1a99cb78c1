// defines: CollectiveDescriptor (what one rank is about to do, as fixed-size words every rank can
// all-gather) and the pure checks that turn every rank's descriptors into "who disagrees, and how".
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace moco::dist {

enum class CollectiveOp : int64_t { kAllReduce = 1, kAllGather, kBroadcast, kAllToAll, kBarrier };

const char* collective_name(CollectiveOp op);
// float32, int64, ... (the names users write), not c10's Float, Long.
std::string dtype_name(torch::ScalarType dtype);

// Plain int64 words so that one MPI_INT64_T all-gather moves it between ranks of any architecture.
// Shapes deeper than kMaxDims keep their first kMaxDims dims; `numel` still tells the rest apart.
struct CollectiveDescriptor {
  static constexpr int kMaxDims = 8;
  static constexpr int64_t kMagic = 0x4d6f436f43686b31;  // "MoCoChk1": spots a rank not checking
  int64_t magic = kMagic;
  int64_t seq = 0;
  int64_t op = 0;
  int64_t dtype = -1;  // torch::ScalarType, -1 for barrier
  int64_t ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  int64_t numel = 0;              // all_to_all: elements per row, since the row counts may differ by rank
  int64_t arg = 0;                // all_reduce: the ReduceOp; broadcast: the root
  int64_t invalid_arguments = 0;  // 1: this rank rejected its own arguments (it throws the details)
};
constexpr int kDescriptorWords = 16;
static_assert(sizeof(CollectiveDescriptor) == kDescriptorWords * sizeof(int64_t), "descriptor is exchanged as words");

CollectiveDescriptor describe_collective(CollectiveOp op, int64_t seq, const torch::Tensor* tensor, int64_t arg);

// nullopt when every rank's descriptor agrees; otherwise the sentence every rank throws, e.g.
// "all_gather #17: rank 0 has float32 [4, 128], rank 1 has float32 [5, 128]". all[r] is rank r's.
std::optional<std::string> find_disagreement(const std::vector<CollectiveDescriptor>& all);

// Ranks whose descriptor has invalid_arguments set.
std::vector<int> ranks_with_invalid_arguments(const std::vector<CollectiveDescriptor>& all);

// counts[r] holds rank r's send counts then its receive counts (2 * world values). nullopt when
// every rank expects from each peer exactly what that peer sends; otherwise names the pairs.
std::optional<std::string> find_count_mismatch(const std::vector<std::vector<int64_t>>& counts);

// The collectives every rank has agreed on once, by descriptor without its sequence number: for a
// backend whose check is a host rendezvous that stalls the GPU's launch queue (NCCL), so that each
// distinct collective is checked the first time only, not every step. A later call like one agreed
// before is not compared again: ranks that diverge only between such calls are not caught by the
// check (the NCCL watchdog ends the hang that follows, after dist.timeout_s).
class AgreedCollectives {
 public:
  bool contains(const CollectiveDescriptor& descriptor) const { return agreed_.count(key(descriptor)) > 0; }
  void insert(const CollectiveDescriptor& descriptor) { agreed_.insert(key(descriptor)); }

 private:
  static std::vector<int64_t> key(const CollectiveDescriptor& descriptor);
  std::set<std::vector<int64_t>> agreed_;
};

// "rank 3", "ranks 0-2,5": short even for large worlds.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace moco::dist
