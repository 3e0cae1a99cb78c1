// The checkpoint layer: HDF5 round trips, checksums that catch corruption, the collective save/load
// (at world 1 under ctest, at N ranks under the mpi.npN entries), retention, writer balance.
#include "ckpt/async_saver.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/h5_tensor_file.h"
#include "ckpt/manifest.h"
#include "ckpt/save_phases.h"

#include "test_world.h"
#include "thrown_message.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <optional>

using namespace moco;
namespace fs = std::filesystem;

namespace {

// A fresh folder per test (and per rank-0 view of it: all ranks share rank 0's name).
std::string scratch_dir(const std::string& name) {
  auto group = test_world_group();
  const auto dir = fs::temp_directory_path() / ("moco_ckpt_test_" + name + "_" + std::to_string(group->world_size()));
  if (group->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  group->barrier();
  return dir.string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

using moco::test::error_of;

std::vector<ckpt::StateEntry> sample_state(uint64_t seed) {
  torch::manual_seed(seed);
  return {{"encoder_q/conv1.weight", torch::randn({16, 3, 3, 3})},
          {"encoder_q/bn1.num_batches_tracked", torch::tensor(int64_t{7})},  // 0-d, as torchvision's
          {"moco/queue", torch::randn({8, 300})},
          {"moco/queue_ptr", torch::tensor({int64_t{42}})},
          {"progress/train_seconds", torch::tensor({123.5}, torch::kFloat64)},
          {"half/bf16", torch::randn({5, 7}).to(torch::kBFloat16)},
          {"rng/state", torch::randint(0, 255, {64}, torch::kUInt8), /*rank_local=*/true}};
}

// Zeroed tensors of the same names, shapes and dtypes.
std::vector<ckpt::StateEntry> zeros_like(const std::vector<ckpt::StateEntry>& state) {
  std::vector<ckpt::StateEntry> out;
  for (const auto& e : state) out.push_back({e.name, torch::zeros_like(e.tensor), e.rank_local});
  return out;
}

}  // namespace

TEST(CkptH5, EveryDtypeAndShapeRoundTripsBitwise) {
  const auto dir = fs::temp_directory_path() / "moco_ckpt_h5_roundtrip";
  fs::create_directories(dir);
  const auto file = (dir / "t.h5").string();
  torch::manual_seed(3);
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"a/f32", torch::randn({3, 4, 5})},
      {"a/f64", torch::randn({9}, torch::kFloat64)},
      {"b/c/i64", torch::randint(-1000, 1000, {2, 3}, torch::kInt64)},
      {"i32", torch::randint(-5, 5, {4}, torch::kInt32)},
      {"u8", torch::randint(0, 255, {11}, torch::kUInt8)},
      {"bf16", torch::randn({6}).to(torch::kBFloat16)},
      {"f16", torch::randn({6}).to(torch::kFloat16)},
      {"bool", torch::rand({5}) > 0.5},
      {"scalar", torch::tensor(3.25)},
      {"big", torch::randn({300, 5000})},     // several 4 MiB chunks
      {"strided", torch::randn({6, 4}).t()},  // non-contiguous input
  };
  {
    ckpt::H5TensorWriter w(file);
    for (const auto& [name, t] : tensors) w.write(name, t);
    w.close();
  }
  ckpt::H5TensorReader r(file);
  EXPECT_EQ(r.list().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const auto back = r.read(name);
    EXPECT_EQ(back.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(back.sizes(), t.sizes()) << name;
    EXPECT_TRUE(torch::equal(back, t.contiguous())) << name;
  }
  EXPECT_FALSE(r.contains("a/missing"));
  EXPECT_NE(error_of([&] { r.read("a/missing"); }).find("'a/missing': not in the file"), std::string::npos);
}

TEST(CkptH5, AFlippedByteIsCaughtNamingFileAndTensor) {
  const auto dir = fs::temp_directory_path() / "moco_ckpt_h5_flip";
  fs::create_directories(dir);
  const auto file = (dir / "t.h5").string();
  torch::manual_seed(4);
  const auto victim = torch::randn({64, 64});
  {
    ckpt::H5TensorWriter w(file);
    w.write("encoder_q/layer1.0.conv1.weight", victim);
    w.write("other", torch::randn({10}));
    w.close();
  }
  auto bytes = read_bytes(file);
  const std::string needle(static_cast<const char*>(victim.data_ptr()), 64);
  const auto at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos) << "the tensor's bytes are stored as they are";
  bytes[at + 1000] ^= 0x10;
  write_bytes(file, bytes);
  ckpt::H5TensorReader r(file);
  const auto error = error_of([&] { r.read("encoder_q/layer1.0.conv1.weight"); });
  EXPECT_NE(error.find(file), std::string::npos) << error;
  EXPECT_NE(error.find("encoder_q/layer1.0.conv1.weight"), std::string::npos) << error;
  EXPECT_EQ(r.read("other").numel(), 10) << "the other tensors stay readable";
}

