#include "dist/collective_check.h"

#include <map>

#include "dist/process_group.h"

namespace moco::dist {
namespace {

std::string shape_text(const CollectiveDescriptor& d) {
  std::string text = "[";
  const int64_t shown = std::min<int64_t>(d.ndim, CollectiveDescriptor::kMaxDims);
  for (int64_t i = 0; i < shown; ++i) {
    if (i) text += ", ";
    // all_to_all rows may differ by rank by design: only the other dims must agree.
    text += (i == 0 && d.op == static_cast<int64_t>(CollectiveOp::kAllToAll)) ? "*" : std::to_string(d.shape[i]);
  }
  if (d.ndim > shown) text += ", ... (" + std::to_string(d.numel) + " elements)";
  return text + "]";
}

std::string arg_text(const CollectiveDescriptor& d) {
  switch (static_cast<CollectiveOp>(d.op)) {
    case CollectiveOp::kAllReduce:
      return d.arg == static_cast<int64_t>(ReduceOp::kAvg) ? " (avg)" : " (sum)";
    case CollectiveOp::kBroadcast:
      return " (root " + std::to_string(d.arg) + ")";
    default:
      return "";
  }
}

std::string operands_text(const CollectiveDescriptor& d) {
  if (d.op == static_cast<int64_t>(CollectiveOp::kBarrier)) return "no tensor";
  return dtype_name(static_cast<torch::ScalarType>(d.dtype)) + " " + shape_text(d) + arg_text(d);
}

std::string collective_text(const CollectiveDescriptor& d) {
  return std::string(collective_name(static_cast<CollectiveOp>(d.op))) + " #" + std::to_string(d.seq);
}

// Everything that must agree, as text: descriptors that print alike are alike.
std::string key(const CollectiveDescriptor& d) {
  if (d.magic != CollectiveDescriptor::kMagic) return "?";
  return collective_text(d) + " with " + operands_text(d);
}

}  // namespace

const char* collective_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce:
      return "all_reduce";
    case CollectiveOp::kAllGather:
      return "all_gather";
    case CollectiveOp::kBroadcast:
      return "broadcast";
    case CollectiveOp::kAllToAll:
      return "all_to_all";
    case CollectiveOp::kBarrier:
      return "barrier";
  }
  return "unknown collective";
}

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return "float32";
    case torch::kFloat64:
      return "float64";
    case torch::kFloat16:
      return "float16";
    case torch::kBFloat16:
      return "bfloat16";
    case torch::kInt64:
      return "int64";
    case torch::kInt32:
      return "int32";
    case torch::kInt16:
      return "int16";
    case torch::kInt8:
      return "int8";
    case torch::kUInt8:
      return "uint8";
    case torch::kBool:
      return "bool";
    default:
      return c10::toString(dtype);
  }
}

CollectiveDescriptor describe_collective(CollectiveOp op, int64_t seq, const torch::Tensor* tensor, int64_t arg) {
  CollectiveDescriptor d;
  d.seq = seq;
  d.op = static_cast<int64_t>(op);
  d.arg = arg;
  if (tensor == nullptr) return d;
  d.dtype = static_cast<int64_t>(tensor->scalar_type());
  d.ndim = tensor->dim();
  for (int64_t i = 0; i < std::min<int64_t>(d.ndim, CollectiveDescriptor::kMaxDims); ++i) d.shape[i] = tensor->size(i);
  d.numel = tensor->numel();
  if (op == CollectiveOp::kAllToAll) {
    d.numel = 1;
    for (int64_t i = 1; i < d.ndim; ++i) d.numel *= tensor->size(i);
  }
  return d;
}

std::vector<int> ranks_with_invalid_arguments(const std::vector<CollectiveDescriptor>& all) {
  std::vector<int> ranks;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].magic == CollectiveDescriptor::kMagic && all[r].invalid_arguments) ranks.push_back(static_cast<int>(r));
  return ranks;
}

std::optional<std::string> find_disagreement(const std::vector<CollectiveDescriptor>& all) {
  // Group ranks by what they are doing, in order of each group's first rank.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  std::map<std::string, size_t> index;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string k = key(all[r]);
    auto [it, fresh] = index.emplace(k, groups.size());
    if (fresh) groups.push_back({k, {}});
    groups[it->second].second.push_back(static_cast<int>(r));
  }
  if (groups.size() <= 1) return std::nullopt;

  bool same_collective = true;
  for (const auto& d : all)
    same_collective =
        same_collective && d.magic == CollectiveDescriptor::kMagic && d.op == all[0].op && d.seq == all[0].seq;
  std::string message = same_collective ? collective_text(all[0]) + ": " : "ranks called different collectives: ";
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g].second;
    const CollectiveDescriptor& d = all[static_cast<size_t>(ranks[0])];
    const bool one = ranks.size() == 1;
    message += (g ? ", " : "") + rank_list(ranks);
    if (d.magic != CollectiveDescriptor::kMagic)
      message += " sent no descriptor (does every rank check collectives?)";
    else if (same_collective)
      message += (one ? " has " : " have ") + operands_text(d);
    else
      message += " called " + collective_text(d) + " with " + operands_text(d);
  }
  return message;
}

std::optional<std::string> find_count_mismatch(const std::vector<std::vector<int64_t>>& counts) {
  const size_t world = counts.size();
  std::string message;
  int shown = 0, total = 0;
  for (size_t from = 0; from < world; ++from) {
    for (size_t to = 0; to < world; ++to) {
      const int64_t sent = counts[from][to];
      const int64_t expected = counts[to][world + from];
      if (sent == expected) continue;
      ++total;
      if (shown++ < 8)  // enough to see the pattern; a world of bad counts would drown the message
        message += (message.empty() ? "" : ", ") +
                   ("rank " + std::to_string(from) + " sends " + std::to_string(sent) + " rows to rank " +
                    std::to_string(to) + ", which expects " + std::to_string(expected));
    }
  }
  if (total == 0) return std::nullopt;
  if (total > shown) message += " and " + std::to_string(total - shown) + " more pairs";
  return "send and receive counts disagree: " + message;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i) text += ",";
    text += std::to_string(ranks[i]);
    if (j > i) text += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return text;
}

std::vector<int64_t> AgreedCollectives::key(const CollectiveDescriptor& d) {
  std::vector<int64_t> words = {d.op, d.dtype, d.ndim, d.numel, d.arg};
  words.insert(words.end(), d.shape.begin(), d.shape.end());
  return words;
}

}  // namespace moco::dist
