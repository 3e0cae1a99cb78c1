#include "data/augment.h"

#include "data/augment_params.h"
#include "data/hash.h"
#include "data/view_augment.h"
#include "data/view_params.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

namespace moco::data {
namespace {

namespace F = torch::nn::functional;

// One sample's random choices. Everything is drawn from the sample's own generator in a fixed
// order, so the view depends only on its seed.
struct SampleParams {
  CropBox box;
  bool flip = false;
  double brightness = 1.0, contrast = 1.0;
};

void check_images(const torch::Tensor& images, const char* who) {
  if (!images.defined() || images.dim() != 4 || images.scalar_type() != torch::kUInt8) {
    throw std::invalid_argument(std::string(who) + ": images must be uint8 [n, C, H, W]");
  }
}

void check_options(const AugmentOptions& o) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("augment_batch: " + what);
  };
  // Each keyed option's range, as the config checks it ("data.hue must lie in [0, 0.5]").
  for (const AugmentParam& param : augment_params()) {
    const std::string what = range_error(param, o);
    require(what.empty(), std::string(param.key) + " " + what);
  }
  require(o.scale_min <= o.scale_max, "need scale_min <= scale_max");
  require(o.ratio_min > 0 && o.ratio_min <= o.ratio_max, "need 0 < ratio_min <= ratio_max");
}

void check_view_type(torch::Dtype view_type, Recipe recipe) {
  if (view_type != torch::kFloat && view_type != torch::kUInt8)
    throw std::invalid_argument("augment_batch: views are float or uint8");
  // The simple recipe resamples and jitters the whole batch in float: it has no uint8 views to give.
  if (view_type == torch::kUInt8 && recipe == Recipe::kSimple)
    throw std::invalid_argument("augment_batch: uint8 views need the v1, v2 or v3 augmentation, not simple");
}

SampleParams draw_params(uint64_t seed, int64_t height, int64_t width, const AugmentOptions& o) {
  std::mt19937_64 rng(seed);
  SampleParams p;
  p.box = random_resized_crop(rng, height, width, o);
  p.flip = detail::uniform01(rng) < o.flip_prob;
  if (detail::uniform01(rng) < o.jitter_prob) {
    // torchvision clamps the lower end at zero: a negative factor would invert the image.
    p.brightness = detail::uniform(rng, std::max(0.0, 1 - o.brightness), 1 + o.brightness);
    p.contrast = detail::uniform(rng, std::max(0.0, 1 - o.contrast), 1 + o.contrast);
  }
  return p;
}

// Row i maps output coordinates to input coordinates, both normalised to [-1, 1] with
// align_corners=false (-1 and 1 are the outer pixel edges), with the crop and flip folded in.
torch::Tensor affine_thetas(const std::vector<SampleParams>& params, int64_t height, int64_t width) {
  const auto n = static_cast<int64_t>(params.size());
  torch::Tensor theta = torch::zeros({n, 2, 3}, torch::kFloat);
  auto t = theta.accessor<float, 3>();
  for (int64_t i = 0; i < n; ++i) {
    const CropBox& b = params[i].box;
    const double sx = static_cast<double>(b.width) / static_cast<double>(width);
    const double sy = static_cast<double>(b.height) / static_cast<double>(height);
    t[i][0][0] = static_cast<float>(params[i].flip ? -sx : sx);
    t[i][0][2] = static_cast<float>((2.0 * b.left + b.width) / width - 1.0);
    t[i][1][1] = static_cast<float>(sy);
    t[i][1][2] = static_cast<float>((2.0 * b.top + b.height) / height - 1.0);
  }
  return theta;
}

torch::Tensor per_sample(const std::vector<SampleParams>& params, double scale, double SampleParams::*field) {
  std::vector<float> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(static_cast<float>(scale * (p.*field)));
  return torch::tensor(values, torch::kFloat).view({-1, 1, 1, 1});
}

// The per-sample mean of the image's greyscale version, torchvision's contrast anchor.
torch::Tensor mean_gray(const torch::Tensor& x) {
  if (x.size(1) == 3) {
    const torch::Tensor gray = 0.2989 * x.select(1, 0) + 0.587 * x.select(1, 1) + 0.114 * x.select(1, 2);
    return gray.mean({1, 2}).view({-1, 1, 1, 1});
  }
  return x.mean({1, 2, 3}).view({-1, 1, 1, 1});
}

// Takes pixel values in [0, 255] and returns [0, 1]: the 1/255 rides on the brightness factor, and
// every step works in place, because at 224x224 each extra pass over the batch costs as much as
// the resampling itself.
void to_unit_and_jitter(torch::Tensor& x, const std::vector<SampleParams>& params) {
  x.mul_(per_sample(params, 1.0 / 255.0, &SampleParams::brightness)).clamp_(0, 1);
  const bool any_contrast =
      std::any_of(params.begin(), params.end(), [](const SampleParams& p) { return p.contrast != 1.0; });
  if (!any_contrast) return;
  // torchvision clamps after each adjustment, so contrast sees the clamped brightness result.
  // Blending as c*x + (1-c)*m keeps an unjittered sample (c = 1) exact.
  const torch::Tensor c = per_sample(params, 1.0, &SampleParams::contrast);
  const torch::Tensor anchor = mean_gray(x).mul_(1 - c);
  x.mul_(c).add_(anchor).clamp_(0, 1);
}

