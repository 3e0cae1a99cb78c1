#include "data/idx.h"
#include "thrown_message.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using moco::data::load_mnist_style;
using moco::data::read_idx_images;
using moco::data::read_idx_labels;
using moco::data::Split;

using Bytes = std::vector<uint8_t>;

void put_be32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

Bytes image_file(uint32_t n, uint32_t h, uint32_t w, uint8_t offset = 0) {
  Bytes out;
  put_be32(out, 0x00000803);
  put_be32(out, n);
  put_be32(out, h);
  put_be32(out, w);
  for (uint32_t i = 0; i < n * h * w; ++i) out.push_back(static_cast<uint8_t>(i * 7 + offset));
  return out;
}

Bytes label_file(uint32_t n) {
  Bytes out;
  put_be32(out, 0x00000801);
  put_be32(out, n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(i % 10));
  return out;
}

void write_plain(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_gz(const fs::path& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

using moco::test::error_of;

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ =
        fs::temp_directory_path() / ("moco_idx_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

torch::Tensor expected_images(uint32_t n, uint32_t h, uint32_t w) {
  Bytes file = image_file(n, h, w);
  return torch::tensor(Bytes(file.begin() + 16, file.end()), torch::kUInt8).view({int64_t{n}, int64_t{h}, int64_t{w}});
}

TEST_F(IdxTest, ReadsPlainImagesExactly) {
  write_plain(dir_ / "img", image_file(5, 3, 4));
  const torch::Tensor images = read_idx_images((dir_ / "img").string());
  EXPECT_EQ(images.scalar_type(), torch::kUInt8);
  ASSERT_EQ(images.sizes(), (std::vector<int64_t>{5, 3, 4}));
  EXPECT_TRUE(torch::equal(images, expected_images(5, 3, 4)));
}

TEST_F(IdxTest, ReadsGzipImagesExactly) {
  write_gz(dir_ / "img.gz", image_file(6, 5, 2));
  const torch::Tensor images = read_idx_images((dir_ / "img.gz").string());
  ASSERT_EQ(images.sizes(), (std::vector<int64_t>{6, 5, 2}));
  EXPECT_TRUE(torch::equal(images, expected_images(6, 5, 2)));
}

TEST_F(IdxTest, ReadsLabelsPlainAndGzip) {
  write_plain(dir_ / "lab", label_file(13));
  write_gz(dir_ / "lab.gz", label_file(13));
  for (const char* name : {"lab", "lab.gz"}) {
    const torch::Tensor labels = read_idx_labels((dir_ / name).string());
    EXPECT_EQ(labels.scalar_type(), torch::kInt64) << name;
    EXPECT_TRUE(torch::equal(labels, torch::arange(13, torch::kInt64).remainder(10))) << name;
  }
}

TEST_F(IdxTest, TruncatedPlainFileNamesPathAndSizes) {
  Bytes bytes = image_file(4, 3, 3);
  bytes.resize(bytes.size() - 5);
  const fs::path path = dir_ / "train-images-idx3-ubyte";
  write_plain(path, bytes);
  const std::string message = error_of([&] { read_idx_images(path.string()); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("truncated: expected 36 bytes of pixels, got 31"), std::string::npos) << message;
}

// A header is not trusted with memory: 16 bytes announcing 4096^3 pixels (64 GiB, within the
// reader's plausibility limit) are refused from the file's size before the payload is allocated,
// where allocating first failed with "cannot allocate" (found by fuzz/fuzz_idx.cpp).
TEST_F(IdxTest, HeaderClaimingMoreThanTheFileHoldsIsRefusedBeforeAllocating) {
  Bytes header;
  put_be32(header, 0x00000803);
  for (int d = 0; d < 3; ++d) put_be32(header, 4096);
  write_plain(dir_ / "img", header);
  std::string message = error_of([&] { read_idx_images((dir_ / "img").string()); });
  EXPECT_NE(message.find((dir_ / "img").string() + ": truncated: expected 68719476736 bytes of pixels, got 0"),
            std::string::npos)
      << message;
  write_gz(dir_ / "img.gz", header);
  message = error_of([&] { read_idx_images((dir_ / "img.gz").string()); });
  EXPECT_NE(message.find((dir_ / "img.gz").string() + ": implausible dimensions 4096 x 4096 x 4096 in the header"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("more than a gzip file of"), std::string::npos) << message;
}

TEST_F(IdxTest, TruncatedGzipPayloadThrows) {
  Bytes bytes = image_file(4, 3, 3);
  bytes.resize(bytes.size() - 1);
  const fs::path path = dir_ / "short.gz";
  write_gz(path, bytes);
  const std::string message = error_of([&] { read_idx_images(path.string()); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

TEST_F(IdxTest, CutGzipStreamThrows) {
  const fs::path whole = dir_ / "whole.gz", cut = dir_ / "cut.gz";
  write_gz(whole, image_file(50, 20, 20));
  std::ifstream in(whole, std::ios::binary);
  Bytes compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  compressed.resize(compressed.size() / 2);
  write_plain(cut, compressed);
  const std::string message = error_of([&] { read_idx_images(cut.string()); });
  EXPECT_NE(message.find(cut.string()), std::string::npos) << message;
}

TEST_F(IdxTest, CorruptGzipStreamThrows) {
  const fs::path whole = dir_ / "whole.gz", bad = dir_ / "bad.gz";
  write_gz(whole, image_file(50, 20, 20));
  std::ifstream in(whole, std::ios::binary);
  Bytes compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  compressed[compressed.size() / 2] ^= 0x55;
  write_plain(bad, compressed);
  const std::string message = error_of([&] { read_idx_images(bad.string()); });
  EXPECT_NE(message.find(bad.string()), std::string::npos) << message;
}

// Every single-byte damage of the deflate data that zlib notices is reported as corrupt, never as
// truncation, and names the file. zlib reports some of them as an "unexpected end of file" (the
// damaged data sends the decoder past the input's end), like a cut file: the gzip trailer, still
// whole, tells them apart.
TEST_F(IdxTest, DamagedGzipIsCorruptNotTruncated) {
  const fs::path whole = dir_ / "whole.gz", bad = dir_ / "bad.gz";
  write_gz(whole, image_file(50, 20, 20));
  std::ifstream in(whole, std::ios::binary);
  const Bytes compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int errors = 0, ended_early = 0;
  for (size_t pos = 10; pos + 8 < compressed.size(); ++pos) {  // the deflate data: no gzip header or trailer
    for (uint8_t mask : {uint8_t{0x55}, uint8_t{0x01}, uint8_t{0x80}}) {
      Bytes damaged = compressed;
      damaged[pos] ^= mask;
      write_plain(bad, damaged);
      try {
        read_idx_images(bad.string());
      } catch (const std::runtime_error& e) {
        const std::string message = e.what();
        ++errors;
        ended_early += message.find("ends after") != std::string::npos;
        EXPECT_NE(message.find(bad.string()), std::string::npos) << message;
        EXPECT_EQ(message.find("truncated"), std::string::npos)
            << "byte " << pos << " ^ " << int{mask} << ": " << message;
        // Damage that reaches the decoded IDX header is named by what the header then claims
        // (implausible dimensions, trailing data); the rest is corrupt compressed data.
        EXPECT_TRUE(message.find("corrupt") != std::string::npos || message.find("header") != std::string::npos ||
                    message.find("magic") != std::string::npos || message.find("trailing data") != std::string::npos)
            << "byte " << pos << " ^ " << int{mask} << ": " << message;
      }
    }
  }
  EXPECT_GT(errors, 100);
  EXPECT_GT(ended_early, 0) << "no damage hit the case zlib reports as a cut stream";
}

// A gzip file cut anywhere, even in its 8-byte trailer after the last data byte, is truncated: the
// data is unverified without the CRC.
TEST_F(IdxTest, GzipCutAnywhereIsTruncated) {
  const fs::path whole = dir_ / "whole.gz", cut = dir_ / "cut.gz";
  write_gz(whole, label_file(40));
  std::ifstream in(whole, std::ios::binary);
  const Bytes compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t size = 11; size < compressed.size(); ++size) {
    write_plain(cut, Bytes(compressed.begin(), compressed.begin() + static_cast<std::ptrdiff_t>(size)));
    const std::string message = error_of([&] { read_idx_labels(cut.string()); });
    EXPECT_NE(message.find(cut.string() + ": truncated"), std::string::npos)
        << size << " of " << compressed.size() << " bytes: " << message;
  }
}

TEST_F(IdxTest, TruncatedHeaderThrows) {
  Bytes bytes = image_file(1, 2, 2);
  bytes.resize(10);
  write_plain(dir_ / "hdr", bytes);
  const std::string message = error_of([&] { read_idx_images((dir_ / "hdr").string()); });
  EXPECT_NE(message.find("header"), std::string::npos) << message;
}

TEST_F(IdxTest, TrailingDataThrows) {
  Bytes bytes = label_file(8);
  bytes.push_back(0xAB);
  write_plain(dir_ / "lab", bytes);
  write_gz(dir_ / "lab.gz", bytes);
  for (const char* name : {"lab", "lab.gz"}) {
    const std::string message = error_of([&] { read_idx_labels((dir_ / name).string()); });
    EXPECT_NE(message.find("trailing"), std::string::npos) << message;
  }
}

TEST_F(IdxTest, WrongMagicThrows) {
  write_plain(dir_ / "lab", label_file(8));
  write_gz(dir_ / "img.gz", image_file(2, 2, 2));
  const std::string as_images = error_of([&] { read_idx_images((dir_ / "lab").string()); });
  EXPECT_NE(as_images.find("magic"), std::string::npos) << as_images;
  EXPECT_NE(as_images.find((dir_ / "lab").string()), std::string::npos) << as_images;
  const std::string as_labels = error_of([&] { read_idx_labels((dir_ / "img.gz").string()); });
  EXPECT_NE(as_labels.find("magic"), std::string::npos) << as_labels;
}

TEST_F(IdxTest, MissingFileThrowsNamingPath) {
  const std::string path = (dir_ / "nope.gz").string();
  const std::string message = error_of([&] { read_idx_images(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
}

TEST_F(IdxTest, LoadsMnistStyleSplitPreferringGzip) {
  write_gz(dir_ / "train-images-idx3-ubyte.gz", image_file(12, 4, 5));
  write_plain(dir_ / "train-images-idx3-ubyte", image_file(12, 4, 5, /*offset=*/1));  // must be ignored
  write_plain(dir_ / "train-labels-idx1-ubyte", label_file(12));
  const auto dataset = load_mnist_style(dir_.string(), Split::kTrain);
  ASSERT_EQ(dataset->size(), 12);
  EXPECT_EQ(dataset->channels(), 1);
  EXPECT_EQ(dataset->height(), 4);
  EXPECT_EQ(dataset->width(), 5);
  EXPECT_EQ(dataset->num_classes(), 10);
  EXPECT_TRUE(torch::equal(dataset->images(), expected_images(12, 4, 5).unsqueeze(1)));
  EXPECT_EQ(dataset->get(11).label, 1);
}

// An IDX split's identity: the two files it reads (the .gz where both are), their sizes and CRC-32s,
// and its count of images; any changed byte changes it.
TEST_F(IdxTest, ListingNamesTheFilesReadWithSizesAndContent) {
  const Bytes images = image_file(12, 4, 5);
  write_gz(dir_ / "train-images-idx3-ubyte.gz", images);
  write_plain(dir_ / "train-images-idx3-ubyte", image_file(12, 4, 5, /*offset=*/1));  // not read
  write_plain(dir_ / "train-labels-idx1-ubyte", label_file(12));
  const auto listing = moco::data::mnist_style_listing(dir_.string(), Split::kTrain);
  EXPECT_EQ(listing.kind, "idx");
  EXPECT_EQ(listing.images, 12);
  ASSERT_EQ(listing.entries, 2);
  const auto gz = listing.entry(0), labels = listing.entry(1);
  EXPECT_EQ(gz.path, "train-images-idx3-ubyte.gz");
  EXPECT_EQ(gz.size, static_cast<int64_t>(fs::file_size(dir_ / "train-images-idx3-ubyte.gz")));
  EXPECT_EQ(labels.path, "train-labels-idx1-ubyte");
  const Bytes label_bytes = label_file(12);
  EXPECT_EQ(labels.size, static_cast<int64_t>(label_bytes.size()));
  EXPECT_EQ(labels.content, crc32(crc32(0L, Z_NULL, 0), label_bytes.data(), static_cast<uInt>(label_bytes.size())));
  EXPECT_EQ(labels.label, -1);
  const auto before = moco::data::fingerprint(listing);
  Bytes changed = label_file(12);
  changed.back() = 3;  // one label
  write_plain(dir_ / "train-labels-idx1-ubyte", changed);
  const auto now = moco::data::mnist_style_listing(dir_.string(), Split::kTrain);
  EXPECT_NE(moco::data::fingerprint(now).hash, before.hash);
  EXPECT_NE(moco::data::describe_change(before, now).find("first difference at entry #1: 'train-labels-idx1-ubyte'"),
            std::string::npos)
      << moco::data::describe_change(before, now);
}

TEST_F(IdxTest, CountMismatchThrows) {
  write_gz(dir_ / "t10k-images-idx3-ubyte.gz", image_file(7, 2, 2));
  write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", label_file(6));
  const std::string message = error_of([&] { load_mnist_style(dir_.string(), Split::kTest); });
  EXPECT_NE(message.find("7 images"), std::string::npos) << message;
  EXPECT_NE(message.find("6 labels"), std::string::npos) << message;
}

TEST_F(IdxTest, LabelOutsideTheTenClassesNamesTheFile) {
  Bytes labels = label_file(12);
  labels[8 + 7] = 255;
  write_gz(dir_ / "train-images-idx3-ubyte.gz", image_file(12, 4, 4));
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", labels);
  const std::string message = error_of([&] { load_mnist_style(dir_.string(), Split::kTrain); });
  EXPECT_NE(message.find((dir_ / "train-labels-idx1-ubyte.gz").string() + ": label 255 at index 7 is outside [0, 10)"),
            std::string::npos)
      << message;
  labels[8 + 7] = 10;  // the first value past the classes
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", labels);
  EXPECT_NE(error_of([&] { load_mnist_style(dir_.string(), Split::kTrain); }).find("label 10 at index 7"),
            std::string::npos);
}

TEST_F(IdxTest, TestImagesOfAnotherSizeNameBothFiles) {
  write_gz(dir_ / "train-images-idx3-ubyte.gz", image_file(6, 4, 4));
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", label_file(6));
  write_gz(dir_ / "t10k-images-idx3-ubyte.gz", image_file(3, 5, 4));
  write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", label_file(3));
  const std::string message = error_of([&] { moco::data::load_mnist_style_splits(dir_.string()); });
  EXPECT_NE(message.find((dir_ / "t10k-images-idx3-ubyte.gz").string() + ": test images are 5x4 but " +
                         (dir_ / "train-images-idx3-ubyte.gz").string() + " holds 4x4 train images"),
            std::string::npos)
      << message;
  write_gz(dir_ / "t10k-images-idx3-ubyte.gz", image_file(3, 4, 4));
  const auto splits = moco::data::load_mnist_style_splits(dir_.string());
  EXPECT_EQ(splits.train->size(), 6);
  EXPECT_EQ(splits.test->size(), 3);
}

TEST_F(IdxTest, MissingSplitNamesRootAndFiles) {
  const std::string message = error_of([&] { load_mnist_style(dir_.string(), Split::kTest); });
  EXPECT_NE(message.find(dir_.string()), std::string::npos) << message;
  EXPECT_NE(message.find("t10k-images-idx3-ubyte.gz"), std::string::npos) << message;
}

TEST(IdxFashionMnistTest, RealSplitSizes) {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(fs::path(root) / "train-images-idx3-ubyte.gz") &&
      !fs::exists(fs::path(root) / "train-images-idx3-ubyte")) {
    GTEST_SKIP() << root << " is not installed";
  }
  const auto train = load_mnist_style(root, Split::kTrain);
  const auto test = load_mnist_style(root, Split::kTest);
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  for (const auto& d : {train, test}) {
    EXPECT_EQ(d->channels(), 1);
    EXPECT_EQ(d->height(), 28);
    EXPECT_EQ(d->width(), 28);
    EXPECT_EQ(d->num_classes(), 10);
  }
  // Fashion-MNIST is balanced: 6000 of each class in train.
  EXPECT_TRUE(torch::equal(torch::bincount(train->labels()), torch::full({10}, 6000, torch::kInt64)));
}

}  // namespace
