// defines: OpCount (while alive, counts the ATen ops this process dispatches, all of them and those
// inside an update scope: how many ops, and so kernel launches, a training step costs)
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace moco::sys {

// Note [Update scopes]
// The state updates of a step (the momentum update, the SGD step, the NaN-skip restore, the
// BatchNorm broadcast) each run inside RECORD_USER_SCOPE("update/<what>"). Without a RecordFunction
// callback the scope costs a branch; with OpCount alive every op dispatched inside one (the ops it
// calls in turn included) counts as an update op. On a GPU each such op is a kernel launch or more:
// their number must not grow with the parameter tensors (UpdateOpsTest, bench_step's "ops" line).
inline constexpr const char* kUpdateScopePrefix = "update/";

// One at a time: the callback is process-wide (every thread). Counts ATen ops (RecordScope::FUNCTION),
// nested ones included, from construction to destruction.
class OpCount {
 public:
  OpCount();
  ~OpCount();
  OpCount(const OpCount&) = delete;
  OpCount& operator=(const OpCount&) = delete;

  int64_t ops() const;
  int64_t update_ops() const;
  // Update ops by "<scope> <op>", e.g. "update/sgd aten::where": what a failing test prints.
  std::map<std::string, int64_t> update_ops_by_name() const;
  void reset();
};

}  // namespace moco::sys
