#include "lincls/views.h"

#include "data/augment_params.h"
#include "run/setup.h"

#include <torch/torch.h>

#include <cmath>

namespace moco::lincls {

// The official linear protocol's training view is crop + flip whatever the pre-training used: the
// batched recipe for images of one size, else v1. The options follow the augmentation table's
// evaluation column (data/augment_params.h): the protocol's values below, every op it marks off
// (colour jitter, greyscale, blur) off, the size, implementation and normalisation the pre-training's.
data::AugmentOptions train_view(const run::Config& c) {
  data::AugmentOptions protocol;
  protocol.recipe = run::is_encoded_dataset(c) ? data::Recipe::kV1 : data::Recipe::kSimple;
  protocol.scale_min = c.lincls.crop_scale_min;
  protocol.scale_max = 1.0;
  protocol.flip_prob = 0.5;
  return data::evaluation_options(run::augment_options(c), protocol);
}

torch::Tensor center_view(const torch::Tensor& images, const data::AugmentOptions& normalisation) {
  const auto x = data::normalize_batch(images, normalisation);
  const int64_t s = normalisation.out_size, h = x.size(2), w = x.size(3);
  if (h == s && w == s) return x;
  // torchvision's Resize(int): the shorter side becomes `side`, the longer int(side * long / short).
  const auto side = static_cast<int64_t>(std::lround(static_cast<double>(s) * 256.0 / 224.0));
  const int64_t rh = h <= w ? side : static_cast<int64_t>(static_cast<double>(side) * h / w);
  const int64_t rw = h <= w ? static_cast<int64_t>(static_cast<double>(side) * w / h) : side;
  namespace F = torch::nn::functional;
  const auto resized = F::interpolate(
      x, F::InterpolateFuncOptions().size(std::vector<int64_t>{rh, rw}).mode(torch::kBilinear).align_corners(false));
  // CenterCrop: offsets rounded as torchvision does, int(round((size - s) / 2)).
  const auto top = static_cast<int64_t>(std::nearbyint((rh - s) / 2.0)),
             left = static_cast<int64_t>(std::nearbyint((rw - s) / 2.0));
  return resized.narrow(2, top, s).narrow(3, left, s).contiguous();
}

}  // namespace moco::lincls
