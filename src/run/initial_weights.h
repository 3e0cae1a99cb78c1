// defines: InitialWeights (a copy, on the host, of an encoder's weights as training initialised
// them, so that the random-init kNN baseline can be scored after training has started and the
// first step waits for no evaluation)
#pragma once

#include "model/backbone.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace moco::run {

class InitialWeights {
 public:
  // A copy of `encoder`'s parameters and buffers as they are now: before the first step or a resume.
  explicit InitialWeights(model::Backbone encoder);
  // Calls `use` with `encoder` holding the copied weights, then gives it back its own, bitwise.
  // The encoder must be the one copied (the same tensors by name).
  void lend(model::Backbone encoder, const std::function<void()>& use) const;

 private:
  std::vector<std::pair<std::string, torch::Tensor>> tensors_;
};

}  // namespace moco::run
