#include "run/run_logging.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A rank can be killed (another rank's MPI_Abort) while its console write is stuck: the launcher
// has not read the pipe yet. Whatever it logged must already be in its file by then. Here the
// console is a full pipe, so the log call blocks in the console write until the pipe is drained.
TEST(RunLoggingTest, ALineIsInTheRankFileBeforeTheConsoleTakesIt) {
  const auto dir = std::filesystem::temp_directory_path() / ("moco_logging_test_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  // Fill the pipe (non-blocking while filling), then make writes to it block again.
  fcntl(pipe_fds[1], F_SETFL, O_NONBLOCK);
  const std::string filler(4096, 'x');
  while (write(pipe_fds[1], filler.data(), filler.size()) > 0) {
  }
  fcntl(pipe_fds[1], F_SETFL, 0);
  std::fflush(stdout);
  const int saved_stdout = dup(STDOUT_FILENO);
  ASSERT_EQ(dup2(pipe_fds[1], STDOUT_FILENO), STDOUT_FILENO);

  const auto previous = spdlog::default_logger();
  moco::run::setup_logging(dir.string(), /*rank=*/0, /*world_size=*/2, /*all_ranks_to_console=*/false);
  std::atomic<bool> logged{false};
  std::thread logging([&] {
    spdlog::critical("the line that must not be lost");
    logged = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string in_file = read_file(dir / "rank0.log");

  // Drain the pipe so that the logging thread's console write completes, then put stdout back.
  fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  char buffer[4096];
  while (!logged) {
    while (read(pipe_fds[0], buffer, sizeof buffer) > 0) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  logging.join();
  std::fflush(stdout);
  while (read(pipe_fds[0], buffer, sizeof buffer) > 0) {
  }
  dup2(saved_stdout, STDOUT_FILENO);
  close(saved_stdout);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  spdlog::set_default_logger(previous);

  EXPECT_NE(in_file.find("the line that must not be lost"), std::string::npos)
      << "rank0.log while the console write was blocked:\n"
      << in_file;
  EXPECT_NE(read_file(dir / "rank0.log").find("[critical] [rank 0] the line that must not be lost"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
