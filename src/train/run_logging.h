// defines: setup_logging (rank-prefixed spdlog sinks: the console for rank 0 or all ranks, a file per rank)
#pragma once

#include <string>

namespace moco::train {

// Every rank logs to output_dir/rank<N>.log (appended; none with to_files off, for dry runs); the console gets rank 0's lines, or every rank's when
// all_ranks_to_console. With several ranks each line carries "[rank N]".
void setup_logging(const std::string& output_dir, int rank, int world_size, bool all_ranks_to_console, bool to_files = true);

}  // namespace moco::train
