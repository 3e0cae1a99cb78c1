// defines: Manifest (what a committed checkpoint holds: metadata and every tensor's shard, shape,
// dtype and CRC-32), its JSON file, CheckpointReader (reads and verifies one checkpoint folder
// without any collectives: tools, tests, and each rank's share of a load)
#pragma once

#include "ckpt/h5_tensor_file.h"

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moco::ckpt {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kManifestFile = "manifest.json";

struct TensorRecord {
  std::string name;         // "encoder_q/layer1.0.conv1.weight": the dataset path inside its shard
  int shard = 0;            // the rank whose shard file holds it
  bool rank_local = false;  // one copy per rank (in that rank's shard) instead of one for all
  std::vector<int64_t> shape;
  std::string dtype;   // dtype_name()
  uint32_t crc32 = 0;  // of the tensor's contiguous bytes
  int64_t bytes = 0;
};

struct Manifest {
  int format_version = kFormatVersion;
  int64_t step = 0;
  double epoch = 0;
  int world_size = 1;
  int64_t global_batch = 0;
  std::string config_yaml;    // the run's effective config
  std::string torch_version;  // LibTorch that wrote it
  std::string created_utc;
  // Small texts the run keeps with its state, by name: the train split's fingerprint
  // ("train_data"), moco_lincls's backbone ("pretrained"). Absent from checkpoints written before.
  std::map<std::string, std::string> notes;
  std::vector<TensorRecord> tensors;

  std::string shard_file(int shard) const;  // "shard-<r>-of-<world>.h5"
  // The record of a replicated tensor, or of rank `shard`'s copy of a rank-local one; null if absent.
  const TensorRecord* find(const std::string& name, int shard = -1) const;
  int64_t total_bytes() const;
};

std::string shard_file_name(int rank, int world_size);

// manifest.json as text, and back. Parsing checks the format name and version and throws
// CheckpointError naming `where` on anything missing or malformed.
std::string manifest_to_json(const Manifest& manifest);
Manifest manifest_from_json(const std::string& text, const std::string& where);
Manifest read_manifest(const std::string& checkpoint_dir);

uint32_t tensor_crc32(const torch::Tensor& tensor);  // CRC-32 (zlib) of the contiguous CPU bytes

class CheckpointReader {
 public:
  explicit CheckpointReader(std::string checkpoint_dir);  // reads the manifest; throws CheckpointError
  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  // Reads one tensor and checks it against the manifest (shape, dtype, CRC-32; Fletcher-32 is
  // checked by HDF5 on the way). Throws CheckpointError naming the shard file and the tensor.
  torch::Tensor read(const TensorRecord& record);
  // Reads every tensor; throws at the first bad one.
  void verify_all();

 private:
  std::string dir_;
  Manifest manifest_;
  std::map<int, std::unique_ptr<H5TensorReader>> shards_;
};

}  // namespace moco::ckpt
