#include "lincls/knn_eval.h"

#include "lincls/frozen_backbone.h"
#include "run/device.h"
#include "run/knn_monitor.h"
#include "run/setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>

namespace moco::lincls {

KnnEvalResult knn_eval_only(const run::Config& config, const run::RunContext& context) {
  torch::set_num_threads(run::intra_op_threads(config.train.threads, context.local_size));
  run::Config c = config;
  if (c.model.pretrained.empty()) c.model.pretrained = c.train.output_dir;
  const Backbone backbone = Backbone::load(c, context.device);
  run::KnnMonitor knn(c, run::load_splits(c), nullptr, *context.group);
  KnnEvalResult result;
  result.raw_pixels = knn.raw_baseline_enabled() && backbone.kind() != Backbone::Kind::kRawPixels
                          ? knn.evaluate_raw_pixels(0, 0, false)
                          : std::nan("");
  const auto normalisation = run::augment_options(c);
  result.top1 = knn.evaluate(
      [&](const torch::Tensor& images) { return backbone.features(data::normalize_batch(images, normalisation)); },
      backbone.label(), 0, 0, false);
  spdlog::info("kNN top-1: {}{} {:.2f}% ({})",
               std::isnan(result.raw_pixels) ? "" : fmt::format("raw pixels {:.2f}%, ", result.raw_pixels),
               backbone.label(), result.top1, backbone.description());
  return result;
}

}  // namespace moco::lincls
