// ImageFolder: the file list as torchvision builds it, JPEG/PNG decoding (and the JPEG's DCT
// scaling), broken files skipped and counted, and the loader's per-sample views of encoded images.
#include "data/encoded_views.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/resize.h"
#include "data/view_augment.h"
#include "data/view_params.h"
#include "image_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using namespace moco::data;
using namespace moco::test_images;

TEST(ImageFolderTest, ScanOrdersClassesAndFilesAsTorchvision) {
  const fs::path root = temp_dir("scan");
  const auto jpg = jpeg_bytes(pattern(8, 8, 0), 8, 8);
  // Classes sort by bytes ("B" < "a"), files by folder then name, extensions in any case, other
  // files and empty subfolders ignored, subfolders walked.
  for (const char* f : {"a/2.jpg", "a/10.JPG", "a/sub/0.png", "a/notes.txt", "B/x.jpeg", "c/z.jpg", "c/y.Png"})
    write(root / f, jpg);
  fs::create_directories(root / "c" / "empty");
  const ImageFolder folder = scan_image_folder(root.string());
  EXPECT_EQ(folder.classes, (std::vector<std::string>{"B", "a", "c"}));
  EXPECT_EQ(folder.files,
            (std::vector<std::string>{"B/x.jpeg", "a/10.JPG", "a/2.jpg", "a/sub/0.png", "c/y.Png", "c/z.jpg"}));
  EXPECT_EQ(folder.labels, (std::vector<int64_t>{0, 1, 1, 1, 2, 2}));
  fs::remove_all(root);
}

TEST(ImageFolderTest, MissingRootNoClassesAndEmptyClassAreFolderErrors) {
  const fs::path root = temp_dir("errors");
  EXPECT_THROW(scan_image_folder((root / "none").string()), FolderError);
  EXPECT_THROW(scan_image_folder(root.string()), FolderError);  // no class folder
  write(root / "a" / "1.jpg", jpeg_bytes(pattern(8, 8, 0), 8, 8));
  write(root / "b" / "readme.txt", {1, 2, 3});
  try {
    scan_image_folder(root.string());
    FAIL() << "an empty class was accepted";
  } catch (const FolderError& e) {
    EXPECT_NE(std::string(e.what()).find((root / "b").string()), std::string::npos) << e.what();
  }
  fs::remove_all(root);
}

TEST(ImageDecodeTest, PngDecodesExactlyAndDropsAlpha) {
  const int h = 5, w = 7;
  std::vector<uint8_t> rgba(static_cast<size_t>(h * w * 4));
  for (size_t i = 0; i < rgba.size(); ++i) rgba[i] = static_cast<uint8_t>(i * 13);
  const auto bytes = png_bytes(rgba, h, w, /*alpha=*/true);
  EXPECT_EQ(image_size(bytes.data(), bytes.size()).width, w);
  const Decoded d = decode_image(bytes.data(), bytes.size());
  ASSERT_EQ(d.image.channels, 3);
  ASSERT_EQ(d.image.height, h);
  ASSERT_EQ(d.image.width, w);
  for (int i = 0; i < h * w; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(d.image.channel(c)[i], rgba[static_cast<size_t>(i * 4 + c)]) << i << " " << c;
}

TEST(ImageDecodeTest, GrayJpegBecomesThreeEqualChannels) {
  std::vector<uint8_t> gray(64 * 48);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i % 251);
  const auto bytes = jpeg_bytes(gray, 48, 64, 1);
  const Decoded d = decode_image(bytes.data(), bytes.size());
  ASSERT_EQ(d.image.channels, 3);
  EXPECT_TRUE(std::equal(d.image.channel(0), d.image.channel(0) + d.image.plane(), d.image.channel(2)));
}

TEST(ImageDecodeTest, JpegDctScalingTakesTheSmallestScaleThatSuffices) {
  const auto bytes = jpeg_bytes(pattern(300, 400, 1), 300, 400);
  EXPECT_EQ(decode_image(bytes.data(), bytes.size()).image.width, 400);  // no minimum: full size
  const Decoded quarter = decode_image(bytes.data(), bytes.size(), 75, 100);
  EXPECT_EQ(quarter.image.width, 100);
  EXPECT_EQ(quarter.image.height, 75);
  EXPECT_DOUBLE_EQ(quarter.scale, 0.25);
  const Decoded three_eighths = decode_image(bytes.data(), bytes.size(), 75, 101);  // 1/4 would leave 100 < 101
  EXPECT_EQ(three_eighths.image.width, 150);
  EXPECT_EQ(three_eighths.image.height, 113);  // ceil(300 * 3 / 8)
}

