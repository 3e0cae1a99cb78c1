#include "train/run_logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>

namespace moco::train {

void setup_logging(const std::string& output_dir, int rank, int world_size, bool all_ranks_to_console, bool to_files) {
  std::vector<spdlog::sink_ptr> sinks;
  if (rank == 0 || all_ranks_to_console) sinks.push_back(std::make_shared<spdlog::sinks::stdout_color_sink_mt>());
  // Appended to: a resumed or requeued run keeps the log of the attempts before it.
  const auto file = std::filesystem::path(output_dir) / ("rank" + std::to_string(rank) + ".log");
  if (to_files) sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file.string(), /*truncate=*/false));
  auto logger = std::make_shared<spdlog::logger>("moco_dist", sinks.begin(), sinks.end());
  logger->set_pattern(world_size > 1 ? "[%Y-%m-%d %H:%M:%S.%e] [%l] [rank " + std::to_string(rank) + "] %v"
                                     : "[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace moco::train
