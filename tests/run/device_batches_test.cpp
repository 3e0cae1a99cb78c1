// uint8 views normalised on the device: the loader's uint8 pixels, normalised by run::PixelNormalizer,
// equal its normalised floats bit for bit (v1, v2, v3, encoded JPEGs); run::DeviceBatches' lookahead
// hands out the loader's batches in order, drops its staged batch at start_epoch, and ends each epoch
// with nullopt. All on the CPU: the CUDA part (side stream, event, recordStream) needs a GPU.
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "data/view_augment.h"
#include "failing_dataset.h"
#include "image_files.h"
#include "run/device_batches.h"
#include "train/training_run.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

// Named, not anonymous: the unity build puts other test files' helpers (drain, loader_options) in
// this translation unit.
namespace uint8_views_test {

using moco::data::AugmentOptions;
using moco::data::Dataset;
using moco::data::LoaderOptions;
using moco::data::Recipe;
using moco::data::TwoViewBatch;
using moco::data::TwoViewLoader;
using moco::run::DeviceBatches;
using moco::run::PixelNormalizer;

const std::vector<double> kMean{0.485, 0.456, 0.406}, kStd{0.229, 0.224, 0.225};

// Bit for bit: the float32 patterns, so that -0.0 against 0.0 or one ulp would fail.
void expect_same_bits(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.scalar_type(), torch::kFloat) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(torch::equal(a.contiguous().view(torch::kInt32), b.contiguous().view(torch::kInt32))) << what;
}

void expect_same_batch(const TwoViewBatch& a, const TwoViewBatch& b, const std::string& what) {
  EXPECT_TRUE(torch::equal(a.indices, b.indices)) << what;
  EXPECT_TRUE(torch::equal(a.labels, b.labels)) << what;
  expect_same_bits(a.query, b.query, what + " query");
  ASSERT_EQ(a.key.defined(), b.key.defined()) << what;
  if (a.key.defined()) expect_same_bits(a.key, b.key, what + " key");
}

AugmentOptions augment_of(Recipe recipe, int64_t out_size = 10) {
  AugmentOptions a;
  a.recipe = recipe;
  a.out_size = out_size;
  a.blur_prob = 0.5;
  a.solarize_prob = 0.3;  // v3 solarizes both views at times
  a.mean = kMean;
  a.std = kStd;
  return a;
}

LoaderOptions loader_options(bool uint8_views) {
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  o.prefetch = 2;
  o.seed = 11;
  o.uint8_views = uint8_views;
  return o;
}

std::shared_ptr<const Dataset> synthetic(int64_t size = 30) {
  return std::make_shared<moco::data::SyntheticDataset>(size, 3, 14, 14, 5, /*seed=*/4);
}

// Every value a channel can hold, in every channel: the normaliser against normalize_into.
TEST(PixelNormalizerTest, EqualsNormalizeIntoForEveryPixelValue) {
  moco::data::Image image(3, 16, 16);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<uint8_t>((i * 7) % 256);
  for (const auto& [mean, std] :
       {std::pair{kMean, kStd}, std::pair{std::vector<double>{0.5}, std::vector<double>{0.3}}}) {
    std::vector<float> expected(image.pixels.size());
    moco::data::normalize_into(image, mean, std, expected.data());
    const torch::Tensor pixels =
        torch::from_blob(image.pixels.data(), {1, 3, 16, 16}, torch::kUInt8).clone().expand({2, 3, 16, 16});
    const torch::Tensor ours = PixelNormalizer(mean, std, 3, torch::kCPU)(pixels);
    const torch::Tensor theirs =
        torch::from_blob(expected.data(), {1, 3, 16, 16}, torch::kFloat).expand({2, 3, 16, 16});
    expect_same_bits(ours, theirs, "mean " + std::to_string(mean.size()) + " value(s)");
  }
  EXPECT_THROW(PixelNormalizer({0.5, 0.5}, {0.5, 0.5}, 3, torch::kCPU), std::invalid_argument);
  EXPECT_THROW(PixelNormalizer({0.5}, {0.5, 0.5, 0.5}, 3, torch::kCPU), std::invalid_argument);
}

// The uint8 loader's views, normalised, against the float loader's, batch by batch.
void expect_uint8_loader_equals_float_loader(std::shared_ptr<const Dataset> dataset, const AugmentOptions& augment,
                                             int64_t epoch) {
  TwoViewLoader floats(dataset, augment, loader_options(false));
  TwoViewLoader pixels(dataset, augment, loader_options(true));
  const PixelNormalizer normalize(augment.mean, augment.std, dataset->channels(), torch::kCPU);
  floats.start_epoch(epoch);
  pixels.start_epoch(epoch);
  int batches = 0;
  while (auto f = floats.next()) {
    auto p = pixels.next();
    ASSERT_TRUE(p.has_value());
    ASSERT_EQ(p->query.scalar_type(), torch::kUInt8);
    ASSERT_EQ(p->key.scalar_type(), torch::kUInt8);
    p->query = normalize(p->query);
    p->key = normalize(p->key);
    expect_same_batch(*p, *f, "batch " + std::to_string(batches++));
  }
  EXPECT_FALSE(pixels.next().has_value());
  EXPECT_EQ(batches, floats.batches_per_epoch());
  EXPECT_GT(batches, 0);
}

