// defines: Clock (the steady clock every duration of a run is measured on), seconds_since
#pragma once

#include <chrono>

namespace moco::run {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace moco::run
