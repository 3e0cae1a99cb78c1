// The v1/v2/v3 augmentations: the random parameters follow the configured distributions, the
// operations do what they say on known pixels, and the loader's two views of a sample are two
// different augmentations of that sample's image. (Parity with torchvision itself:
// tests/parity/augment_parity.py, ctest data.augment_parity_torchvision.)
#include "data/augment.h"
#include "data/color_jitter.h"
#include "data/gaussian_blur.h"
#include "data/loader.h"
#include "data/pil_blur.h"
#include "data/pil_color.h"
#include "data/pil_resize.h"
#include "data/resize.h"
#include "data/synthetic.h"
#include "data/view_augment.h"
#include "data/view_params.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

namespace {

using namespace moco::data;

constexpr int kDraws = 20000;

AugmentOptions v2_options() {
  AugmentOptions o;
  o.recipe = Recipe::kV2;
  o.out_size = 32;
  o.mean = {0.485, 0.456, 0.406};
  o.std = {0.229, 0.224, 0.225};
  return o;
}

// moco-v3's main_moco.py: augmentation1 blurs always and never solarizes, augmentation2 blurs with
// p 0.1 and solarizes with p 0.2.
AugmentOptions v3_options() {
  AugmentOptions o = v2_options();
  o.recipe = Recipe::kV3;
  o.blur_prob = 1.0, o.solarize_prob = 0.0;
  o.key_blur_prob = 0.1, o.key_solarize_prob = 0.2;
  return o;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

// torchvision's RandomResizedCrop.get_params transcribed with another generator and the standard
// library's distributions: the area and ratio distributions ours must reproduce.
std::pair<double, double> reference_crop(std::mt19937& rng, int64_t height, int64_t width) {
  std::uniform_real_distribution<double> scale(0.2, 1.0), log_ratio(std::log(3.0 / 4.0), std::log(4.0 / 3.0));
  const double area = static_cast<double>(height * width);
  for (int i = 0; i < 10; ++i) {
    const double target = area * scale(rng), ratio = std::exp(log_ratio(rng));
    const double w = std::nearbyint(std::sqrt(target * ratio)), h = std::nearbyint(std::sqrt(target / ratio));
    if (w > 0 && w <= width && h > 0 && h <= height) return {w * h / area, w / h};
  }
  return {1.0, static_cast<double>(width) / static_cast<double>(height)};
}

TEST(ViewParamsTest, CropAreaAndRatioFollowRandomResizedCrop) {
  const AugmentOptions o = v2_options();
  const int64_t height = 375, width = 500;
  std::vector<double> areas, log_ratios, ref_areas, ref_log_ratios;
  std::mt19937 reference_rng(5);
  for (int i = 0; i < kDraws; ++i) {
    const CropBox b = draw_view_params(view_seed(1, 0, i, 0), height, width, o).box;
    ASSERT_TRUE(b.top >= 0 && b.left >= 0 && b.height > 0 && b.width > 0 && b.top + b.height <= height &&
                b.left + b.width <= width);
    const double area = static_cast<double>(b.height * b.width) / static_cast<double>(height * width);
    const double ratio = static_cast<double>(b.width) / static_cast<double>(b.height);
    // The box sides are rounded to whole pixels, so the bounds hold up to a pixel's worth.
    EXPECT_GE(area, 0.2 - 0.01);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(ratio, 3.0 / 4.0 - 0.01);
    EXPECT_LE(ratio, 4.0 / 3.0 + 0.01);
    areas.push_back(area);
    log_ratios.push_back(std::log(ratio));
    const auto [ra, rr] = reference_crop(reference_rng, height, width);
    ref_areas.push_back(ra);
    ref_log_ratios.push_back(std::log(rr));
  }
  // Quantiles within what 20000 draws allow (their standard error is below 0.005 here).
  for (double q : {0.05, 0.25, 0.5, 0.75, 0.95}) {
    EXPECT_NEAR(quantile(areas, q), quantile(ref_areas, q), 0.02) << "area quantile " << q;
    EXPECT_NEAR(quantile(log_ratios, q), quantile(ref_log_ratios, q), 0.02) << "log-ratio quantile " << q;
  }
  EXPECT_LT(quantile(areas, 0.0), 0.21);
  EXPECT_GT(quantile(areas, 1.0), 0.97);
}

TEST(ViewParamsTest, JitterFactorsAreUniformInTheirRanges) {
  AugmentOptions o = v2_options();
  o.brightness = 0.4, o.contrast = 0.3, o.saturation = 0.2, o.hue = 0.1;
  std::mt19937_64 rng(3);
  std::vector<double> b, c, s, h;
  for (int i = 0; i < kDraws; ++i) {
    const JitterParams p = draw_jitter(rng, o);
    b.push_back(p.brightness), c.push_back(p.contrast), s.push_back(p.saturation), h.push_back(p.hue);
  }
  auto check_uniform = [](const std::vector<double>& v, double lo, double hi, const char* what) {
    EXPECT_GE(*std::min_element(v.begin(), v.end()), lo) << what;
    EXPECT_LT(*std::max_element(v.begin(), v.end()), hi) << what;
    // Deciles of U(lo, hi) sit at lo + k/10 (hi - lo); 20000 draws put them within 1.5% of the range.
    for (int k = 1; k < 10; ++k)
      EXPECT_NEAR(quantile(v, k / 10.0), lo + k / 10.0 * (hi - lo), 0.015 * (hi - lo)) << what << " decile " << k;
  };
  check_uniform(b, 0.6, 1.4, "brightness");
  check_uniform(c, 0.7, 1.3, "contrast");
  check_uniform(s, 0.8, 1.2, "saturation");
  check_uniform(h, -0.1, 0.1, "hue");
}

TEST(ViewParamsTest, JitterOrderIsAUniformPermutation) {
  const AugmentOptions o = v2_options();
  std::mt19937_64 rng(4);
  std::map<std::array<int, 4>, int> counts;
  for (int i = 0; i < kDraws * 2; ++i) {
    const JitterParams p = draw_jitter(rng, o);
    std::array<int, 4> sorted = p.order;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted, (std::array<int, 4>{0, 1, 2, 3}));
    ++counts[p.order];
  }
  ASSERT_EQ(counts.size(), 24u);
  // Chi-square with 23 degrees of freedom: its 99.99th percentile is about 58.
  const double expected = kDraws * 2 / 24.0;
  double chi2 = 0;
  for (const auto& [order, n] : counts) chi2 += (n - expected) * (n - expected) / expected;
  EXPECT_LT(chi2, 58.0);
}

TEST(ViewParamsTest, GatesFireWithTheirProbabilities) {
  for (Recipe recipe : {Recipe::kV1, Recipe::kV2}) {
    AugmentOptions o = v2_options();
    o.recipe = recipe;
    o.jitter_prob = 0.8, o.grayscale_prob = 0.2, o.blur_prob = 0.5, o.flip_prob = 0.3;
    int jitter = 0, gray = 0, blur = 0, flip = 0;
    std::vector<double> sigmas;
    for (int i = 0; i < kDraws; ++i) {
      const ViewParams p = draw_view_params(view_seed(9, 1, i, 1), 64, 48, o);
      jitter += p.jitter, gray += p.grayscale, blur += p.blur, flip += p.flip;
      sigmas.push_back(p.sigma);
    }
    // Five standard errors of a proportion from 20000 draws: at most 0.018.
    const double n = kDraws;
    EXPECT_NEAR(jitter / n, recipe == Recipe::kV1 ? 1.0 : 0.8, 0.015) << recipe_name(recipe);
    EXPECT_NEAR(gray / n, 0.2, 0.015) << recipe_name(recipe);
    EXPECT_NEAR(blur / n, recipe == Recipe::kV1 ? 0.0 : 0.5, 0.018) << recipe_name(recipe);
    EXPECT_NEAR(flip / n, 0.3, 0.017) << recipe_name(recipe);
    EXPECT_GE(*std::min_element(sigmas.begin(), sigmas.end()), 0.1);
    EXPECT_LT(*std::max_element(sigmas.begin(), sigmas.end()), 2.0);
    EXPECT_NEAR(quantile(sigmas, 0.5), 1.05, 0.03);
  }
}

// Each of v3's views draws its blur and solarize gates with its own probabilities; the other gates
// and the v2 views' blur are as the options say whichever the view.
TEST(ViewParamsTest, V3ViewsBlurAndSolarizeWithTheirOwnProbabilities) {
  const double want_blur[2] = {1.0, 0.1}, want_solarize[2] = {0.0, 0.2};
  for (int view = 0; view < 2; ++view) {
    const AugmentOptions o = options_of_view(v3_options(), view);
    int jitter = 0, gray = 0, blur = 0, solarize = 0, flip = 0;
    for (int i = 0; i < kDraws; ++i) {
      const ViewParams p = draw_view_params(view_seed(9, 1, i, view), 64, 48, o);
      jitter += p.jitter, gray += p.grayscale, blur += p.blur, solarize += p.solarize, flip += p.flip;
    }
    const double n = kDraws;
    EXPECT_NEAR(blur / n, want_blur[view], 0.012) << "view " << view;
    EXPECT_NEAR(solarize / n, want_solarize[view], 0.015) << "view " << view;
    EXPECT_NEAR(jitter / n, 0.8, 0.015) << "view " << view;
    EXPECT_NEAR(gray / n, 0.2, 0.015) << "view " << view;
    EXPECT_NEAR(flip / n, 0.5, 0.018) << "view " << view;
  }
  EXPECT_EQ(options_of_view(v3_options(), 0).blur_prob, 1.0);
  EXPECT_EQ(options_of_view(v3_options(), 0).solarize_prob, 0.0);
  // v2 blurs both views alike and never solarizes, whatever the v3 keys say.
  AugmentOptions v2 = v3_options();
  v2.recipe = Recipe::kV2;
  v2.solarize_prob = 1.0;
  for (int view = 0; view < 2; ++view) {
    const ViewParams p = draw_view_params(view_seed(9, 1, 0, view), 64, 48, options_of_view(v2, view));
    EXPECT_TRUE(p.blur) << "view " << view;
    EXPECT_FALSE(p.solarize) << "view " << view;
  }
}

TEST(ViewParamsTest, AViewIsAFunctionOfItsSeed) {
  const AugmentOptions o = v2_options();
  const ViewParams a = draw_view_params(17, 100, 80, o), b = draw_view_params(17, 100, 80, o);
  EXPECT_EQ(a.box.top, b.box.top);
  EXPECT_EQ(a.box.width, b.box.width);
  EXPECT_EQ(a.jitter_params.order, b.jitter_params.order);
  EXPECT_EQ(a.jitter_params.hue, b.jitter_params.hue);
  EXPECT_EQ(a.sigma, b.sigma);
  const AugmentOptions v3 = options_of_view(v3_options(), 1);
  int same = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const ViewParams c = draw_view_params(seed, 100, 80, v3), d = draw_view_params(seed, 100, 80, v3);
    same += c.solarize == d.solarize && c.blur == d.blur && c.flip == d.flip && c.box.left == d.box.left;
  }
  EXPECT_EQ(same, 50);
}