TEST(CkptH5, ATruncatedOrMissingFileIsNamed) {
  const auto dir = fs::temp_directory_path() / "moco_ckpt_h5_trunc";
  fs::create_directories(dir);
  const auto file = (dir / "t.h5").string();
  {
    ckpt::H5TensorWriter w(file);
    w.write("x", torch::randn({1000, 100}));
    w.close();
  }
  const auto bytes = read_bytes(file);
  write_bytes(file, bytes.substr(0, bytes.size() / 2));
  auto error = error_of([&] {
    ckpt::H5TensorReader r(file);
    r.read("x");
  });
  EXPECT_NE(error.find(file), std::string::npos) << error;
  error = error_of([&] { ckpt::H5TensorReader r((dir / "absent.h5").string()); });
  EXPECT_NE(error.find("absent.h5"), std::string::npos) << error;
}

namespace {

// A dataset declaring `dims` (float32, chunked, no data written: HDF5 allocates nothing for it), as a
// damaged file may declare any shape.
void write_declared_dataset(const std::string& file, const char* name, std::vector<hsize_t> dims) {
  const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t create = H5Pcreate(H5P_DATASET_CREATE);
  const std::vector<hsize_t> chunk(dims.size(), 1);
  H5Pset_chunk(create, static_cast<int>(chunk.size()), chunk.data());
  const hid_t d = H5Dcreate2(f, name, H5T_NATIVE_FLOAT, space, H5P_DEFAULT, create, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  H5Dclose(d);
  H5Pclose(create);
  H5Sclose(space);
  H5Fclose(f);
}

// A one-shard checkpoint folder holding `tensors`, with its manifest.
void write_checkpoint(const std::string& dir, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  ckpt::Manifest m;
  ckpt::H5TensorWriter w((fs::path(dir) / ckpt::shard_file_name(0, 1)).string());
  for (const auto& [name, t] : tensors) {
    w.write(name, t);
    m.tensors.push_back({name, 0, false, t.sizes().vec(), ckpt::dtype_name(t.scalar_type()), ckpt::tensor_crc32(t),
                         static_cast<int64_t>(t.nbytes())});
  }
  w.close();
  write_bytes((fs::path(dir) / ckpt::kManifestFile).string(), ckpt::manifest_to_json(m));
}

}  // namespace

// A damaged file may declare any shape: one whose bytes overflow int64 is refused as such, and
// CheckpointReader compares the declared shape with the manifest before it allocates, where reading
// first failed inside LibTorch's allocator, or under ASan aborted (found by fuzz/fuzz_ckpt_shard.cpp).
TEST(CkptH5, ADeclaredShapeIsCheckedBeforeAllocating) {
  const auto dir = fs::temp_directory_path() / "moco_ckpt_h5_declared";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto file = (dir / "t.h5").string();
  write_declared_dataset(file, "x", {hsize_t{1} << 40, hsize_t{1} << 30});
  auto error = error_of([&] { ckpt::H5TensorReader(file).read("x"); });
  EXPECT_NE(error.find(file + ": tensor 'x': implausible shape in the file"), std::string::npos) << error;

  const auto shard = (dir / ckpt::shard_file_name(0, 1)).string();
  write_checkpoint(dir.string(), {{"y", torch::zeros({2, 2})}});
  write_declared_dataset(shard, "y", {hsize_t{1} << 20, hsize_t{1} << 20});  // 4 TiB of float32
  error = error_of([&] { ckpt::CheckpointReader(dir.string()).verify_all(); });
  EXPECT_NE(error.find(shard + ": tensor 'y': stored as float32 1048576x1048576, the manifest says float32 2x2"),
            std::string::npos)
      << error;
}

// Shards are written in the HDF5 1.10 format, whose metadata is checksummed and verified before it
// is decoded: in the 1.0 format, HDF5 1.10.8 decoded a damaged attribute message out of bounds
// (heap-buffer-overflow, found by fuzz/fuzz_ckpt_shard.cpp). Every single flipped byte of a shard
// is then either refused with a CheckpointError naming the file, or harmless (the tensors still
// match their CRC-32s) because it lies in unused space (zeros: the rest of HDF5's 2 KiB metadata
// block).
TEST(CkptH5, EveryFlippedByteOfAShardIsRefusedOrHarmless) {
  const auto dir = fs::temp_directory_path() / "moco_ckpt_h5_every_byte";
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_checkpoint(dir.string(), {{"encoder_q/conv1.weight", torch::arange(24, torch::kFloat32).reshape({2, 3, 4})},
                                  {"encoder_q/bn1.num_batches_tracked", torch::tensor(int64_t{7})},
                                  {"queue/labels", torch::arange(6, torch::kUInt8)}});
  const auto shard = (dir / ckpt::shard_file_name(0, 1)).string();
  {
    const hid_t f = H5Fopen(shard.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    H5F_info2_t info;
    ASSERT_GE(H5Fget_info2(f, &info), 0);
    EXPECT_GE(info.super.version, 2u) << "a superblock without a checksum: the file is not in the 1.10 format";
    H5Fclose(f);
  }
  const auto whole = read_bytes(shard);
  size_t refused = 0;
  for (size_t at = 0; at < whole.size(); ++at) {
    auto damaged = whole;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x5a);
    write_bytes(shard, damaged);
    try {
      ckpt::CheckpointReader(dir.string()).verify_all();
      EXPECT_EQ(whole[at], 0) << "byte " << at << " is in use, but its damage went unnoticed";
    } catch (const ckpt::CheckpointError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(shard), std::string::npos) << "byte " << at << ": " << e.what();
    }
  }
  EXPECT_GT(refused, whole.size() / 2) << refused << " of " << whole.size() << " flipped bytes refused";
}