TEST(ImageDecodeTest, BrokenBytesThrowDecodeError) {
  auto bytes = jpeg_bytes(pattern(64, 64, 2), 64, 64);
  const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 3));
  EXPECT_THROW(decode_image(cut.data(), cut.size()), DecodeError);
  const std::vector<uint8_t> text{'h', 'e', 'l', 'l', 'o'};
  EXPECT_THROW(decode_image(text.data(), text.size()), DecodeError);
  EXPECT_THROW(image_size(text.data(), text.size()), DecodeError);
  auto png = png_bytes(pattern(16, 16, 0), 16, 16, false);
  png.resize(png.size() / 2);
  EXPECT_THROW(decode_image(png.data(), png.size()), DecodeError);
  // A header damaged to claim 65000 x 65000 pixels: a DecodeError, not a 12 GiB allocation.
  for (size_t i = 2; i + 9 < bytes.size(); ++i) {
    if (bytes[i] == 0xFF && bytes[i + 1] == 0xC0) {  // SOF0: length (2), precision (1), height (2), width (2)
      bytes[i + 5] = bytes[i + 7] = 0xFD;
      bytes[i + 6] = bytes[i + 8] = 0xE8;
      break;
    }
  }
  EXPECT_THROW(image_size(bytes.data(), bytes.size()), DecodeError);
  EXPECT_THROW(decode_image(bytes.data(), bytes.size(), 224, 224), DecodeError);
}

TEST(ImageFolderTest, BrokenFilesAreSkippedCountedAndReplacedByTheNextImage) {
  const fs::path root = temp_dir("broken");
  write(root / "a" / "0.jpg", jpeg_bytes(pattern(40, 50, 0), 40, 50));
  auto cut = jpeg_bytes(pattern(40, 50, 1), 40, 50);
  cut.resize(cut.size() / 3);
  write(root / "a" / "1.jpg", cut);
  write(root / "b" / "2.png", png_bytes(pattern(30, 60, 2), 30, 60, false));
  ImageFolderDataset dataset(scan_image_folder(root.string()), 16, true, Transforms::kPil);
  ASSERT_EQ(dataset.size(), 3);
  const Example broken = dataset.get(1), next = dataset.get(2);
  EXPECT_TRUE(torch::equal(broken.image, next.image));  // the next image, not a black one
  EXPECT_EQ(broken.label, 1);
  EXPECT_GT(broken.image.to(torch::kFloat).std().item<double>(), 1.0);
  dataset.get(1);
  EXPECT_EQ(dataset.bad_files(), 1);  // counted once, however often it is met
  EXPECT_EQ(dataset.with_encoded(1, [](const uint8_t*, size_t, int64_t) {}), 2);
  fs::remove_all(root);
}

TEST(ImageFolderTest, EvalViewIsResizeThenCenterCrop) {
  const fs::path root = temp_dir("eval");
  write(root / "a" / "0.png", png_bytes(pattern(60, 90, 3), 60, 90, false));
  // Resize(32) of 60x90 is 32x48; CenterCrop(28) takes rows 2..29 and columns 10..37 of it, resized
  // as the dataset's transforms say (Pillow's and torchvision's tensor resize differ on this image).
  const auto bytes = png_bytes(pattern(60, 90, 3), 60, 90, false);
  const Image full = decode_image(bytes.data(), bytes.size()).image;
  EXPECT_NE(resized_crop(full, {0, 0, 60, 90}, 32, 48, Transforms::kPil).pixels,
            resized_crop(full, {0, 0, 60, 90}, 32, 48, Transforms::kTensor).pixels);
  for (Transforms transforms : {Transforms::kPil, Transforms::kTensor}) {
    ImageFolderDataset dataset(scan_image_folder(root.string()), 28, false, transforms);
    const Example e = dataset.get(0);
    EXPECT_EQ(e.image.sizes(), (std::vector<int64_t>{3, 28, 28}));
    const Image resized = resized_crop(full, {0, 0, 60, 90}, 32, 48, transforms);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 28; ++y)
        for (int64_t x = 0; x < 28; ++x)
          ASSERT_EQ(e.image[c][y][x].item<int64_t>(), resized.channel(c)[(y + 2) * 48 + x + 10])
              << c << " " << y << " " << x;
  }
  fs::remove_all(root);
}

// Without DCT scaling a training view of the bytes is augment_view of the full-size decode, with the
// options' transforms (the two implementations give other pixels here).
TEST(ImageFolderTest, EncodedTrainViewsAugmentTheDecodedImageWithTheirTransforms) {
  const auto bytes = jpeg_bytes(pattern(70, 90, 6), 70, 90);
  const Image decoded = decode_image(bytes.data(), bytes.size()).image;
  AugmentOptions o;
  o.recipe = Recipe::kV2;
  o.out_size = 32;
  o.blur_prob = 1.0;
  o.mean = {0.485, 0.456, 0.406};
  o.std = {0.229, 0.224, 0.225};
  std::vector<float> views[2];
  for (Transforms transforms : {Transforms::kPil, Transforms::kTensor}) {
    o.transforms = transforms;
    std::vector<float> ours(3 * 32 * 32), expected(ours.size());
    encoded_train_views(bytes.data(), bytes.size(), o, false, 17, ours.data(), nullptr, nullptr);
    normalize_into(augment_view(decoded, draw_view_params(17, 70, 90, o), o.recipe, transforms, 32), o.mean, o.std,
                   expected.data());
    EXPECT_EQ(ours, expected);
    views[transforms == Transforms::kPil ? 0 : 1] = ours;
  }
  EXPECT_NE(views[0], views[1]);
}