Image ramp(int64_t c, int64_t h, int64_t w) {
  Image x(c, h, w);
  for (size_t i = 0; i < x.pixels.size(); ++i) x.pixels[i] = static_cast<uint8_t>((i * 37) % 256);
  return x;
}

TEST(ImageOpsTest, ResizeToTheSameSizeIsTheIdentity) {
  const Image x = ramp(3, 17, 23);
  EXPECT_EQ(resized_crop(x, {0, 0, 17, 23}, 17, 23).pixels, x.pixels);
}

TEST(ImageOpsTest, ShrinkingSeesEverySourcePixel) {
  // A single bright pixel shrunk 4x: plain bilinear samples only pixels 1, 2, 5, 6 of each axis and
  // loses a dot at (3, 3); the antialiased filter spans the whole 4-pixel footprint and keeps it.
  Image x(1, 8, 8);
  x.pixels[3 * 8 + 3] = 255;
  const Image small = resized_crop(x, {0, 0, 8, 8}, 2, 2);
  EXPECT_GT(small.pixels[0], 0);
}

TEST(ImageOpsTest, ColourOpsOnKnownPixels) {
  Image x(3, 1, 2);
  x.pixels = {100, 250, 50, 10, 0, 255};  // planar: R = (100, 250), G = (50, 10), B = (0, 255)
  Image b = x;
  adjust_brightness(b, 1.5);
  EXPECT_EQ(b.pixels, (std::vector<uint8_t>{150, 255, 75, 15, 0, 255}));  // clamped at 255
  Image g = x;
  to_grayscale(g);
  // 0.2989*100 + 0.587*50 + 0.114*0 = 59.24 -> 59; 0.2989*250 + 0.587*10 + 0.114*255 = 109.665 -> 109 (truncated)
  EXPECT_EQ(g.pixels, (std::vector<uint8_t>{59, 109, 59, 109, 59, 109}));
  Image s = x;
  adjust_saturation(s, 0.0);
  EXPECT_EQ(s.pixels, g.pixels);
  Image h = x;
  adjust_hue(h, 0.5);  // half a turn: the complementary hue, same value and saturation
  // (100, 50, 0) -> (0, 50, 100), each within the one level float32 and truncation may cost.
  EXPECT_NEAR(h.pixels[0], 0, 1);
  EXPECT_NEAR(h.pixels[2], 50, 1);
  EXPECT_NEAR(h.pixels[4], 100, 1);
}

