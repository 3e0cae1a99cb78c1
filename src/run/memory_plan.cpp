#include "run/memory_plan.h"

#include "model/resnet.h"
#include "model/vit.h"
#include "run/setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>

#if MOCO_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <unistd.h>

#include <algorithm>
#include <numeric>

namespace moco::run {
namespace {

model::BackboneSize backbone_size(const Config& c) {
  const int64_t channels = dataset_channels(c);
  if (is_vit(c.model.arch)) return model::estimate_size(vit_options(c, channels));
  return model::estimate_size(backbone_options(c, channels), c.data.augment.out_size);
}

// 0 where it cannot tell.
double physical_memory_bytes() {
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

double rank_images(const Config& c, int world_size, Job job) {
  return static_cast<double>(global_batch(c, job) / world_size);
}

MemoryPart views_part(const Config& c, int world_size, Job job) {
  const int64_t views = job == Job::kMoco ? 2 : 1, side = c.data.augment.out_size, channels = dataset_channels(c);
  const double images = rank_images(c, world_size, job) * static_cast<double>(views),
               pixels = static_cast<double>(side);
  return {"data.image_size",
          fmt::format("({}) with {} {} on {} rank(s) makes a batch of {} views of {}x{}x{} float32 per rank", side,
                      global_batch_key(job), global_batch(c, job), world_size, images, channels, side, side),
          4.0 * images * static_cast<double>(channels) * pixels * pixels};
}

MemoryPlan encoder_parts(const Config& c, int world_size, Job job, double graph_images, int64_t parameter_copies) {
  const model::BackboneSize size = backbone_size(c);
  const bool widened = !is_vit(c.model.arch) && c.model.width > 0;
  MemoryPlan plan{{widened ? "model.width" : "model.arch",
                   widened ? fmt::format("({}) makes {} of {:.3g} parameters, held {} times as float32", c.model.width,
                                         c.model.arch, size.parameters, parameter_copies)
                           : fmt::format("({}) has {:.3g} parameters, held {} times as float32", c.model.arch,
                                         size.parameters, parameter_copies),
                   4.0 * size.parameters * static_cast<double>(parameter_copies)}};
  if (graph_images > 0) {
    const double images = graph_images;
    const double bytes_per_float = c.train.precision == Precision::kFp32 ? 4.0 : 2.0;
    plan.push_back({global_batch_key(job),
                    fmt::format("({}) on {} rank(s) sends {} views per rank at once through {} at {} px, whose "
                                "forward keeps at least {:.3g} activations each for backward",
                                global_batch(c, job), world_size, images, c.model.arch, c.data.augment.out_size,
                                size.saved_floats_per_image),
                    bytes_per_float * images * size.saved_floats_per_image});
  }
  return plan;
}

MemoryLimit memory_limit() {
#if MOCO_WITH_CUDA
  if (torch::cuda::is_available()) {
    const auto* device = at::cuda::getCurrentDeviceProperties();
    return {static_cast<double>(device->totalGlobalMem), fmt::format("CUDA device {}", device->name)};
  }
#endif
  return {physical_memory_bytes(), "this machine"};
}

namespace {

double total_bytes(const MemoryPlan& plan) {
  return std::accumulate(plan.begin(), plan.end(), 0.0, [](double sum, const MemoryPart& p) { return sum + p.bytes; });
}

}  // namespace

std::string describe_pieces(const Config& c, int world_size, Job job) {
  const int64_t share = global_batch(c, job) / world_size, piece = c.optim.micro_batch;
  if (job != Job::kMoco || piece <= 0 || piece >= share) return "";
  return fmt::format("optim.micro_batch {}: each rank's share of {} images in {} pieces per step", piece, share,
                     share / piece);
}

std::string describe_memory(const MemoryPlan& plan, const MemoryLimit& limit) {
  std::vector<std::string> parts;
  for (const auto& p : plan) parts.push_back(fmt::format("{} {:.3g}", p.key, p.bytes));
  return fmt::format("a rank's step holds at least {:.3g} bytes ({}) of the {:.3g} bytes of memory of {}",
                     total_bytes(plan), fmt::join(parts, ", "), limit.bytes, limit.name);
}

void require_fits(const MemoryPlan& plan, const MemoryLimit& limit, const std::string& where) {
  if (limit.bytes <= 0 || total_bytes(plan) <= limit.bytes) return;
  const auto largest = std::max_element(plan.begin(), plan.end(),
                                        [](const MemoryPart& a, const MemoryPart& b) { return a.bytes < b.bytes; });
  require(false, where, largest->key,
          fmt::format("{}, at least {:.3g} bytes; {}: it does not fit", largest->what, largest->bytes,
                      describe_memory(plan, limit)));
}

}  // namespace moco::run
