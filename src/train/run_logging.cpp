#include "train/run_logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace moco::train {

void make_output_dir(const std::string& output_dir) {
  std::error_code ec;
  if (std::filesystem::exists(output_dir, ec) && !std::filesystem::is_directory(output_dir, ec))
    throw std::runtime_error("train.output_dir '" + output_dir + "': exists and is not a folder");
  std::filesystem::create_directories(output_dir, ec);
  if (ec) {
    throw std::runtime_error("train.output_dir '" + output_dir + "': cannot create the folder (" + ec.message() + ")");
  }
}

void setup_logging(const std::string& output_dir, int rank, int world_size, bool all_ranks_to_console, bool to_files) {
  if (to_files) make_output_dir(output_dir);
  std::vector<spdlog::sink_ptr> sinks;
  if (rank == 0 || all_ranks_to_console) sinks.push_back(std::make_shared<spdlog::sinks::stdout_color_sink_mt>());
  // Appended to: a resumed or requeued run keeps the log of the attempts before it.
  const auto file = std::filesystem::path(output_dir) / ("rank" + std::to_string(rank) + ".log");
  if (to_files) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file.string(), /*truncate=*/false));
    } catch (const spdlog::spdlog_ex& e) {
      throw std::runtime_error("train.output_dir '" + output_dir + "': cannot write " + file.string() + " in it (" + e.what() + ")");
    }
  }
  auto logger = std::make_shared<spdlog::logger>("moco_dist", sinks.begin(), sinks.end());
  logger->set_pattern(world_size > 1 ? "[%Y-%m-%d %H:%M:%S.%e] [%l] [rank " + std::to_string(rank) + "] %v"
                                     : "[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace moco::train
