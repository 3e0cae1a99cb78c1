// defines: momentum_update, the exponential moving average by which a momentum encoder follows the
// encoder that trains (MoCo's key encoder, MoCo v3's momentum encoder, BYOL's target network)
#pragma once

#include <torch/types.h>

#include <vector>

namespace moco::model {

// targets[i] = m * targets[i] + (1 - m) * sources[i] for each pair, in place, without a graph: one
// mul_ and one add_ per pair, so a caller with flat buffers (Note [Flat buffers]) updates every
// parameter with two ops. Each pair must match in shape, dtype and device.
void momentum_update(const std::vector<torch::Tensor>& targets, const std::vector<torch::Tensor>& sources, double m);

}  // namespace moco::model
