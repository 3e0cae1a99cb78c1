#include "sys/op_count.h"

#include <ATen/record_function.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace moco::sys {
namespace {

std::atomic<bool> alive{false};
std::atomic<int64_t> all_ops{0};
std::atomic<int64_t> ops_in_updates{0};
std::mutex by_name_mutex;
std::map<std::string, int64_t> by_name;  // guarded by by_name_mutex
at::CallbackHandle handle = 0;
// The update scopes open on this thread, innermost last.
thread_local std::vector<std::string> open_updates;

bool is_update_scope(const at::RecordFunction& fn) {
  return fn.scope() == at::RecordScope::USER_SCOPE &&
         std::strncmp(fn.name(), kUpdateScopePrefix, std::strlen(kUpdateScopePrefix)) == 0;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (is_update_scope(fn)) {
    open_updates.emplace_back(fn.name());
    return nullptr;
  }
  if (fn.scope() != at::RecordScope::FUNCTION) return nullptr;
  ++all_ops;
  if (open_updates.empty()) return nullptr;
  ++ops_in_updates;
  const std::lock_guard<std::mutex> lock(by_name_mutex);
  ++by_name[open_updates.back() + " " + fn.name()];
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (is_update_scope(fn) && !open_updates.empty()) open_updates.pop_back();
}

}  // namespace

OpCount::OpCount() {
  if (alive.exchange(true)) throw std::logic_error("OpCount: one is alive already");
  reset();
  handle = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                     .needsInputs(false)
                                     .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
}

OpCount::~OpCount() {
  at::removeCallback(handle);
  alive = false;
}

int64_t OpCount::ops() const { return all_ops.load(); }
int64_t OpCount::update_ops() const { return ops_in_updates.load(); }

std::map<std::string, int64_t> OpCount::update_ops_by_name() const {
  const std::lock_guard<std::mutex> lock(by_name_mutex);
  return by_name;
}

void OpCount::reset() {
  all_ops = 0;
  ops_in_updates = 0;
  const std::lock_guard<std::mutex> lock(by_name_mutex);
  by_name.clear();
}

}  // namespace moco::sys
