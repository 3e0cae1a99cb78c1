// Packed HDF5 image shards (moco_pack): the same samples, bytes, labels, views and skipped files as
// the ImageFolder they were packed from, for any number of shards; concurrent reads; the errors of
// shards that are missing or do not belong together; a failed pack leaves no shard. And the
// ImageFolder's file-list cache: reused while valid, rebuilt when a folder changes.
#include "data/file_list_cache.h"
#include "data/image_folder.h"
#include "data/image_pack.h"
#include "data/image_shards.h"
#include "image_files.h"
#include "thrown_message.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

namespace {

namespace fs = std::filesystem;
using namespace moco::data;
using namespace moco::test_images;

// 3 classes, JPEG (colour and greyscale) and PNG of varied sizes, a subfolder, one truncated JPEG
// and one empty file.
// Names by c10::str: GCC 12 in C++20 (LibTorch 2.x's build) warns falsely on "literal" + std::string&&.
fs::path make_folder(const std::string& name, const std::vector<std::string>& classes = {"cat", "dog", "emu"}) {
  const fs::path root = temp_dir(name);
  int k = 0;
  for (const auto& cls : classes)
    for (int i = 0; i < 5; ++i, ++k) {
      const int h = 20 + 7 * k % 40, w = 60 - 3 * k % 30;
      if (k % 3 == 0)
        write(root / cls / c10::str("p", i, ".png"), png_bytes(pattern(h, w, k), h, w, false));
      else if (k % 5 == 1)
        write(root / cls / "sub" / c10::str("g", i, ".jpeg"),
              jpeg_bytes(std::vector<uint8_t>(static_cast<size_t>(h * w), static_cast<uint8_t>(k * 9)), h, w, 1));
      else
        write(root / cls / c10::str("j", i, ".jpg"), jpeg_bytes(pattern(h, w, k), h, w));
    }
  auto cut = jpeg_bytes(pattern(30, 30, 7), 30, 30);
  cut.resize(cut.size() / 3);
  write(root / classes[1] / "broken.jpg", cut);
  write(root / classes[0] / "zero.jpg", {});
  return root;
}

std::vector<PackedSplit> pack(const fs::path& folder, const fs::path& out, int shards,
                              const std::string& split = "train", bool overwrite = false) {
  PackOptions o;
  o.shards = shards;
  o.threads = 2;
  o.overwrite = overwrite;
  return pack_image_folders({{split, scan_image_folder(folder.string())}}, out.string(), o);
}

using moco::test::error_of;

class ImageShardsTest : public ::testing::TestWithParam<int> {};

TEST_P(ImageShardsTest, ShardsServeTheFolderSamplesBytesViewsAndBadFiles) {
  const int shards = GetParam();
  const fs::path root = make_folder("shards_same" + std::to_string(shards)), out = root.string() + "_packed";
  fs::remove_all(out);
  const auto packed = pack(root, out, shards);
  ASSERT_EQ(packed.size(), 1u);
  EXPECT_EQ(static_cast<int>(packed[0].files.size()), shards);
  EXPECT_EQ(fs::path(packed[0].files[0]).filename().string(), shard_file_name("train", 0, shards));

  ImageFolderDataset folder(scan_image_folder(root.string()), 20, true, Transforms::kPil);
  auto source = std::make_shared<ImageShardSource>(out.string(), "train");
  EncodedImageDataset packed_set(source, 20, true, Transforms::kPil);
  EXPECT_EQ(source->num_shards(), shards);
  ASSERT_EQ(packed_set.size(), folder.size());
  EXPECT_EQ(packed_set.num_classes(), folder.num_classes());
  EXPECT_EQ(source->classes(), folder.folder().classes);
  for (int64_t i = 0; i < folder.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(source->label(i), folder.folder().labels[static_cast<size_t>(i)]);
    EXPECT_EQ(source->original_path(i), folder.folder().files[static_cast<size_t>(i)]);
    // The same listing (path, size, label), so the same fingerprint: a pack is the data it packed.
    const ImageFolderSource listed(folder.folder());
    EXPECT_EQ(source->listed(i), listed.listed(i));
    if (folder.folder().files[static_cast<size_t>(i)] != "cat/zero.jpg") {
      EXPECT_EQ(source->read(i), read_whole_file((root / folder.folder().files[static_cast<size_t>(i)]).string()));
    }
    const Example a = folder.get(i), b = packed_set.get(i);
    EXPECT_EQ(a.label, b.label);
    EXPECT_TRUE(torch::equal(a.image, b.image));
    int64_t used_a = -1, used_b = -1;
    std::vector<uint8_t> bytes_a, bytes_b;
    used_a = folder.with_encoded(i, [&](const uint8_t* p, size_t n, int64_t) { bytes_a.assign(p, p + n); });
    used_b = packed_set.with_encoded(i, [&](const uint8_t* p, size_t n, int64_t) { bytes_b.assign(p, p + n); });
    EXPECT_EQ(used_a, used_b);
    EXPECT_EQ(bytes_a, bytes_b);
  }
  // The broken JPEG and the empty file: skipped and counted alike; named by shard and original path.
  EXPECT_EQ(folder.bad_files(), 2);
  EXPECT_EQ(packed_set.bad_files(), 2);
  const auto broken = std::find(folder.folder().files.begin(), folder.folder().files.end(), "dog/broken.jpg") -
                      folder.folder().files.begin();
  const std::string where = source->describe(broken);
  EXPECT_NE(where.find("dog/broken.jpg"), std::string::npos) << where;
  EXPECT_NE(where.find((out / "train-").string()), std::string::npos) << where;
  fs::remove_all(root);
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Shards, ImageShardsTest, ::testing::Values(1, 3));

// The scan records each file's size (what the data's fingerprint hashes), and the cache keeps it;
// a cache of the format before sizes is not read, but rewritten.
TEST(ImageFolderScan, SizesAreRecordedAndCached) {
  const fs::path data = temp_dir("filelist_sizes"), root = data / "train";
  write(root / "a" / "1.jpg", std::vector<uint8_t>(11, 1));
  write(root / "b" / "2.jpg", std::vector<uint8_t>(7, 2));
  const auto past = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& dir : {root, root / "a", root / "b"}) fs::last_write_time(dir, past);
  const ImageFolder scanned = scan_image_folder(root.string());
  EXPECT_EQ(scanned.sizes, (std::vector<int64_t>{11, 7}));
  EXPECT_EQ(ImageFolderSource(scanned).listed(1), (ListedEntry{"b/2.jpg", 7, 1}));
  const CachedScan written = scan_image_folder_cached(root.string());
  ASSERT_NE(written.written_to, "");
  const CachedScan read = scan_image_folder_cached(root.string());
  EXPECT_EQ(read.read_from, written.written_to);
  EXPECT_EQ(read.folder.sizes, scanned.sizes);
  // The same file in the format before sizes ("label path" lines): ignored, rescanned, rewritten.
  std::ifstream in(written.written_to);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("file list 2"), 11, "file list 1");
  text.replace(text.find("0 11 a/1.jpg"), 12, "0 a/1.jpg");
  text.replace(text.find("1 7 b/2.jpg"), 11, "1 b/2.jpg");
  std::ofstream(written.written_to) << text;
  const CachedScan old = scan_image_folder_cached(root.string());
  EXPECT_EQ(old.read_from, "");
  EXPECT_EQ(old.folder.sizes, scanned.sizes);
  EXPECT_EQ(old.written_to, written.written_to);
  fs::remove_all(data);
}