TEST(CkptManifest, JsonRoundTripAndRefusals) {
  ckpt::Manifest m;
  m.step = 12;
  m.epoch = 0.75;
  m.world_size = 2;
  m.global_batch = 64;
  m.config_yaml = "model:\n  arch: resnet18\n";
  m.torch_version = "1.13.0";
  m.notes = {{"train_data", "{\"kind\": \"idx\"}\n"}, {"pretrained", "runs/a"}};
  m.tensors.push_back({"encoder_q/conv1.weight", 1, false, {64, 3, 7, 7}, "float32", 0xdeadbeef, 37632});
  m.tensors.push_back({"rng/torch_cpu", 0, true, {5056}, "uint8", 1, 5056});
  const auto back = ckpt::manifest_from_json(ckpt::manifest_to_json(m), "m.json");
  EXPECT_EQ(back.step, 12);
  EXPECT_EQ(back.world_size, 2);
  EXPECT_EQ(back.config_yaml, m.config_yaml);
  EXPECT_EQ(back.notes, m.notes);
  // A manifest written before notes existed reads with none; notes that are not texts are refused.
  auto j = nlohmann::json::parse(ckpt::manifest_to_json(m));
  j.erase("notes");
  EXPECT_TRUE(ckpt::manifest_from_json(j.dump(), "m.json").notes.empty());
  j["notes"] = nlohmann::json::array({"a"});
  EXPECT_NE(error_of([&] { ckpt::manifest_from_json(j.dump(), "m.json"); }).find("m.json: notes is not an object"),
            std::string::npos);
  j["notes"] = {{"a", 1}};
  EXPECT_NE(error_of([&] { ckpt::manifest_from_json(j.dump(), "m.json"); }).find("m.json: malformed"),
            std::string::npos);
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.tensors[0].crc32, 0xdeadbeefu);
  EXPECT_EQ(back.tensors[0].shape, (std::vector<int64_t>{64, 3, 7, 7}));
  EXPECT_TRUE(back.tensors[1].rank_local);
  EXPECT_NE(error_of([] { ckpt::manifest_from_json("{\"format\": \"x\"}", "m.json"); }).find("m.json: not a moco_dist"),
            std::string::npos);
  EXPECT_NE(error_of([] { ckpt::manifest_from_json("{not json", "m.json"); }).find("m.json: malformed"),
            std::string::npos);
  auto future = m;
  future.format_version = 99;
  EXPECT_NE(
      error_of([&] { ckpt::manifest_from_json(ckpt::manifest_to_json(future), "m.json"); }).find("format version 99"),
      std::string::npos);
}

