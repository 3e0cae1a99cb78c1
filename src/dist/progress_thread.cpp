#include "dist/progress_thread.h"

#include <algorithm>
#include <utility>

namespace moco::dist {

ProgressThread::ProgressThread(std::chrono::microseconds interval) : interval_(interval), thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ProgressThread::add(std::shared_ptr<Work> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    works_.push_back(std::move(work));
  }
  changed_.notify_all();
}

void ProgressThread::pause() {
  std::unique_lock<std::mutex> lock(mutex_);
  works_.clear();
  changed_.notify_all();
  changed_.wait(lock, [this] { return !busy_; });
}

int64_t ProgressThread::passes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return passes_;
}

void ProgressThread::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return quit_ || !works_.empty(); });
    if (quit_) return;
    const auto works = works_;
    busy_ = true;
    lock.unlock();
    std::vector<Work*> failed;
    for (const auto& work : works) {
      try {
        work->progress();
      } catch (...) {
        failed.push_back(work.get());  // its wait() rethrows
      }
    }
    lock.lock();
    busy_ = false;
    ++passes_;
    works_.erase(
        std::remove_if(works_.begin(), works_.end(),
                       [&](const auto& w) { return std::find(failed.begin(), failed.end(), w.get()) != failed.end(); }),
        works_.end());
    changed_.notify_all();
    changed_.wait_for(lock, interval_, [this] { return quit_ || works_.empty(); });
  }
}

}  // namespace moco::dist