// v3's two views of the bytes: the query view drawn with the first view's options, the key view with
// the second's (blur p 1.0 / 0.1, solarize p 0 / 0.2), each augment_view of the one decode.
TEST(ImageFolderTest, EncodedV3ViewsAreDrawnWithTheirViewsOptions) {
  const auto bytes = jpeg_bytes(pattern(70, 90, 6), 70, 90);
  const Image decoded = decode_image(bytes.data(), bytes.size()).image;
  AugmentOptions o;
  o.recipe = Recipe::kV3;
  o.out_size = 32;
  o.blur_prob = 1.0, o.solarize_prob = 0.0, o.key_blur_prob = 0.0, o.key_solarize_prob = 1.0;
  o.mean = {0.485, 0.456, 0.406};
  o.std = {0.229, 0.224, 0.225};
  const uint64_t seeds[2] = {17, 18};
  std::vector<float> views[2] = {std::vector<float>(3 * 32 * 32), std::vector<float>(3 * 32 * 32)};
  encoded_train_views(bytes.data(), bytes.size(), o, false, seeds[0], views[0].data(), &seeds[1], views[1].data());
  for (int v = 0; v < 2; ++v) {
    const ViewParams p = draw_view_params(seeds[v], 70, 90, options_of_view(o, v));
    EXPECT_EQ(p.blur, v == 0);
    EXPECT_EQ(p.solarize, v == 1);
    std::vector<float> expected(views[v].size());
    normalize_into(augment_view(decoded, p, o.recipe, o.transforms, 32), o.mean, o.std, expected.data());
    EXPECT_EQ(views[v], expected) << "view " << v;
  }
}

TEST(ImageFolderTest, LoaderMakesTwoDifferentViewsPerSampleWithItsLabel) {
  const fs::path root = temp_dir("loader");
  for (int i = 0; i < 12; ++i) {
    const int h = 40 + 7 * i, w = 90 - 3 * i;
    const std::string cls = i % 2 ? "odd" : "even";
    if (i % 3 == 0)
      write(root / cls / (std::to_string(i) + ".png"), png_bytes(pattern(h, w, i), h, w, false));
    else
      write(root / cls / (std::to_string(i) + ".jpg"), jpeg_bytes(pattern(h, w, i), h, w));
  }
  auto dataset = std::make_shared<ImageFolderDataset>(scan_image_folder(root.string()), 24, true, Transforms::kPil);
  AugmentOptions o;
  o.recipe = Recipe::kV2;
  o.out_size = 24;
  o.mean = {0.485, 0.456, 0.406};
  o.std = {0.229, 0.224, 0.225};
  LoaderOptions lo;
  lo.batch_size = 4;
  lo.workers = 2;
  lo.seed = 5;
  TwoViewLoader loader(dataset, o, lo);
  loader.start_epoch(0);
  int batches = 0;
  while (auto batch = loader.next()) {
    ++batches;
    ASSERT_EQ(batch->query.sizes(), (std::vector<int64_t>{4, 3, 24, 24}));
    ASSERT_EQ(batch->key.sizes(), (std::vector<int64_t>{4, 3, 24, 24}));
    EXPECT_TRUE(torch::isfinite(batch->query).all().item<bool>());
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t index = batch->indices[i].item<int64_t>();
      EXPECT_EQ(batch->labels[i].item<int64_t>(), dataset->folder().labels[static_cast<size_t>(index)]);
      EXPECT_GT((batch->query[i] - batch->key[i]).abs().mean().item<double>(), 0.01);
    }
  }
  EXPECT_EQ(batches, 3);
  // DCT scaling changes the pixels only a little: the same views decoded at full size.
  const auto bytes = jpeg_bytes(pattern(300, 400, 4), 300, 400);
  std::vector<float> fast(3 * 24 * 24), full(3 * 24 * 24);
  encoded_train_views(bytes.data(), bytes.size(), o, true, 99, fast.data(), nullptr, nullptr);
  encoded_train_views(bytes.data(), bytes.size(), o, false, 99, full.data(), nullptr, nullptr);
  double diff = 0;
  for (size_t i = 0; i < fast.size(); ++i) diff += std::abs(fast[i] - full[i]);
  EXPECT_LT(diff / static_cast<double>(fast.size()), 0.1);  // in normalised units: under ~6 uint8 levels on average
  fs::remove_all(root);
}

}  // namespace