// Numbers are taken only as JSON integers within range, never cast: nlohmann's get<int>() turns
// 1e300 into undefined behaviour and 2^32 + 2 into 2 (found by fuzz/fuzz_ckpt_manifest.cpp). A
// tensor's bytes must follow from its shape and dtype, so total_bytes() cannot overflow.
TEST(CkptManifest, NumbersOutOfRangeAreRefusedNotCast) {
  ckpt::Manifest m;
  m.world_size = 2;
  m.tensors.push_back({"a", 1, false, {4, 3}, "float32", 7, 48});
  m.tensors.push_back({"b", 0, false, {5}, "int64", 8, 40});
  const auto good = nlohmann::json::parse(ckpt::manifest_to_json(m));
  ASSERT_EQ(ckpt::manifest_from_json(good.dump(), "m.json").total_bytes(), 88);
  const auto refusal = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto j = good;
    edit(j);
    return error_of([&] { ckpt::manifest_from_json(j.dump(), "m.json"); });
  };
  EXPECT_NE(refusal([](auto& j) {
              j["world_size"] = 1e300;
            }).find("m.json: world_size must be an integer in [1, 2147483647], not 1e+300"),
            std::string::npos)
      << refusal([](auto& j) { j["world_size"] = 1e300; });
  EXPECT_NE(refusal([](auto& j) { j["world_size"] = (int64_t{1} << 32) + 2; }).find("world_size must be an integer"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["step"] = 2.5; }).find("step must be an integer"), std::string::npos);
  EXPECT_NE(refusal([](auto& j) {
              j["tensors"][0]["crc32"] = -1;
            }).find("tensor 'a': crc32 must be an integer in [0, 4294967295]"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["tensors"][0]["crc32"] = 1e20; }).find("crc32 must be an integer"),
            std::string::npos);
  EXPECT_NE(
      refusal([](auto& j) { j["tensors"][0]["shard"] = 2; }).find("tensor 'a': shard must be an integer in [0, 1]"),
      std::string::npos);
  EXPECT_NE(
      refusal([](auto& j) { j["tensors"][0]["shape"][0] = -4; }).find("tensor 'a': a dimension must be an integer"),
      std::string::npos);
  EXPECT_NE(refusal([](auto& j) {
              j["tensors"][1]["dtype"] = "complex";
            }).find("m.json: tensor 'b': unknown dtype 'complex'"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& j) {
              j["tensors"][0]["bytes"] = 47;
            }).find("tensor 'a': bytes 47 do not match shape [4, 3] of float32"),
            std::string::npos);
  const auto huge = [](auto& j) {
    for (auto& t : j["tensors"]) {
      t["shape"] = {int64_t{1} << 59};
      t["dtype"] = "float64";
      t["bytes"] = int64_t{1} << 62;
    }
  };
  EXPECT_NE(refusal(huge).find("m.json: the tensors' bytes add up to more than int64 holds"), std::string::npos)
      << refusal(huge);
}

