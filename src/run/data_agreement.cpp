#include "run/data_agreement.h"

#include "dist/bootstrap.h"
#include "run/setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace moco::run {
namespace {

constexpr int64_t kWords = 3;        // a split's images, entries and hash
constexpr int64_t kTextBytes = 512;  // an entry as a message names it, cut there
constexpr size_t kRanksNamed = 4;

int64_t as_word(uint64_t hash) {
  int64_t word = 0;
  std::memcpy(&word, &hash, sizeof word);
  return word;
}

// Every rank's [images, entries, hash] of each split: [world, kWords * splits].
torch::Tensor gather_summaries(const std::vector<data::SplitListing>& splits, dist::ProcessGroup& group) {
  auto mine = torch::zeros({1, kWords * static_cast<int64_t>(splits.size())}, torch::kInt64);
  for (size_t s = 0; s < splits.size(); ++s) {
    const auto base = static_cast<int64_t>(s) * kWords;
    mine[0][base] = splits[s].images;
    mine[0][base + 1] = splits[s].entries;
    mine[0][base + 2] = as_word(data::fingerprint(splits[s], 1).hash);
  }
  return group.all_gather(mine).contiguous();
}

// The first entry in which this rank's listing and rank 0's differ (their common length where one is
// the other's beginning), by bisection: each round every rank says which prefix it asks about, rank 0
// answers each with its own prefix hash. -1 on a rank that agrees (and on rank 0). Collective.
int64_t first_difference_with_rank0(const data::SplitListing& listing, bool differs, int64_t rank0_entries,
                                    dist::ProcessGroup& group) {
  const auto prefix = data::prefix_hashes(listing);
  // prefix[lo] agrees with rank 0's; prefix[hi] does not, or hi is past both lists.
  int64_t lo = 0, hi = differs ? std::min(listing.entries, rank0_entries) + 1 : 1;
  for (;;) {
    const int64_t ask = hi - lo > 1 ? (lo + hi) / 2 : -1;
    const auto asked = group.all_gather(torch::tensor({ask}, torch::kInt64)).contiguous();
    const auto* a = asked.data_ptr<int64_t>();
    if (std::all_of(a, a + asked.numel(), [](int64_t v) { return v < 0; })) break;
    auto answers = torch::zeros({asked.numel()}, torch::kInt64);
    if (group.rank() == 0)
      for (int64_t r = 0; r < asked.numel(); ++r)
        if (a[r] >= 0 && a[r] < static_cast<int64_t>(prefix.size()))
          answers[r] = as_word(prefix[static_cast<size_t>(a[r])]);
    group.broadcast(answers, 0);
    if (ask < 0) continue;
    (answers[group.rank()].item<int64_t>() == as_word(prefix[static_cast<size_t>(ask)]) ? lo : hi) = ask;
  }
  return differs ? lo : -1;
}

std::string entry_text(const data::SplitListing& listing, int64_t index) {
  if (index < 0) return "";
  return index < listing.entries ? data::describe(listing.entry(index)) : "none (its list ends before)";
}

torch::Tensor text_row(const std::string& text) {
  auto row = torch::zeros({1, kTextBytes}, torch::kUInt8);
  std::memcpy(row.data_ptr(), text.data(), std::min<size_t>(text.size(), kTextBytes - 1));
  return row;
}

std::string text_of(const torch::Tensor& rows, int64_t r) {
  const auto* bytes = static_cast<const char*>(rows[r].data_ptr());
  return std::string(bytes, strnlen(bytes, kTextBytes));
}

// Where each rank's listing first differs from rank 0's, and the entry each side has there, by rank.
struct Differences {
  std::vector<int64_t> first;            // -1: the rank agrees
  std::vector<std::string> own, rank0s;  // rank r's entry at first[r], rank 0's entry there
};

// Collective: each rank's index and entry, and rank 0's entries at every rank's index.
Differences gather_differences(const data::SplitListing& listing, int64_t first, dist::ProcessGroup& group) {
  const auto own = group.all_gather(text_row(entry_text(listing, first))).contiguous();
  const auto where = group.all_gather(torch::tensor({first}, torch::kInt64)).contiguous();
  const int64_t world = where.numel();
  auto rank0 = torch::zeros({world, kTextBytes}, torch::kUInt8);
  if (group.rank() == 0)
    for (int64_t r = 0; r < world; ++r) rank0[r].copy_(text_row(entry_text(listing, where[r].item<int64_t>()))[0]);
  group.broadcast(rank0, 0);
  Differences d;
  for (int64_t r = 0; r < world; ++r) {
    d.first.push_back(where[r].item<int64_t>());
    d.own.push_back(text_of(own, r));
    d.rank0s.push_back(text_of(rank0, r));
  }
  return d;
}

std::string host_of(int rank) {
  const auto& hosts = dist::world_hosts();
  return rank < static_cast<int>(hosts.size()) ? hosts[static_cast<size_t>(rank)] : "?";
}

std::string rank_on_host(int rank) { return fmt::format("rank {} (host {})", rank, host_of(rank)); }

// The sentence every rank throws: the split, then each differing rank against rank 0.
std::string describe_disagreement(const char* split, const data::SplitListing& listing, const torch::Tensor& summaries,
                                  int64_t column, const std::vector<int>& differing, const Differences& d) {
  std::string text = fmt::format("the ranks do not hold the same data: the {} split ({}): {} holds {} images", split,
                                 listing.where, rank_on_host(0), summaries[0][column].item<int64_t>());
  for (size_t i = 0; i < std::min(differing.size(), kRanksNamed); ++i) {
    const int r = differing[i];
    text += fmt::format("; {} holds {} images, first difference at entry #{}: rank 0 has {}, rank {} has {}",
                        rank_on_host(r), summaries[r][column].item<int64_t>(), d.first[static_cast<size_t>(r)],
                        d.rank0s[static_cast<size_t>(r)], r, d.own[static_cast<size_t>(r)]);
  }
  if (differing.size() > kRanksNamed) text += fmt::format("; and {} more rank(s)", differing.size() - kRanksNamed);
  return text +
         ". Every rank must read the same files (a node with a stale or partial copy of the data?): give each the "
         "same data.root";
}

}  // namespace

void check_ranks_agree_on_data(const Config& config, dist::ProcessGroup& group) {
  if (group.world_size() == 1) return;
  const std::vector<data::SplitListing> splits{split_listing(config, true), split_listing(config, false)};
  const char* names[] = {"train", "val"};
  const auto all = gather_summaries(splits, group);
  for (size_t s = 0; s < splits.size(); ++s) {
    const int64_t base = static_cast<int64_t>(s) * kWords;
    std::vector<int> differing;
    for (int r = 1; r < group.world_size(); ++r)
      if (!torch::equal(all[r].narrow(0, base, kWords), all[0].narrow(0, base, kWords))) differing.push_back(r);
    if (differing.empty()) continue;
    const bool mine = std::find(differing.begin(), differing.end(), group.rank()) != differing.end();
    const int64_t first = first_difference_with_rank0(splits[s], mine, all[0][base + 1].item<int64_t>(), group);
    throw ConfigError(
        describe_disagreement(names[s], splits[s], all, base, differing, gather_differences(splits[s], first, group)));
  }
  spdlog::info("data: the {} ranks hold the same train split ({} images) and val split ({} images)", group.world_size(),
               splits[0].images, splits[1].images);
}

}  // namespace moco::run