TEST(ImageOpsTest, BlurKeepsAFlatImageAndSpreadsAnImpulse) {
  Image flat(1, 9, 9);
  std::fill(flat.pixels.begin(), flat.pixels.end(), uint8_t{77});
  gaussian_blur(flat, 1.5);
  for (uint8_t p : flat.pixels) EXPECT_EQ(p, 77);
  Image dot(1, 15, 15);
  dot.pixels[7 * 15 + 7] = 255;
  gaussian_blur(dot, 1.0);
  EXPECT_LT(dot.pixels[7 * 15 + 7], 255);
  EXPECT_GT(dot.pixels[7 * 15 + 8], 0);
  EXPECT_EQ(dot.pixels[7 * 15 + 8], dot.pixels[7 * 15 + 6]);  // symmetric
  EXPECT_EQ(blur_kernel_size(2.0, 224, 224), 13);
  EXPECT_EQ(blur_kernel_size(0.1, 224, 224), 3);
  EXPECT_EQ(blur_kernel_size(2.0, 4, 9), 7);  // capped: reflect padding needs pad < side
}

// Both implementations, each against the other's views too: the batch takes options.transforms.
TEST(ViewAugmentTest, BatchEqualsThePerSampleViews) {
  SyntheticDataset dataset(4, 3, 40, 36, 3, /*seed=*/2);
  const auto [images, labels] = dataset.get_batch({0, 1, 2, 3});
  std::vector<uint64_t> seeds;
  for (int64_t i = 0; i < 4; ++i) seeds.push_back(view_seed(5, 0, i, 0));
  for (Transforms transforms : {Transforms::kPil, Transforms::kTensor}) {
    AugmentOptions o = v2_options();
    o.transforms = transforms;
    const Transforms other = transforms == Transforms::kPil ? Transforms::kTensor : Transforms::kPil;
    const torch::Tensor out = augment_batch(images, o, seeds);
    ASSERT_EQ(out.sizes(), (std::vector<int64_t>{4, 3, 32, 32}));
    int equal_to_other = 0;
    for (int64_t i = 0; i < 4; ++i) {
      Image x(3, 40, 36);
      std::copy(images[i].data_ptr<uint8_t>(), images[i].data_ptr<uint8_t>() + x.pixels.size(), x.pixels.begin());
      const ViewParams p = draw_view_params(seeds[static_cast<size_t>(i)], 40, 36, o);
      const Image view = augment_view(x, p, Recipe::kV2, transforms, 32);
      std::vector<float> expected(view.pixels.size());
      normalize_into(view, o.mean, o.std, expected.data());
      EXPECT_TRUE(torch::equal(out[i], torch::from_blob(expected.data(), {3, 32, 32}, torch::kFloat)))
          << "sample " << i;
      equal_to_other += augment_view(x, p, Recipe::kV2, other, 32).pixels == view.pixels;
    }
    EXPECT_EQ(equal_to_other, 0) << "the two implementations should differ on these views";
  }
}