torch::Tensor channel_values(const std::vector<double>& values, int64_t channels, const char* name) {
  const auto count = static_cast<int64_t>(values.size());
  if (count != 1 && count != channels) {
    throw std::invalid_argument(std::string("augment: ") + name + " has " + std::to_string(count) + " values for " +
                                std::to_string(channels) + " channels (need 1 or " + std::to_string(channels) + ")");
  }
  std::vector<float> as_float(values.begin(), values.end());
  return torch::tensor(as_float, torch::kFloat).view({1, -1, 1, 1});
}

// In place: x is always a fresh tensor owned by the caller.
torch::Tensor normalize_(torch::Tensor x, const AugmentOptions& o) {
  const torch::Tensor mean = channel_values(o.mean, x.size(1), "mean");
  const torch::Tensor std = channel_values(o.std, x.size(1), "std");
  if ((std == 0).any().item<bool>()) throw std::invalid_argument("augment: std must be non-zero");
  return x.sub_(mean).div_(std);
}

// v1/v2/v3: one sample at a time on uint8 pixels, as torchvision; the views are written straight
// into the batch, as `view_type` (kFloat normalised, kUInt8 pixels).
torch::Tensor augment_per_sample(const torch::Tensor& images, const AugmentOptions& o,
                                 const std::vector<uint64_t>& seeds, torch::Dtype view_type) {
  const int64_t n = images.size(0), channels = images.size(1), height = images.size(2), width = images.size(3);
  channel_values(o.mean, channels, "mean");  // the count check, before any work
  channel_values(o.std, channels, "std");
  for (double s : o.std)
    if (s == 0) throw std::invalid_argument("augment: std must be non-zero");
  const torch::Tensor input = images.contiguous();
  torch::Tensor out = torch::empty({n, channels, o.out_size, o.out_size}, view_type);
  const int64_t in_bytes = channels * height * width;
  Image image(channels, height, width);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* src = input.data_ptr<uint8_t>() + i * in_bytes;
    std::copy(src, src + in_bytes, image.pixels.begin());
    const ViewParams params = draw_view_params(seeds[static_cast<size_t>(i)], height, width, o);
    write_view(augment_view(image, params, o.recipe, o.transforms, o.out_size), o.mean, o.std, view_out(out, i));
  }
  return out;
}

}  // namespace

Recipe parse_recipe(const std::string& name) {
  if (name == "simple") return Recipe::kSimple;
  if (name == "v1") return Recipe::kV1;
  if (name == "v2") return Recipe::kV2;
  if (name == "v3") return Recipe::kV3;
  throw std::invalid_argument("augmentation must be simple, v1, v2 or v3, not '" + name + "'");
}

const char* recipe_name(Recipe recipe) {
  switch (recipe) {
    case Recipe::kV1:
      return "v1";
    case Recipe::kV2:
      return "v2";
    case Recipe::kV3:
      return "v3";
    default:
      return "simple";
  }
}

torch::Tensor augment_batch(const torch::Tensor& images, const AugmentOptions& options,
                            const std::vector<uint64_t>& sample_seeds, torch::Dtype view_type) {
  torch::NoGradGuard no_grad;
  check_images(images, "augment_batch");
  check_options(options);
  check_view_type(view_type, options.recipe);
  const int64_t n = images.size(0), channels = images.size(1), height = images.size(2), width = images.size(3);
  if (static_cast<int64_t>(sample_seeds.size()) != n) {
    throw std::invalid_argument("augment_batch: " + std::to_string(sample_seeds.size()) + " seeds for " +
                                std::to_string(n) + " images");
  }
  if (n == 0) return torch::empty({0, channels, options.out_size, options.out_size}, view_type);
  if (height == 0 || width == 0) throw std::invalid_argument("augment_batch: images have zero height or width");
  if (options.recipe != Recipe::kSimple) return augment_per_sample(images, options, sample_seeds, view_type);

  std::vector<SampleParams> params;
  params.reserve(sample_seeds.size());
  for (uint64_t seed : sample_seeds) params.push_back(draw_params(seed, height, width, options));

  // Resampling is linear, so it runs on raw 0..255 values and the 1/255 joins the brightness factor.
  const torch::Tensor input = images.to(torch::kFloat);
  const torch::Tensor grid =
      F::affine_grid(affine_thetas(params, height, width), {n, channels, options.out_size, options.out_size},
                     /*align_corners=*/false);
  // Border padding: when a small crop is enlarged, edge samples fall half a pixel outside the box
  // and must not blend with black.
  torch::Tensor views = F::grid_sample(
      input, grid, F::GridSampleFuncOptions().mode(torch::kBilinear).padding_mode(torch::kBorder).align_corners(false));
  to_unit_and_jitter(views, params);
  return normalize_(std::move(views), options);
}

uint64_t view_seed(uint64_t seed, int64_t epoch, int64_t index, int view) {
  uint64_t h = detail::mix64(seed);
  h = detail::hash_combine(h, static_cast<uint64_t>(epoch));
  h = detail::hash_combine(h, static_cast<uint64_t>(index));
  return detail::hash_combine(h, static_cast<uint64_t>(view));
}

AugmentOptions options_of_view(const AugmentOptions& options, int view) {
  AugmentOptions o = options;
  if (options.recipe == Recipe::kV3 && view == 1) {
    o.blur_prob = options.key_blur_prob;
    o.solarize_prob = options.key_solarize_prob;
  }
  return o;
}

torch::Tensor normalize_batch(const torch::Tensor& images, const AugmentOptions& options) {
  torch::NoGradGuard no_grad;
  check_images(images, "normalize_batch");
  return normalize_(images.to(torch::kFloat).div_(255.0), options);
}

}  // namespace moco::data