// write_extra_dirs=false (a dry run): a cache in train.output_dir is read, never written there.
TEST(FileListCacheTest, ADryRunReadsButNeverWritesTheExtraFolder) {
  const fs::path data = temp_dir("filelist_extra"), root = data / "train", out = data / "out";
  write(root / "a" / "1.jpg", std::vector<uint8_t>(5, 1));
  fs::create_directories(out);
  const auto past = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& dir : {root, root / "a"}) fs::last_write_time(dir, past);
  // Beside the data first: where it can be written, a dry run writes it there, as any scan.
  EXPECT_EQ(scan_image_folder_cached(root.string(), {out.string()}, true, false).written_to,
            (data / ".moco_filelist-train.txt").string());
  fs::remove(data / ".moco_filelist-train.txt");
  // A data folder that cannot take it (a file in the way of the cache's name, for root too).
  fs::create_directories(data / ".moco_filelist-train.txt" / "x");
  for (const auto& dir : {root, root / "a"}) fs::last_write_time(dir, past);
  EXPECT_EQ(scan_image_folder_cached(root.string(), {out.string()}, true, false).written_to, "");
  EXPECT_TRUE(fs::is_empty(out));
  const auto kept = scan_image_folder_cached(root.string(), {out.string()}).written_to;
  EXPECT_EQ(kept, (out / ".moco_filelist-train.txt").string());
  EXPECT_EQ(scan_image_folder_cached(root.string(), {out.string()}, true, false).read_from, kept);
  fs::remove_all(data);
}

