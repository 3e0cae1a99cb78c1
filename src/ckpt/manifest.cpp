#include "ckpt/manifest.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace moco::ckpt {

std::string shard_file_name(int rank, int world_size) { return fmt::format("shard-{}-of-{}.h5", rank, world_size); }

std::string Manifest::shard_file(int shard) const { return shard_file_name(shard, world_size); }

const TensorRecord* Manifest::find(const std::string& name, int shard) const {
  for (const auto& t : tensors)
    if (t.name == name && (!t.rank_local || t.shard == shard)) return &t;
  return nullptr;
}

int64_t Manifest::total_bytes() const {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.bytes;
  return total;
}

std::string manifest_to_json(const Manifest& m) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : m.tensors)
    tensors.push_back({{"name", t.name}, {"shard", t.shard}, {"rank_local", t.rank_local}, {"shape", t.shape},
                       {"dtype", t.dtype}, {"crc32", t.crc32}, {"bytes", t.bytes}});
  nlohmann::json j{{"format", "moco_dist checkpoint"}, {"format_version", m.format_version}, {"step", m.step},
                   {"epoch", m.epoch}, {"world_size", m.world_size}, {"global_batch", m.global_batch},
                   {"torch_version", m.torch_version}, {"created_utc", m.created_utc}, {"config_yaml", m.config_yaml},
                   {"tensors", tensors}};
  return j.dump(1) + "\n";
}

Manifest manifest_from_json(const std::string& text, const std::string& where) {
  Manifest m;
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.value("format", "") != "moco_dist checkpoint") throw CheckpointError(where + ": not a moco_dist checkpoint manifest");
    m.format_version = j.at("format_version").get<int>();
    if (m.format_version != kFormatVersion)
      throw CheckpointError(fmt::format("{}: format version {}, this build reads version {}", where, m.format_version, kFormatVersion));
    m.step = j.at("step").get<int64_t>();
    m.epoch = j.at("epoch").get<double>();
    m.world_size = j.at("world_size").get<int>();
    m.global_batch = j.at("global_batch").get<int64_t>();
    m.torch_version = j.at("torch_version").get<std::string>();
    m.created_utc = j.value("created_utc", "");
    m.config_yaml = j.at("config_yaml").get<std::string>();
    for (const auto& t : j.at("tensors")) {
      TensorRecord r;
      r.name = t.at("name").get<std::string>();
      r.shard = t.at("shard").get<int>();
      r.rank_local = t.at("rank_local").get<bool>();
      r.shape = t.at("shape").get<std::vector<int64_t>>();
      r.dtype = t.at("dtype").get<std::string>();
      r.crc32 = t.at("crc32").get<uint32_t>();
      r.bytes = t.at("bytes").get<int64_t>();
      if (r.shard < 0 || r.shard >= m.world_size)
        throw CheckpointError(fmt::format("{}: tensor '{}' names shard {} of a world of {}", where, r.name, r.shard, m.world_size));
      m.tensors.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(where + ": malformed manifest: " + e.what());
  }
  if (m.world_size < 1) throw CheckpointError(where + ": world_size must be positive");
  return m;
}

Manifest read_manifest(const std::string& checkpoint_dir) {
  const auto path = (std::filesystem::path(checkpoint_dir) / kManifestFile).string();
  std::ifstream in(path);
  if (!in) throw CheckpointError(path + ": missing or unreadable (an incomplete checkpoint has no manifest)");
  std::stringstream text;
  text << in.rdbuf();
  return manifest_from_json(text.str(), path);
}

uint32_t tensor_crc32(const torch::Tensor& tensor) {
  // Blocks in parallel, joined with crc32_combine: a single-threaded CRC would cost as much as the
  // write itself.
  constexpr int64_t kBlock = 4 << 20;
  const auto t = tensor.detach().to(torch::kCPU).contiguous();
  const auto* data = static_cast<const Bytef*>(t.data_ptr());
  const auto n = static_cast<int64_t>(t.nbytes());
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<uLong> crcs(static_cast<size_t>(blocks));
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      crcs[static_cast<size_t>(b)] = crc32(crc32(0L, Z_NULL, 0), data + b * kBlock, static_cast<uInt>(std::min(kBlock, n - b * kBlock)));
  });
  uLong crc = crc32(0L, Z_NULL, 0);
  for (int64_t b = 0; b < blocks; ++b) crc = crc32_combine(crc, crcs[static_cast<size_t>(b)], static_cast<z_off_t>(std::min(kBlock, n - b * kBlock)));
  return static_cast<uint32_t>(crc);
}

CheckpointReader::CheckpointReader(std::string checkpoint_dir)
    : dir_(std::move(checkpoint_dir)), manifest_(read_manifest(dir_)) {}

torch::Tensor CheckpointReader::read(const TensorRecord& record) {
  auto& shard = shards_[record.shard];
  const auto file = (std::filesystem::path(dir_) / manifest_.shard_file(record.shard)).string();
  if (!shard) shard = std::make_unique<H5TensorReader>(file);
  const std::string where = file + ": tensor '" + record.name + "'";
  // Checked before reading: the allocation follows the file's claim, and only the manifest vouches for it.
  const StoredTensor stored = shard->describe(record.name);
  if (stored.shape != record.shape || dtype_name(stored.dtype) != record.dtype)
    throw CheckpointError(fmt::format("{}: stored as {} {}, the manifest says {} {}", where, dtype_name(stored.dtype),
                                      fmt::join(stored.shape, "x"), record.dtype, fmt::join(record.shape, "x")));
  auto tensor = shard->read(record.name);
  const uint32_t crc = tensor_crc32(tensor);
  if (crc != record.crc32)
    throw CheckpointError(fmt::format("{}: CRC-32 {:08x} does not match the manifest's {:08x} (corrupt data)", where, crc, record.crc32));
  return tensor;
}

void CheckpointReader::verify_all() {
  for (const auto& record : manifest_.tensors) read(record);
}

}  // namespace moco::ckpt