TEST(Uint8ViewsTest, NormalisedEqualTheFloatViewsForV1V2V3) {
  for (Recipe recipe : {Recipe::kV1, Recipe::kV2, Recipe::kV3}) {
    SCOPED_TRACE(moco::data::recipe_name(recipe));
    expect_uint8_loader_equals_float_loader(synthetic(), augment_of(recipe), 1);
  }
  AugmentOptions one_value = augment_of(Recipe::kV2);  // one mean and std for every channel
  one_value.mean = {0.5};
  one_value.std = {0.25};
  expect_uint8_loader_equals_float_loader(synthetic(), one_value, 0);
}

TEST(Uint8ViewsTest, NormalisedEqualTheFloatViewsOfEncodedImages) {
  namespace fs = std::filesystem;
  using namespace moco::test_images;
  const fs::path root = temp_dir("uint8_views");
  for (int i = 0; i < 10; ++i) {
    const int h = 30 + 5 * i, w = 60 - 3 * i;
    write(root / (i % 2 ? "odd" : "even") / (std::to_string(i) + ".jpg"), jpeg_bytes(pattern(h, w, i), h, w));
  }
  auto dataset = std::make_shared<moco::data::ImageFolderDataset>(moco::data::scan_image_folder(root.string()), 16,
                                                                  true, moco::data::Transforms::kPil);
  for (Recipe recipe : {Recipe::kV2, Recipe::kV3}) {
    SCOPED_TRACE(moco::data::recipe_name(recipe));
    expect_uint8_loader_equals_float_loader(dataset, augment_of(recipe, 16), 2);
  }
  fs::remove_all(root);
}

TEST(Uint8ViewsTest, SimpleRecipeRefused) {
  try {
    TwoViewLoader loader(synthetic(), augment_of(Recipe::kSimple), loader_options(true));
    FAIL() << "a uint8 loader of the simple recipe was built";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("simple"), std::string::npos) << e.what();
  }
  const torch::Tensor images = torch::zeros({2, 3, 14, 14}, torch::kUInt8);
  EXPECT_THROW(moco::data::augment_batch(images, augment_of(Recipe::kSimple), {1, 2}, torch::kUInt8),
               std::invalid_argument);
}

// The trainer's choice: uint8 views on CUDA for every recipe but simple; the CPU keeps floats.
TEST(Uint8ViewsTest, OnlyOnCudaAndNotForTheSimpleRecipe) {
  const torch::Device cuda(torch::kCUDA, 0);
  EXPECT_TRUE(moco::train::uint8_views(cuda, Recipe::kV2));
  EXPECT_TRUE(moco::train::uint8_views(cuda, Recipe::kV3));
  EXPECT_FALSE(moco::train::uint8_views(cuda, Recipe::kSimple));
  EXPECT_FALSE(moco::train::uint8_views(torch::kCPU, Recipe::kV2));
}

std::vector<TwoViewBatch> drain(TwoViewLoader& loader) {
  std::vector<TwoViewBatch> out;
  while (auto batch = loader.next()) out.push_back(std::move(*batch));
  return out;
}

// Epoch e from batch `first` on, as the float loader gives it.
std::vector<TwoViewBatch> float_epoch(const AugmentOptions& augment, int64_t epoch, int64_t first = 0) {
  TwoViewLoader loader(synthetic(), augment, loader_options(false));
  loader.start_epoch(epoch, first);
  return drain(loader);
}

void expect_next_are(DeviceBatches& batches, const std::vector<TwoViewBatch>& expected, size_t from, size_t count,
                     const std::string& what) {
  for (size_t j = from; j < from + count; ++j) {
    auto batch = batches.next();
    ASSERT_TRUE(batch.has_value()) << what << " batch " << j;
    expect_same_batch(*batch, expected[j], what + " batch " + std::to_string(j));
  }
}

// Two epochs through the lookahead, and a start_epoch mid-epoch (a resume) with a batch staged.
TEST(DeviceBatchesTest, Uint8LookaheadGivesTheFloatLoadersBatchesInOrder) {
  const AugmentOptions augment = augment_of(Recipe::kV2);
  TwoViewLoader loader(synthetic(), augment, loader_options(true));
  DeviceBatches batches(loader, augment, 3, torch::kCPU);
  EXPECT_EQ(batches.describe(), "uint8, one batch staged ahead, normalised on cpu");
  const auto epoch0 = float_epoch(augment, 0), epoch1 = float_epoch(augment, 1);
  ASSERT_EQ(epoch0.size(), 7u);  // 30 images in batches of 4

  batches.start_epoch(0);
  expect_next_are(batches, epoch0, 0, epoch0.size(), "epoch 0");
  EXPECT_FALSE(batches.next().has_value());
  EXPECT_FALSE(batches.next().has_value());  // stays at the end

  batches.start_epoch(1);
  expect_next_are(batches, epoch1, 0, 2, "epoch 1");  // batch 2 is now staged
  batches.start_epoch(1, 4);                          // dropped: the epoch goes on from batch 4
  expect_next_are(batches, epoch1, 4, epoch1.size() - 4, "epoch 1 from batch 4");
  EXPECT_FALSE(batches.next().has_value());

  batches.start_epoch(1);
  expect_next_are(batches, epoch1, 0, epoch1.size(), "epoch 1 again");
  EXPECT_FALSE(batches.next().has_value());
}

