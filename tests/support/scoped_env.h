// An environment variable set (or unset) for a scope.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace moco::test {

// Sets one environment variable for the scope (nullptr: unsets it), restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (name_.empty()) return;  // moved from
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ScopedEnv(ScopedEnv&& other) noexcept : name_(std::move(other.name_)), old_(std::move(other.old_)) {
    other.name_.clear();
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace moco::test