TEST(ImageShardsConcurrency, ThreadsReadTheRightBytes) {
  const fs::path root = make_folder("shards_threads"), out = root.string() + "_packed";
  fs::remove_all(out);
  pack(root, out, 3);
  const ImageFolder f = scan_image_folder(root.string());
  std::vector<std::vector<uint8_t>> expected;
  for (const auto& file : f.files) {
    try {
      expected.push_back(read_whole_file((root / file).string()));
    } catch (const std::exception&) {
      expected.emplace_back();  // the empty file
    }
  }
  const ImageShardSource source(out.string(), "train");
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int round = 0; round < 50; ++round) {
        const auto i = static_cast<int64_t>(rng() % expected.size());
        std::vector<uint8_t> got;
        try {
          got = source.read(i);
        } catch (const std::exception&) {
        }
        if (got != expected[static_cast<size_t>(i)]) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  fs::remove_all(root);
  fs::remove_all(out);
}

TEST(ImageShardsErrors, MissingEmptyMixedAndMismatchedShardsNameTheFile) {
  const fs::path root = make_folder("shards_errors"), other = make_folder("shards_errors_other", {"cat", "dog", "fox"});
  const fs::path base = temp_dir("shards_errors_out");
  auto message = [](const fs::path& dir, const std::string& split = "train") {
    try {
      ImageShardSource(dir.string(), split);
    } catch (const FolderError& e) {
      return std::string(e.what());
    }
    return std::string("(no FolderError)");
  };
  EXPECT_NE(message(base / "none").find((base / "none").string() + ": no such folder"), std::string::npos)
      << message(base / "none");
  fs::create_directories(base / "empty");
  EXPECT_NE(message(base / "empty").find("holds no shard train-00000-of-00001.h5"), std::string::npos)
      << message(base / "empty");
  // Two packs of different shard counts in one folder.
  pack(root, base / "one", 1);
  pack(root, base / "three", 3);
  fs::copy_file(base / "one" / shard_file_name("train", 0, 1), base / "three" / shard_file_name("train", 0, 1));
  const std::string mixed = message(base / "three");
  EXPECT_NE(mixed.find("shards of two packs"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("-of-00001.h5"), std::string::npos) << mixed;
  // A shard missing.
  fs::remove(base / "three" / shard_file_name("train", 0, 1));
  fs::remove(base / "three" / shard_file_name("train", 1, 3));
  const std::string missing = message(base / "three");
  EXPECT_NE(missing.find((base / "three" / shard_file_name("train", 1, 3)).string() + ": missing"), std::string::npos)
      << missing;
  // A shard of a folder with other classes.
  pack(other, base / "other", 3);
  fs::copy_file(base / "other" / shard_file_name("train", 1, 3), base / "three" / shard_file_name("train", 1, 3));
  const std::string classes = message(base / "three");
  EXPECT_NE(
      classes.find((base / "three" / shard_file_name("train", 1, 3)).string() + ": its 3 classes are not those of"),
      std::string::npos)
      << classes;
  // Not a shard at all.
  fs::create_directories(base / "junk");
  write(base / "junk" / shard_file_name("val", 0, 1), {1, 2, 3});
  std::ofstream(base / "junk" / pack_marker_name("val")) << pack_marker_text(1, 1);  // past the marker's check
  const std::string junk = message(base / "junk", "val");
  EXPECT_NE(junk.find(shard_file_name("val", 0, 1) + ": cannot open as HDF5"), std::string::npos) << junk;
  for (const auto& d : {root, other, base}) fs::remove_all(d);
}

// A pack killed during its renames leaves no marker: the split is refused, naming the folder and the
// way out; so is a shard of another pack beside a marker.
TEST(ImagePackTest, AnInterruptedPackIsRefused) {
  const fs::path root = make_folder("pack_interrupted"), out = temp_dir("pack_interrupted_out"),
                 other = temp_dir("pack_interrupted_other");
  pack(root, out, 2);
  pack(root, other, 2);
  EXPECT_EQ(ImageShardSource(out.string(), "train").num_shards(), 2);
  fs::remove(out / pack_marker_name("train"));
  const std::string incomplete = error_of([&] { ImageShardSource(out.string(), "train"); });
  EXPECT_NE(incomplete.find(out.string() + ": the pack of split 'train' is incomplete: no " +
                            (out / pack_marker_name("train")).string()),
            std::string::npos)
      << incomplete;
  EXPECT_NE(incomplete.find("re-run moco_pack"), std::string::npos) << incomplete;
  const std::string refused = error_of([&] { pack(root, out, 2); });  // without --overwrite
  EXPECT_NE(refused.find("shards of an interrupted pack are there"), std::string::npos) << refused;
  pack(root, out, 2, "train", /*overwrite=*/true);
  fs::copy_file(other / shard_file_name("train", 1, 2), out / shard_file_name("train", 1, 2),
                fs::copy_options::overwrite_existing);
  const std::string mixed = error_of([&] { ImageShardSource(out.string(), "train"); });
  EXPECT_NE(mixed.find("a shard of another pack than"), std::string::npos) << mixed;
  for (const auto& d : {root, out, other}) fs::remove_all(d);
}

TEST(ImagePackTest, AFailedPackLeavesNoShardAndExistingShardsAreKept) {
  const fs::path root = make_folder("pack_fail"), out = temp_dir("pack_fail_out");
  ImageFolder f = scan_image_folder(root.string());
  fs::remove(root / f.files.back());  // listed, then gone: the last shard's reader fails
  PackOptions o;
  o.shards = 3;
  o.threads = 3;
  const std::string error = error_of([&] { pack_image_folders({{"train", f}}, out.string(), o); });
  EXPECT_NE(error.find((root / f.files.back()).string()), std::string::npos) << error;
  EXPECT_TRUE(fs::is_empty(out)) << "a failed pack left files in " << out;
  // More shards than images, and a second pack over the first without --overwrite: refused.
  write(root / f.files.back(), jpeg_bytes(pattern(20, 20, 1), 20, 20));
  EXPECT_THROW(pack(root, out, 1000), FolderError);
  pack(root, out, 2);
  EXPECT_THROW(pack(root, out, 3), FolderError);
  pack(root, out, 3, "train", /*overwrite=*/true);  // the 2-shard pack is replaced, not mixed in
  EXPECT_EQ(ImageShardSource(out.string(), "train").num_shards(), 3);
  fs::remove_all(root);
  fs::remove_all(out);
}

// The folders of a generated ImageFolder dated an hour back: a fresh folder is not cached (its
// clock tick may still hold changes).
void age(const fs::path& root) {
  const auto past = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(root, past);
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_directory()) fs::last_write_time(e.path(), past);
}

