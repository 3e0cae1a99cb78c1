// defines: views_part, encoder_parts (the shared parts of a MemoryPlan: what a rank's step holds,
// estimated from the config before anything is built), memory_limit, describe_pieces, describe_memory, require_fits
#pragma once

#include "run/config.h"
#include "run/memory_part.h"

#include <string>

namespace moco::run {

// A rank's share of the global batch as float32 views of data.image_size (two for MoCo, one for the
// linear protocol): keyed data.image_size.
MemoryPart views_part(const Config& config, int world_size, Job job);

// The backbone's parameters, held `parameter_copies` times as float32 (the trained encoder, its
// gradients, a momentum encoder, optimizer state), keyed model.width or model.arch; and, when
// `graph_images` > 0, what its forward keeps for backward for that many images at once (float32, or
// half as many bytes under bf16/fp16), keyed by the job's batch size.
MemoryPlan encoder_parts(const Config& config, int world_size, Job job, double graph_images, int64_t parameter_copies);

// A rank's share of the job's global batch, in images.
double rank_images(const Config& config, int world_size, Job job);

// What a rank may use: the CUDA device's memory where this process drives one, else the machine's.
struct MemoryLimit {
  double bytes = 0;  // 0: unknown, nothing is refused
  std::string name;  // whose: "this machine", "CUDA device NVIDIA H100 80GB HBM3"
};
MemoryLimit memory_limit();

// "optim.micro_batch P: each rank's share of N images in K pieces per step", or "" (no pieces, or not MoCo).
std::string describe_pieces(const Config& config, int world_size, Job job);

// "a rank's step holds at least B bytes (key b, ...) of the M bytes of memory of this machine"
std::string describe_memory(const MemoryPlan& plan, const MemoryLimit& limit);

// Throws ConfigError naming `where` and the key of the largest part, with every part's bytes, when
// the parts add up to more than `limit`.
void require_fits(const MemoryPlan& plan, const MemoryLimit& limit, const std::string& where);

}  // namespace moco::run
