// The folder lock (sys/folder_lock.h) as a second run and a user's `rm` meet it: its hidden twin keeps
// a second process out once moco.lock is deleted, the holder sees its moco.lock deleted or taken, a
// probe of another folder's lock neither creates nor keeps anything, and a release never removes a
// lock file another process holds. The end-to-end cases are tools.lock_removed_np* and
// tools.output_dir_misplaced_np*.
#include "sys/folder_lock.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;
using moco::sys::FolderLock;

class FolderLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("moco_folder_lock_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }
  std::string lock_file() const { return (dir_ / moco::sys::kFolderLockName).string(); }

  // moco.lock replaced at once by a file this fixture holds locked through its own descriptor, as a
  // program that takes moco.lock alone would: another holder, as flock sees it.
  int take_over_lock_file() {
    const std::string next = lock_file() + ".next";
    const int fd = ::open(next.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    const std::string text = "otherhost 4242\n";
    EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    fs::rename(next, lock_file());
    return fd;
  }

  fs::path dir_;
};

TEST_F(FolderLockTest, ASecondLockOfTheFolderIsRefusedNamingTheHolder) {
  FolderLock first, second;
  ASSERT_FALSE(first.acquire(dir()).has_value());
  EXPECT_TRUE(fs::exists(lock_file()));
  EXPECT_TRUE(fs::exists(dir_ / moco::sys::kFolderGuardName));
  const auto holder = second.acquire(dir());
  ASSERT_TRUE(holder.has_value());
  EXPECT_NE(holder->find(std::to_string(::getpid())), std::string::npos) << *holder;
  EXPECT_FALSE(second.held());
  EXPECT_FALSE(first.lost().has_value());
}

// A moco.lock that is a symbolic link is refused, naming it and its target, which stays untouched
// (a run wrote its host and pid into the link's target; issue 57, L2). The twin too.
TEST_F(FolderLockTest, ALockFileThatIsALinkIsRefusedAndItsTargetLeftAlone) {
  for (const char* name : {moco::sys::kFolderLockName, moco::sys::kFolderGuardName}) {
    SCOPED_TRACE(name);
    const auto target = dir_ / "precious.txt";
    std::ofstream(target) << "keep me\n";
    fs::create_symlink(target, dir_ / name);
    FolderLock lock;
    try {
      (void)lock.acquire(dir());
      ADD_FAILURE() << "a lock file that is a link was taken";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find((dir_ / name).string() + ": the lock file is a symbolic link (to " +
                                           target.string() + ")"),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(lock.held());
    std::ifstream in(target);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "keep me\n");
    fs::remove(dir_ / name);
  }
}

TEST_F(FolderLockTest, ADeletedLockFileIsLostYetKeepsASecondProcessOut) {
  FolderLock first;
  ASSERT_FALSE(first.acquire(dir()).has_value());
  fs::remove(lock_file());
  const auto loss = first.lost();
  ASSERT_TRUE(loss.has_value());
  EXPECT_EQ(loss->what, "deleted");
  EXPECT_FALSE(loss->taken);
  FolderLock second;
  EXPECT_TRUE(second.acquire(dir()).has_value()) << "the twin did not keep the second lock out";
  EXPECT_FALSE(fs::exists(lock_file())) << "the refused lock left a moco.lock";
  first.release();
  EXPECT_FALSE(fs::exists(dir_ / moco::sys::kFolderGuardName));
  EXPECT_FALSE(second.acquire(dir()).has_value()) << "the folder stays locked after the holder released it";
}

TEST_F(FolderLockTest, ALockFileTakenByAnotherHolderIsLostAsTakenAndNotRemoved) {
  FolderLock first;
  ASSERT_FALSE(first.acquire(dir()).has_value());
  const int other = take_over_lock_file();
  const auto loss = first.lost();
  ASSERT_TRUE(loss.has_value());
  EXPECT_TRUE(loss->taken);
  EXPECT_EQ(loss->what, "replaced, and held by host otherhost pid 4242");
  first.release();
  EXPECT_TRUE(fs::exists(lock_file())) << "the release removed the other holder's moco.lock";
  ::close(other);
}

TEST_F(FolderLockTest, AFileLeftInPlaceOfTheLockIsLostButNotTaken) {
  FolderLock first;
  ASSERT_FALSE(first.acquire(dir()).has_value());
  ::close(take_over_lock_file());  // closed: its lock dropped, an inert file left
  const auto loss = first.lost();
  ASSERT_TRUE(loss.has_value());
  EXPECT_FALSE(loss->taken);
  EXPECT_EQ(loss->what, "replaced by another file");
}

TEST_F(FolderLockTest, AProbeFindsALiveHolderOnlyAndLeavesNothing) {
  EXPECT_FALSE(moco::sys::lock_holder(dir()).has_value());
  EXPECT_TRUE(fs::is_empty(dir_)) << "the probe created a file";
  {
    FolderLock held;
    ASSERT_FALSE(held.acquire(dir()).has_value());
    const auto holder = moco::sys::lock_holder(dir());
    ASSERT_TRUE(holder.has_value());
    EXPECT_NE(holder->find(std::to_string(::getpid())), std::string::npos) << *holder;
  }
  std::ofstream(lock_file()) << "deadhost 1\n";  // a killed run's leftover
  EXPECT_FALSE(moco::sys::lock_holder(dir()).has_value());
  FolderLock after;
  EXPECT_FALSE(after.acquire(dir()).has_value()) << "the probe kept a lock";
}

TEST_F(FolderLockTest, AProbesMomentaryLockIsWaitedOut) {
  // lock_holder's probe of this folder (another run's check of its own output folder, beneath this one)
  // holds a shared lock for a moment: a run starting then is not refused for it.
  const std::string twin = (dir_ / moco::sys::kFolderGuardName).string();
  const int probe = ::open(twin.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(probe, 0);
  ASSERT_EQ(::flock(probe, LOCK_SH | LOCK_NB), 0);
  std::thread release([probe] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    ::close(probe);
  });
  FolderLock lock;
  const auto holder = lock.acquire(dir());
  release.join();
  EXPECT_FALSE(holder.has_value()) << "refused for a probe: " << *holder;
  EXPECT_TRUE(lock.held());
}

}  // namespace