TEST(FileListCacheTest, SecondScanReadsTheCacheAndAChangedFolderInvalidatesIt) {
  const fs::path data = temp_dir("filelist"), root = data / "train";
  for (const char* f : {"a/1.jpg", "a/sub/2.png", "b/3.jpeg"}) write(root / f, jpeg_bytes(pattern(8, 8, 0), 8, 8));
  // Fresh folders: scanned, nothing written.
  CachedScan fresh = scan_image_folder_cached(root.string());
  EXPECT_EQ(fresh.written_to, "");
  age(root);
  const CachedScan first = scan_image_folder_cached(root.string());
  EXPECT_EQ(first.read_from, "");
  EXPECT_EQ(first.written_to, (data / ".moco_filelist-train.txt").string());
  EXPECT_TRUE(fs::exists(data / ".moco_filelist-train.txt"));
  const CachedScan second = scan_image_folder_cached(root.string());
  EXPECT_EQ(second.read_from, first.written_to);
  EXPECT_EQ(second.folder.files, first.folder.files);
  EXPECT_EQ(second.folder.labels, first.folder.labels);
  EXPECT_EQ(second.folder.classes, first.folder.classes);
  EXPECT_EQ(second.folder.root, root.string());
  // A file added in a subfolder: its folder's time changes, the cache is not used.
  write(root / "a" / "sub" / "4.jpg", jpeg_bytes(pattern(8, 8, 0), 8, 8));
  const CachedScan third = scan_image_folder_cached(root.string());
  EXPECT_EQ(third.read_from, "");
  EXPECT_EQ(third.folder.files, (std::vector<std::string>{"a/1.jpg", "a/sub/2.png", "a/sub/4.jpg", "b/3.jpeg"}));
  // A damaged cache is ignored and rewritten.
  age(root);
  ASSERT_NE(scan_image_folder_cached(root.string()).written_to, "");
  fs::resize_file(data / ".moco_filelist-train.txt", fs::file_size(data / ".moco_filelist-train.txt") - 5);
  const CachedScan damaged = scan_image_folder_cached(root.string());
  EXPECT_EQ(damaged.read_from, "");
  EXPECT_EQ(damaged.folder.files, third.folder.files);
  EXPECT_EQ(scan_image_folder_cached(root.string()).read_from, (data / ".moco_filelist-train.txt").string());
  // A class folder added: the split folder's time changes.
  write(root / "c" / "5.jpg", jpeg_bytes(pattern(8, 8, 0), 8, 8));
  EXPECT_EQ(scan_image_folder_cached(root.string()).folder.classes, (std::vector<std::string>{"a", "b", "c"}));
  fs::remove_all(data);
}

// write=false (the ranks other than 0): the folder is scanned, a valid cache still read, none written.
TEST(FileListCacheTest, ARankThatMayNotWriteScansAndWritesNothing) {
  const fs::path data = temp_dir("filelist_nowrite"), root = data / "train";
  for (const char* f : {"a/1.jpg", "b/2.jpg"}) write(root / f, jpeg_bytes(pattern(8, 8, 0), 8, 8));
  age(root);
  const CachedScan scan = scan_image_folder_cached(root.string(), {}, /*write=*/false);
  EXPECT_EQ(scan.folder.files, (std::vector<std::string>{"a/1.jpg", "b/2.jpg"}));
  EXPECT_EQ(scan.written_to, "");
  EXPECT_FALSE(fs::exists(data / ".moco_filelist-train.txt"));
  const std::string cache = scan_image_folder_cached(root.string()).written_to;
  ASSERT_NE(cache, "");
  EXPECT_EQ(scan_image_folder_cached(root.string(), {}, /*write=*/false).read_from, cache);
  fs::remove_all(data);
}

}  // namespace
