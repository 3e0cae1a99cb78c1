#include "data/augment_params.h"

#include <fmt/format.h>

#include <iterator>
#include <type_traits>

namespace moco::data {
namespace {

using A = AugmentOptions;
using G = ParamGroup;
using E = EvalRule;

// The table. A new augmentation parameter is a member of AugmentOptions, a row here and its op; the
// config's key, its --help line, its range check (config and augment_batch) and the linear
// protocol's value for it all follow from the row.
constexpr AugmentParam kAugmentParams[] = {
    {"data.dct_scaling", &A::dct_scaling, Range::any(),
     "imagefolder, hdf5: decode a JPEG at the smallest of libjpeg-turbo's DCT scales (1/8..1) that still leaves "
     "each crop at least data.image_size px, before the antialiased resize (faster only on photos several times "
     "the view size, and other pixels than PIL's full-size decode: docs/data.md; the paper configs set false)",
     G::kPipeline, E::kKept},
    {"data.transforms", &A::transforms, Range::any(),
     "v1, v2, v3 and the evaluation view of imagefolder/hdf5: pil (torchvision's transforms on a PIL image, as the "
     "official main_moco.py and main_lincls.py: Pillow's bilinear resize, ImageEnhance, hue on uint8 HSV, "
     "ImageFilter.GaussianBlur; bit for bit) or tensor (torchvision's functions on a uint8 tensor: a sampled "
     "Gaussian blur, hue in float; docs/data.md)",
     G::kPipeline, E::kKept},
    {"data.image_size", &A::out_size, Range::closed(1, 65536), "side in pixels of the augmented crops", G::kPipeline,
     E::kKept},
    {"data.augmentation", &A::recipe, Range::any(),
     "simple (crop, flip, brightness/contrast jitter; batched, for the small greyscale sets), v1 (MoCo v1: crop, "
     "grayscale, colour jitter always, flip), v2 (MoCo v2 aug+: crop, colour jitter with data.jitter_prob, "
     "grayscale, Gaussian blur with data.blur_prob, flip) or v3 (MoCo v3's asymmetric pair: v2's steps, then a "
     "solarize before the flip; the first (query) view blurs with data.blur_prob and solarizes with "
     "data.solarize_prob, the second (key) view with data.key_blur_prob and data.key_solarize_prob); v1-v3 as "
     "data.transforms says",
     G::kPipeline, E::kProtocol},  // crop + flip: simple for images of one size, else v1
    {"data.crop_scale_min", &A::scale_min, Range::open_closed(0, 1),
     "smallest crop area of the random resized crop, as a fraction", G::kOps, E::kProtocol},  // lincls.crop_scale_min
    {"data.flip_prob", &A::flip_prob, Range::closed(0, 1), "probability of a horizontal flip", G::kOps,
     E::kProtocol},  // 0.5
    {"data.jitter_prob", &A::jitter_prob, Range::closed(0, 1),
     "probability of the colour jitter (simple: brightness/contrast; v2, v3: all four; v1 ignores it: always)", G::kOps,
     E::kOff},
    {"data.brightness", &A::brightness, Range::closed_open(0, 1), "brightness factor range 1 +- this", G::kOps,
     E::kOff},
    {"data.contrast", &A::contrast, Range::closed_open(0, 1), "contrast factor range 1 +- this", G::kOps, E::kOff},
    {"data.saturation", &A::saturation, Range::closed_open(0, 1), "v1-v3: saturation factor range 1 +- this", G::kOps,
     E::kOff},
    {"data.hue", &A::hue, Range::closed(0, 0.5),
     "v1-v3: hue shift range +- this (at most 0.5; 0.4 in v1, 0.1 in v2 and v3)", G::kOps, E::kOff},
    {"data.grayscale_prob", &A::grayscale_prob, Range::closed(0, 1),
     "v1-v3: probability of converting the view to greyscale", G::kOps, E::kOff},
    {"data.blur_prob", &A::blur_prob, Range::closed(0, 1),
     "probability of the Gaussian blur (v2: of both views; v3: of the first view, 1.0 in moco-v3)", G::kOps, E::kOff},
    {"data.key_blur_prob", &A::key_blur_prob, Range::closed(0, 1),
     "v3: probability of the second (key) view's Gaussian blur (0.1 in moco-v3)", G::kOps, E::kOff},
    {"data.solarize_prob", &A::solarize_prob, Range::closed(0, 1),
     "v3: probability of solarizing the first view (PIL's ImageOps.solarize: values from 128 up become 255 - v; "
     "after the blur; 0 in moco-v3)",
     G::kOps, E::kOff},
    {"data.key_solarize_prob", &A::key_solarize_prob, Range::closed(0, 1),
     "v3: probability of solarizing the second (key) view (0.2 in moco-v3)", G::kOps, E::kOff},
    {"data.blur_sigma", &A::blur_sigma, Range::sigma_pair(),
     "v2, v3: [min, max] of the blur's sigma in pixels (kernel 2*ceil(3 sigma)+1)", G::kOps, E::kKept},  // blur is off
    {"data.mean", &A::mean, Range::any(), "per-channel mean subtracted after scaling to [0,1]", G::kOps, E::kKept},
    {"data.std", &A::std, Range::any(), "per-channel std divided by after scaling to [0,1]", G::kOps, E::kKept},
};

template <typename T>
constexpr bool binds(const AugmentParam& param) {
  return std::holds_alternative<T A::*>(param.member);
}

// What the code below relies on, refused at compile time: every row states its evaluation rule; a
// row switched off binds a double; a positive one, or one checked as an interval, a number; a sigma
// pair a list.
constexpr bool rows_are_complete() {
  for (const AugmentParam& p : kAugmentParams) {
    const bool number = binds<double>(p) || binds<int64_t>(p);
    if (p.eval == EvalRule::kUnstated || (p.eval == EvalRule::kOff && !binds<double>(p)) ||
        (p.range.kind == Range::Kind::kInterval && !number) || (p.range.kind == Range::Kind::kPositive && !number) ||
        (p.range.kind == Range::Kind::kSigmaPair && !binds<std::vector<double>>(p)))
      return false;
  }
  return true;
}
static_assert(rows_are_complete(),
              "every augmentation row states its EvalRule (kOff on a double member) and a range that fits its type");

template <typename T>
std::string value_range_error(const Range& r, const T& v) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, int64_t>) {
    if (r.kind == Range::Kind::kPositive) return v > 0 ? "" : "must be positive";
    if (r.kind == Range::Kind::kInterval) {
      const auto x = static_cast<double>(v);
      const bool above = r.lo_open ? x > r.lo : x >= r.lo, below = r.hi_open ? x < r.hi : x <= r.hi;
      return above && below
                 ? ""
                 : fmt::format("must lie in {}{}, {}{}", r.lo_open ? '(' : '[', r.lo, r.hi, r.hi_open ? ')' : ']');
    }
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    if (r.kind == Range::Kind::kSigmaPair)
      return v.size() == 2 && v[0] > 0 && v[0] <= v[1] ? "" : "must be [min, max] with 0 < min <= max";
  }
  return "";
}

}  // namespace

const std::vector<AugmentParam>& augment_params() {
  static const std::vector<AugmentParam> rows(std::begin(kAugmentParams), std::end(kAugmentParams));
  return rows;
}

std::string range_error(const AugmentParam& param, const AugmentOptions& options) {
  return std::visit([&](auto member) { return value_range_error(param.range, options.*member); }, param.member);
}

AugmentOptions evaluation_options(const AugmentOptions& pretraining, const AugmentOptions& protocol) {
  AugmentOptions view = protocol;
  for (const AugmentParam& param : augment_params()) {
    std::visit(
        [&](auto member) {
          if (param.eval == EvalRule::kKept) view.*member = pretraining.*member;
          if constexpr (std::is_same_v<std::decay_t<decltype(view.*member)>, double>)
            if (param.eval == EvalRule::kOff) view.*member = 0.0;
        },
        param.member);
  }
  return view;
}

}  // namespace moco::data
