// defines: check_ranks_agree_on_data (before step 1, every rank of a job holds the same train and val
// splits: a node with a stale copy of the data is named, not trained on)
#pragma once

#include "dist/process_group.h"
#include "run/config.h"

namespace moco::run {

// Every rank compares its listing of each split (split_listing: paths, sizes and labels of an
// ImageFolder or of packed shards, the IDX files' bytes) with rank 0's: one all-gather of three words
// a split when they agree. A disagreement is a ConfigError, the same on every rank, naming the split,
// each differing rank (up to 4) and its host, its count of images beside rank 0's, and the first entry
// in which they differ, by both names (found by bisection over prefix hashes: a few words per round,
// whatever the split's size). Collective; a world of one returns at once.
void check_ranks_agree_on_data(const Config& config, dist::ProcessGroup& group);

}  // namespace moco::run