// v3's view: v2's steps, then the solarize after the blur, then the flip; v2 leaves a solarize
// gate alone. Each step as pil_*() does it on the PIL path.
TEST(ViewAugmentTest, V3SolarizesAfterTheBlurAndBeforeTheFlip) {
  SyntheticDataset dataset(1, 3, 40, 36, 3, /*seed=*/6);
  const torch::Tensor image = dataset.get(0).image;
  Image x(3, 40, 36);
  std::copy(image.data_ptr<uint8_t>(), image.data_ptr<uint8_t>() + x.pixels.size(), x.pixels.begin());
  ViewParams p = draw_view_params(3, 40, 36, v3_options());
  p.jitter = false, p.grayscale = false, p.blur = true, p.sigma = 1.5, p.solarize = true, p.flip = true;
  Image blurred_then_solarized = pil_resized_crop(x, p.box, 32, 32);
  pil_gaussian_blur(blurred_then_solarized, p.sigma);
  pil::solarize(blurred_then_solarized);
  hflip(blurred_then_solarized);
  Image solarized_then_blurred = pil_resized_crop(x, p.box, 32, 32);
  pil::solarize(solarized_then_blurred);
  pil_gaussian_blur(solarized_then_blurred, p.sigma);
  hflip(solarized_then_blurred);
  ASSERT_NE(blurred_then_solarized.pixels, solarized_then_blurred.pixels);
  EXPECT_EQ(augment_view(x, p, Recipe::kV3, Transforms::kPil, 32).pixels, blurred_then_solarized.pixels);
  ViewParams v2 = p;
  v2.solarize = false;
  EXPECT_EQ(augment_view(x, p, Recipe::kV2, Transforms::kPil, 32).pixels,
            augment_view(x, v2, Recipe::kV3, Transforms::kPil, 32).pixels);
}