TEST(CkptWriters, ReplicatedBytesAreBalancedAndTheSameOnEveryRank) {
  torch::manual_seed(5);
  std::vector<ckpt::StateEntry> state;
  for (int i = 0; i < 200; ++i)
    state.push_back({c10::str("t", i), torch::empty({torch::randint(1, 5000, {1}).item<int64_t>()})});
  state.push_back({"local", torch::empty({100000}), true});
  for (int world : {1, 2, 3, 4, 8}) {
    const auto writers = ckpt::assign_writers(state, world);
    EXPECT_EQ(writers, ckpt::assign_writers(state, world));
    EXPECT_EQ(writers.back(), -1) << "rank-local entries have no single writer";
    std::vector<int64_t> load(static_cast<size_t>(world), 0);
    int64_t total = 0, largest = 0;
    for (size_t i = 0; i + 1 < state.size(); ++i) {
      ASSERT_GE(writers[i], 0);
      ASSERT_LT(writers[i], world);
      const int64_t bytes = state[i].tensor.numel() * 4;
      load[static_cast<size_t>(writers[i])] += bytes;
      total += bytes;
      largest = std::max(largest, bytes);
    }
    // Greedy largest-first: no rank exceeds the mean by more than one tensor.
    for (int64_t l : load) EXPECT_LE(l, total / world + largest) << "world " << world;
  }
}

// A step folder is named as it lies: step_000000040 (made by hand, nine digits) is step 40 at that
// path, not at step_00000040 (a resume warned of the folder by the other name; issue 57, W10).
TEST(CkptStepFolders, AreListedByTheirOwnNames) {
  const auto root = fs::temp_directory_path() / "moco_ckpt_step_folders";
  fs::remove_all(root);
  for (const char* name : {"step_000000040", "step_00000041", "step_00000042.tmp", "step_00000043"}) {
    fs::create_directories(root / name);
    if (std::string(name) != "step_00000043") std::ofstream(root / name / ckpt::kManifestFile) << "{}";
  }
  const auto every = ckpt::step_folders(root.string());
  ASSERT_EQ(every.size(), 3u);
  EXPECT_EQ(every[0].step, 40);
  EXPECT_EQ(every[0].path, (root / "step_000000040").string());
  EXPECT_EQ(every[2].path, (root / "step_00000043").string());  // no manifest: a folder all the same
  const auto committed = ckpt::committed_step_folders(root.string());
  ASSERT_EQ(committed.size(), 2u);
  EXPECT_EQ(committed[1].path, (root / "step_00000041").string());
  fs::remove_all(root);
}