// On a GPU (tools/gpu_check.sh's gpu_tests run every test named Cuda*): the pinned uint8 views, copied
// on the side stream one batch ahead and normalised on cuda:0, equal the float loader's views bit for
// bit, in order, over two epochs. A matrix product on the compute stream after each batch keeps that
// stream busy while the next batch's copy is in flight.
TEST(CudaDeviceBatchesTest, SideStreamViewsEqualTheFloatLoadersBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: the side stream, its event and recordStream need one";
  const AugmentOptions augment = augment_of(Recipe::kV2);
  LoaderOptions options = loader_options(true);
  options.pin_memory = true;
  TwoViewLoader loader(synthetic(), augment, options);
  const torch::Device cuda(torch::kCUDA, 0);
  DeviceBatches batches(loader, augment, 3, cuda);
  EXPECT_EQ(batches.describe(), "uint8, copied on a side stream one batch ahead, normalised on cuda:0");
  const auto busy = torch::randn({2048, 2048}, torch::TensorOptions(cuda));
  for (const int64_t epoch : {0, 1}) {
    const auto expected = float_epoch(augment, epoch);
    batches.start_epoch(epoch);
    for (size_t j = 0; j < expected.size(); ++j) {
      auto batch = batches.next();
      ASSERT_TRUE(batch.has_value()) << "epoch " << epoch << " batch " << j;
      ASSERT_TRUE(batch->query.is_cuda() && batch->key.is_cuda());
      TwoViewBatch on_host = *batch;
      on_host.query = batch->query.cpu();
      on_host.key = batch->key.cpu();
      expect_same_batch(on_host, expected[j], "epoch " + std::to_string(epoch) + " batch " + std::to_string(j));
      torch::mm(busy, busy);
    }
    EXPECT_FALSE(batches.next().has_value());
  }
}

// Float views (the CPU's, the simple recipe's) pass through as the loader gives them; a query-only
// uint8 loader keeps its key undefined.
TEST(DeviceBatchesTest, FloatViewsPassThroughAndQueryOnlyStaysQueryOnly) {
  const AugmentOptions simple = augment_of(Recipe::kSimple);
  TwoViewLoader floats(synthetic(), simple, loader_options(false));
  DeviceBatches passing(floats, simple, 3, torch::kCPU);
  EXPECT_EQ(passing.describe(), "normalised floats on the host");
  const auto expected = float_epoch(simple, 3);
  passing.start_epoch(3);
  expect_next_are(passing, expected, 0, expected.size(), "simple");
  EXPECT_FALSE(passing.next().has_value());

  const AugmentOptions v1 = augment_of(Recipe::kV1);
  LoaderOptions query_only = loader_options(true);
  query_only.key_view = false;
  TwoViewLoader pixels(synthetic(), v1, query_only);
  DeviceBatches staged(pixels, v1, 3, torch::kCPU);
  staged.start_epoch(0);
  int64_t count = 0;
  while (auto batch = staged.next()) {
    EXPECT_EQ(batch->query.scalar_type(), torch::kFloat);
    EXPECT_FALSE(batch->key.defined());
    ++count;
  }
  EXPECT_EQ(count, pixels.batches_per_epoch());
}

// Batch 3 holds the broken sample 13: its error, met while staging it, is thrown when batch 3 is
// asked for (batch 2 is handed out first, as without the lookahead), and again until start_epoch.
TEST(DeviceBatchesTest, AStagedBatchsErrorIsThrownWhenItsBatchIsAskedFor) {
  const AugmentOptions augment = augment_of(Recipe::kV2);
  LoaderOptions options = loader_options(true);
  options.shuffle = false;
  TwoViewLoader loader(std::make_shared<moco::test_data::FailingDataset>(13, 3, 14), augment, options);
  DeviceBatches batches(loader, augment, 3, torch::kCPU);
  for (int epoch = 0; epoch < 2; ++epoch) {
    batches.start_epoch(epoch);
    for (int j = 0; j < 3; ++j) ASSERT_TRUE(batches.next().has_value()) << "epoch " << epoch << " batch " << j;
    try {
      batches.next();
      FAIL() << "expected the dataset's error";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "cannot read sample 13");
    }
    EXPECT_THROW(batches.next(), std::runtime_error);  // the epoch stays failed
  }
  batches.start_epoch(0, 4);  // past the broken batch: the error is gone with start_epoch
  EXPECT_TRUE(batches.next().has_value());
}

}  // namespace uint8_views_test