// v1's and v2's views, pinned so that a new recipe beside them cannot move their draws or pixels:
// FNV-1a of the normalised floats of both views of 6 images, per recipe and implementation, as main
// at 82c33ce makes them. (v3's solarize gate is drawn after every other, so theirs stay in place.)
uint64_t fnv1a(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  const auto* bytes = static_cast<const uint8_t*>(c.data_ptr());
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < static_cast<size_t>(c.nbytes()); ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
  return h;
}

TEST(ViewAugmentTest, V1AndV2ViewsAreAsPinned) {
  SyntheticDataset dataset(6, 3, 40, 36, 3, /*seed=*/4);
  const auto [images, labels] = dataset.get_batch({0, 1, 2, 3, 4, 5});
  const std::map<std::pair<Recipe, Transforms>, uint64_t> pinned = {
      {{Recipe::kV1, Transforms::kPil}, 11930760530507924834ULL},
      {{Recipe::kV1, Transforms::kTensor}, 10465734092424252042ULL},
      {{Recipe::kV2, Transforms::kPil}, 2016704168874869891ULL},
      {{Recipe::kV2, Transforms::kTensor}, 2518304778389318671ULL},
  };
  for (const auto& [which, want] : pinned) {
    AugmentOptions o = v2_options();
    o.recipe = which.first;
    o.transforms = which.second;
    std::vector<uint64_t> query_seeds, key_seeds;
    for (int64_t i = 0; i < 6; ++i) {
      query_seeds.push_back(view_seed(21, 3, i, 0));
      key_seeds.push_back(view_seed(21, 3, i, 1));
    }
    const torch::Tensor views =
        torch::cat({augment_batch(images, o, query_seeds), augment_batch(images, o, key_seeds)});
    EXPECT_EQ(fnv1a(views), want) << recipe_name(which.first)
                                  << (which.second == Transforms::kPil ? " pil" : " tensor");
  }
}

TEST(ViewAugmentTest, TheTwoViewsOfASampleComeFromItsImageAndDiffer) {
  for (Recipe recipe : {Recipe::kV1, Recipe::kV2, Recipe::kV3}) {
    auto dataset = std::make_shared<SyntheticDataset>(24, 3, 40, 36, 3, /*seed=*/8);
    AugmentOptions o = recipe == Recipe::kV3 ? v3_options() : v2_options();
    o.recipe = recipe;
    LoaderOptions lo;
    lo.batch_size = 8;
    lo.seed = 13;
    lo.workers = 2;
    TwoViewLoader loader(dataset, o, lo);
    loader.start_epoch(1);
    while (auto batch = loader.next()) {
      for (int64_t i = 0; i < batch->indices.size(0); ++i) {
        const int64_t index = batch->indices[i].item<int64_t>();
        // Each view is exactly the augmentation of dataset image `index` under its own seed...
        const torch::Tensor image = dataset->get(index).image.unsqueeze(0);
        // (v3: the query view moco-v3's first, the key view its second)
        const torch::Tensor query = augment_batch(image, options_of_view(o, 0), {view_seed(13, 1, index, 0)})[0];
        const torch::Tensor key = augment_batch(image, options_of_view(o, 1), {view_seed(13, 1, index, 1)})[0];
        EXPECT_TRUE(torch::equal(batch->query[i], query)) << recipe_name(recipe) << " " << index;
        EXPECT_TRUE(torch::equal(batch->key[i], key)) << recipe_name(recipe) << " " << index;
        // ...and the two differ.
        EXPECT_GT((batch->query[i] - batch->key[i]).abs().mean().item<double>(), 0.01) << index;
      }
    }
  }
}

}  // namespace