TEST(CkptRetention, KeepsTheNewestTheMultiplesAndLatestAndDropsLeftovers) {
  const auto root = fs::temp_directory_path() / "moco_ckpt_retention";
  fs::remove_all(root);
  for (int64_t s = 1; s <= 10; ++s) {
    fs::create_directories(ckpt::step_dir(root.string(), s));
    std::ofstream(fs::path(ckpt::step_dir(root.string(), s)) / ckpt::kManifestFile) << "{}";
  }
  fs::create_directories(ckpt::step_dir(root.string(), 11) + ".tmp");  // a crashed save
  fs::create_directories(ckpt::step_dir(root.string(), 12) + ".tmp");  // the save in flight
  fs::create_directories(ckpt::step_dir(root.string(), 13));           // damaged by hand: no manifest
  // Made by hand, beyond any int64_t step (issue 57, W7): no run's folder, left alone.
  const auto huge = root / "step_99999999999999999999";
  fs::create_directories(huge);
  std::ofstream(huge / ckpt::kManifestFile) << "{}";
  ckpt::write_latest(root.string(), 2);
  ckpt::RetentionPolicy policy;
  policy.keep_last = 3;
  policy.keep_every_steps = 4;
  ckpt::apply_retention(root.string(), policy, 12);
  EXPECT_EQ(ckpt::committed_steps(root.string()), (std::vector<int64_t>{2, 4, 8, 9, 10}));
  EXPECT_FALSE(fs::exists(ckpt::step_dir(root.string(), 11) + ".tmp"));
  EXPECT_TRUE(fs::exists(ckpt::step_dir(root.string(), 12) + ".tmp"));
  EXPECT_TRUE(fs::exists(ckpt::step_dir(root.string(), 13)));
  EXPECT_TRUE(fs::exists(huge));
  EXPECT_EQ(ckpt::latest_step(root.string()), 2);
  EXPECT_EQ(ckpt::resolve_checkpoint_dir(root.string()), ckpt::step_dir(root.string(), 2));
}

// Collective: the same test at world 1 (ctest) and at 2 and 4 ranks (mpi.np2, mpi.np4).
TEST(CkptCollective, SaveThenLoadRestoresEveryTensorAndSpreadsTheBytes) {
  auto group = test_world_group();
  const int rank = group->rank(), world = group->world_size();
  const auto root = scratch_dir("roundtrip");
  auto state = sample_state(11);
  // Rank-local state differs per rank; replicated state is the same everywhere.
  state.back().tensor.fill_(static_cast<uint8_t>(rank + 1));
  ckpt::SaveInfo info{7, 0.5, 64, "model: {arch: resnet_tiny}\n", {{"train_data", "a fingerprint"}}};
  const auto dir = ckpt::save_checkpoint(root, state, info, *group);
  EXPECT_EQ(dir, ckpt::step_dir(root, 7));
  EXPECT_EQ(ckpt::latest_step(root), 7);
  EXPECT_FALSE(fs::exists(dir + ".tmp"));

  const auto manifest = ckpt::read_manifest(dir);
  EXPECT_EQ(manifest.world_size, world);
  EXPECT_EQ(manifest.step, 7);
  EXPECT_EQ(manifest.notes, info.notes);
  EXPECT_EQ(manifest.tensors.size(), state.size() - 1 + static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) EXPECT_TRUE(fs::exists(fs::path(dir) / ckpt::shard_file_name(r, world)));
  if (world > 1) {  // moco/queue (9.6 KB) and conv1 (1.7 KB) land on different ranks
    EXPECT_NE(manifest.find("moco/queue")->shard, manifest.find("encoder_q/conv1.weight")->shard);
  }

  auto restored = zeros_like(state);
  ckpt::load_checkpoint(dir, restored, *group);
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_TRUE(torch::equal(restored[i].tensor, state[i].tensor)) << state[i].name << " on rank " << rank;
}

