// A checkpoint's shard file (HDF5) read through CheckpointReader, against a fixed manifest. At start
// the target writes a small checkpoint of its own (a few tensors of several dtypes and shapes, nested
// groups, a scalar, an empty tensor) to a scratch folder; each input replaces its one shard file.
// With MOCO_FUZZ_SEED_OUT=<folder> it leaves that shard and its manifest there (seeds) and exits.
// A CheckpointError naming the shard file is the expected answer to a bad shard; anything else (a
// c10::Error, another exception, a sanitizer report, an allocation over libFuzzer's limit) is a bug.
// Besides CheckpointReader, the target lists the file's datasets and describes each (shape, dtype)
// without a manifest; read() itself allocates what the file declares and is reached only through
// CheckpointReader, which checks the declaration against the manifest first.
#include "ckpt/h5_tensor_file.h"
#include "ckpt/manifest.h"
#include "fuzz_util.h"

#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

const moco::fuzz::ScratchGuard& folder() {
  static const moco::fuzz::ScratchGuard dir(moco::fuzz::scratch_path("ckpt", /*folder=*/true));
  return dir;
}

std::string shard_path() { return (fs::path(folder().path()) / moco::ckpt::shard_file_name(0, 1)).string(); }

void write_checkpoint() {
  const std::pair<const char*, torch::Tensor> tensors[] = {
      {"encoder_q/conv1.weight", torch::arange(24, torch::kFloat32).reshape({2, 3, 4})},
      {"encoder_q/bn1.num_batches_tracked", torch::tensor(7, torch::kInt64)},
      {"encoder_k/fc.bias", torch::arange(5, torch::kFloat64)},
      {"queue/labels", torch::arange(6, torch::kUInt8)},
      {"queue/bf16", torch::ones({2, 2}, torch::kBFloat16)},
      {"queue/empty", torch::empty({0, 3}, torch::kFloat32)},
      {"rng/mask", torch::tensor({true, false, true})},
  };
  moco::ckpt::Manifest manifest;
  manifest.step = 10;
  manifest.epoch = 0.5;
  manifest.global_batch = 32;
  manifest.config_yaml = "{}";
  manifest.torch_version = "fuzz";
  moco::ckpt::H5TensorWriter writer(shard_path());
  for (const auto& [name, t] : tensors) {
    writer.write(name, t);
    moco::ckpt::TensorRecord r;
    r.name = name;
    r.shape = t.sizes().vec();
    r.dtype = moco::ckpt::dtype_name(t.scalar_type());
    r.crc32 = moco::ckpt::tensor_crc32(t);
    r.bytes = static_cast<int64_t>(t.nbytes());
    manifest.tensors.push_back(r);
  }
  writer.close();
  std::ofstream(fs::path(folder().path()) / moco::ckpt::kManifestFile) << moco::ckpt::manifest_to_json(manifest);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  write_checkpoint();
  if (const char* out = std::getenv("MOCO_FUZZ_SEED_OUT")) {
    fs::create_directories(out);
    fs::copy_file(shard_path(), fs::path(out) / "shard_seed.h5", fs::copy_options::overwrite_existing);
    fs::copy_file(fs::path(folder().path()) / moco::ckpt::kManifestFile, fs::path(out) / moco::ckpt::kManifestFile,
                  fs::copy_options::overwrite_existing);
    std::exit(0);
  }
  return 0;
}

namespace {

void expect_named(const moco::ckpt::CheckpointError& e) {
  if (std::string(e.what()).find(shard_path()) == std::string::npos)
    moco::fuzz::fuzz_bug(std::string("error does not name the shard file: ") + e.what());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moco::fuzz::write_file(shard_path(), data, size);
  // What a resume and `moco_ckpt verify` do: every tensor, checked against the manifest.
  try {
    moco::ckpt::CheckpointReader reader(folder().path());
    reader.verify_all();
  } catch (const moco::ckpt::CheckpointError& e) {
    expect_named(e);
  }
  // The file's own account of itself, without a manifest: its datasets, their shapes and dtypes.
  try {
    moco::ckpt::H5TensorReader file(shard_path());
    for (const auto& name : file.list()) {
      try {
        (void)file.describe(name);
      } catch (const moco::ckpt::CheckpointError& e) {
        expect_named(e);
      }
    }
  } catch (const moco::ckpt::CheckpointError& e) {
    expect_named(e);
  }
  return 0;
}
