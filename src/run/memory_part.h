// defines: MemoryPart, MemoryPlan (what a rank holds through a step, estimated from the config before
// anything is built: run/memory_plan.h makes the shared parts, a method room its own)
#pragma once

#include <string>
#include <vector>

namespace moco::run {

// One thing a rank holds through a step, at least this many bytes.
struct MemoryPart {
  std::string key;   // the key that makes it large, named when the step does not fit
  std::string what;  // after "key 'K' ": "(value) ... makes ..."
  double bytes = 0;
};
using MemoryPlan = std::vector<MemoryPart>;

}  // namespace moco::run