TEST(CkptCollective, ABadCheckpointFailsOnEveryRankAndTouchesNothing) {
  auto group = test_world_group();
  const int world = group->world_size();
  const auto root = scratch_dir("bad");
  const auto state = sample_state(12);
  const auto dir = ckpt::save_checkpoint(root, state, {3, 0.1, 64, "", {}}, *group);
  group->barrier();

  // Corrupt, in the data itself, the largest tensor that a rank other than 0 wrote (at world 1: the
  // largest).
  const auto manifest = ckpt::read_manifest(dir);
  const ckpt::TensorRecord* victim = nullptr;
  for (const auto& t : manifest.tensors)
    if (!t.rank_local && (world == 1 || t.shard != 0) && (!victim || t.bytes > victim->bytes)) victim = &t;
  ASSERT_NE(victim, nullptr);
  const auto shard_path = (fs::path(dir) / manifest.shard_file(victim->shard)).string();
  if (group->rank() == 0) {
    ckpt::CheckpointReader reader(dir);
    const auto t = reader.read(*victim);
    auto bytes = read_bytes(shard_path);
    const auto at = bytes.find(std::string(static_cast<const char*>(t.data_ptr()), 64));
    ASSERT_NE(at, std::string::npos);
    bytes[at + 100] ^= 0x01;
    write_bytes(shard_path, bytes);
  }
  group->barrier();

  auto target = zeros_like(state);
  const auto error = error_of([&] { ckpt::load_checkpoint(dir, target, *group); });
  EXPECT_NE(error.find(shard_path), std::string::npos) << error;
  EXPECT_NE(error.find(victim->name), std::string::npos) << error;
  for (const auto& e : target) EXPECT_EQ(e.tensor.count_nonzero().item<int64_t>(), 0) << e.name << " was touched";

  // A shape the checkpoint does not have, and a tensor it lacks, are named too.
  auto other = zeros_like(state);
  other[0].tensor = torch::zeros({16, 3, 7, 7});
  EXPECT_NE(error_of([&] {
              ckpt::load_checkpoint(dir, other, *group);
            }).find("'encoder_q/conv1.weight' is float32 16x3x3x3 in the checkpoint, this run has float32 16x3x7x7"),
            std::string::npos);
  auto extra = zeros_like(state);
  extra.push_back({"encoder_q/fc.weight", torch::zeros({2})});
  EXPECT_NE(error_of([&] { ckpt::load_checkpoint(dir, extra, *group); }).find("has no tensor 'encoder_q/fc.weight'"),
            std::string::npos);
}

TEST(CkptCollective, AnErrorOnOneRankIsRaisedOnEveryRankNamingIt) {
  auto group = test_world_group();
  const int world = group->world_size();
  const std::string mine = group->rank() == world - 1 ? "disk full" : "";
  const auto error = error_of([&] { ckpt::agree_no_errors(mine, *group); });
  EXPECT_EQ(error, "rank " + std::to_string(world - 1) + ": disk full");
  EXPECT_EQ(error_of([&] { ckpt::agree_no_errors("", *group); }), "");
}

TEST(CkptCollective, AsyncSaveWritesTheSnapshotTakenAtTheCall) {
  auto group = test_world_group();
  const auto root = scratch_dir("async");
  auto state = sample_state(13);
  const auto expected = zeros_like(state);
  for (size_t i = 0; i < state.size(); ++i) expected[i].tensor.copy_(state[i].tensor);
  std::vector<int64_t> committed;
  {
    ckpt::AsyncSaver saver(*group, [&](int64_t step) { committed.push_back(step); });
    const auto dir = saver.save(root, state, {5, 0.2, 64, "", {}});
    for (auto& e : state) e.tensor.zero_();  // training goes on and changes the state
    saver.wait();
    EXPECT_FALSE(saver.in_flight());
    auto restored = zeros_like(state);
    ckpt::load_checkpoint(dir, restored, *group);
    for (size_t i = 0; i < state.size(); ++i)
      EXPECT_TRUE(torch::equal(restored[i].tensor, expected[i].tensor)) << state[i].name;
    EXPECT_TRUE(fs::is_empty(dir) == false && !fs::exists(fs::path(dir) / "rank-0.done"))
        << "markers are removed before the commit";
  }
  EXPECT_EQ(committed, (group->rank() == 0 ? std::vector<int64_t>{5} : std::vector<int64_t>{}));

  // A save that cannot be written fails on every rank at the next wait.
  const auto blocked = fs::path(root) / "a_file";
  if (group->rank() == 0) std::ofstream(blocked) << "x";
  group->barrier();
  ckpt::AsyncSaver saver(*group);
  const auto error = error_of([&] {
    saver.save((blocked / "checkpoints").string(), state, {6, 0.3, 64, "", {}});
    saver.wait();
  });
  EXPECT_NE(error.find("rank 0: "), std::string::npos) << error;
  EXPECT_NE(error.find("cannot create"), std::string::npos) << error;
}

// A checkpoint never holds a non-finite tensor: the save is refused on every rank before anything is
// written, naming the step and the tensors (sorted, four at most), synchronous or background, and
// the checkpoint committed before stays `latest`, whole.
TEST(CkptCollective, ANonFiniteTensorIsRefusedNamingItAndTheCheckpointBeforeStays) {
  auto group = test_world_group();
  const auto root = scratch_dir("nonfinite");
  auto state = sample_state(17);
  const auto committed = ckpt::save_checkpoint(root, state, {1, 0.1, 64, "", {}}, *group);
  const auto expected = zeros_like(state);
  for (size_t i = 0; i < state.size(); ++i) expected[i].tensor.copy_(state[i].tensor);

  state[2].tensor[3][7] = std::numeric_limits<float>::infinity();  // moco/queue
  const auto one = error_of([&] { ckpt::save_checkpoint(root, state, {2, 0.2, 64, "", {}}, *group); });
  EXPECT_EQ(one,
            "rank 0: checkpoint of step 2 refused: tensor 'moco/queue' holds NaN or Inf (a checkpoint never holds a "
            "non-finite tensor); the checkpoints already committed stay as they are" +
                std::string(group->world_size() > 1 ? " (and " + std::to_string(group->world_size() - 1) +
                                                          " other rank(s) failed, see their logs)"
                                                    : ""));
  state[5].tensor[1][1] = std::nan("");                                   // half/bf16
  state[0].tensor[0][0][0][0] = -std::numeric_limits<float>::infinity();  // encoder_q/conv1.weight
  {
    ckpt::AsyncSaver saver(*group);
    const auto both = error_of([&] { saver.save(root, state, {3, 0.3, 64, "", {}}); });
    EXPECT_NE(
        both.find("checkpoint of step 3 refused: tensors 'encoder_q/conv1.weight', 'half/bf16', 'moco/queue' hold "
                  "NaN or Inf"),
        std::string::npos)
        << both;
    EXPECT_FALSE(saver.in_flight());
  }
  EXPECT_EQ(ckpt::latest_step(root), std::optional<int64_t>(1));
  EXPECT_EQ(ckpt::committed_steps(root), std::vector<int64_t>{1});
  for (int64_t step : {2, 3}) EXPECT_FALSE(fs::exists(ckpt::step_dir(root, step) + ".tmp")) << step;
  auto restored = zeros_like(state);
  ckpt::load_checkpoint(committed, restored, *group);
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_TRUE(torch::equal(restored[i].tensor, expected[i].tensor)) << state[i].name;
}

TEST(CkptNonFinite, ManyTensorsAreCountedBeyondTheFourNamed) {
  std::vector<ckpt::StateEntry> state;
  for (int i = 0; i < 6; ++i) state.push_back({c10::str("t", i), torch::full({3}, std::nan(""))});
  state.push_back({"counter", torch::tensor(int64_t{3})});  // integers are always finite
  EXPECT_EQ(ckpt::detail::nonfinite_state_error(state, 9),
            "checkpoint of step 9 refused: tensors 't0', 't1', 't2', 't3' and 2 more hold NaN or Inf (a checkpoint "
            "never holds a non-finite tensor); the checkpoints already committed stay as they are");
  state.resize(6);
  for (auto& e : state) e.tensor.fill_(1.0);
  EXPECT_EQ(ckpt::detail::nonfinite_state_error(state, 9), "");
}
