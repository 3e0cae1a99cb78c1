#include "ckpt/manifest.h"

#include "ckpt/checkpoint_dir.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
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
    tensors.push_back({{"name", t.name},
                       {"shard", t.shard},
                       {"rank_local", t.rank_local},
                       {"shape", t.shape},
                       {"dtype", t.dtype},
                       {"crc32", t.crc32},
                       {"bytes", t.bytes}});
  nlohmann::json j{{"format", "moco_dist checkpoint"},
                   {"format_version", m.format_version},
                   {"step", m.step},
                   {"epoch", m.epoch},
                   {"world_size", m.world_size},
                   {"global_batch", m.global_batch},
                   {"torch_version", m.torch_version},
                   {"created_utc", m.created_utc},
                   {"config_yaml", m.config_yaml},
                   {"notes", m.notes},
                   {"tensors", tensors}};
  return j.dump(1) + "\n";
}

namespace {

// An integer field in [lo, hi]. nlohmann's get<int>() would convert a float or an out-of-range
// number with a plain cast: undefined behaviour for 1e300, a silent wrap for 2^40 (found by
// fuzz/fuzz_ckpt_manifest.cpp). Only JSON integers in range are taken.
template <typename T>
T integer(const nlohmann::json& value, const std::string& what, const std::string& where,
          int64_t lo = std::numeric_limits<T>::min(), uint64_t hi = std::numeric_limits<T>::max()) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v <= hi && (lo <= 0 || v >= static_cast<uint64_t>(lo))) return static_cast<T>(v);
  } else if (value.is_number_integer()) {
    const auto v = value.get<int64_t>();
    if (v >= lo && (v < 0 || static_cast<uint64_t>(v) <= hi)) return static_cast<T>(v);
  }
  throw CheckpointError(
      fmt::format("{}: {} must be an integer in [{}, {}], not {}", where, what, lo, hi, value.dump()));
}

}  // namespace

Manifest manifest_from_json(const std::string& text, const std::string& where) {
  Manifest m;
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.value("format", "") != "moco_dist checkpoint")
      throw CheckpointError(where + ": not a moco_dist checkpoint manifest");
    m.format_version = integer<int>(j.at("format_version"), "format_version", where);
    if (m.format_version != kFormatVersion)
      throw CheckpointError(
          fmt::format("{}: format version {}, this build reads version {}", where, m.format_version, kFormatVersion));
    m.step = integer<int64_t>(j.at("step"), "step", where, 0);
    m.epoch = j.at("epoch").get<double>();
    if (!std::isfinite(m.epoch) || m.epoch < 0)
      throw CheckpointError(fmt::format("{}: epoch {} is not a finite number >= 0", where, m.epoch));
    m.world_size = integer<int>(j.at("world_size"), "world_size", where, 1);
    m.global_batch = integer<int64_t>(j.at("global_batch"), "global_batch", where, 0);
    m.torch_version = j.at("torch_version").get<std::string>();
    m.created_utc = j.value("created_utc", "");
    m.config_yaml = j.at("config_yaml").get<std::string>();
    const auto notes = j.value("notes", nlohmann::json::object());
    if (!notes.is_object()) throw CheckpointError(where + ": notes is not an object of texts");
    for (const auto& [name, text] : notes.items()) m.notes[name] = text.get<std::string>();
    int64_t total = 0;
    for (const auto& t : j.at("tensors")) {
      TensorRecord r;
      r.name = t.at("name").get<std::string>();
      const std::string what = "tensor '" + r.name + "'";
      r.shard = integer<int>(t.at("shard"), what + ": shard", where, 0, static_cast<uint64_t>(m.world_size - 1));
      r.rank_local = t.at("rank_local").get<bool>();
      for (const auto& d : t.at("shape")) r.shape.push_back(integer<int64_t>(d, what + ": a dimension", where, 0));
      r.dtype = t.at("dtype").get<std::string>();
      r.crc32 = integer<uint32_t>(t.at("crc32"), what + ": crc32", where);
      r.bytes = integer<int64_t>(t.at("bytes"), what + ": bytes", where, 0);
      // The byte count follows from shape and dtype; their sum must fit the int64 total_bytes() returns.
      torch::ScalarType dtype;
      try {
        dtype = dtype_from_name(r.dtype);
      } catch (const CheckpointError& e) {
        throw CheckpointError(fmt::format("{}: {}: {}", where, what, e.what()));
      }
      int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype));
      bool overflow = false;
      for (const int64_t d : r.shape) overflow |= __builtin_mul_overflow(bytes, d, &bytes);
      if (overflow || bytes != r.bytes)
        throw CheckpointError(fmt::format("{}: {}: bytes {} do not match shape [{}] of {}", where, what, r.bytes,
                                          fmt::join(r.shape, ", "), r.dtype));
      if (__builtin_add_overflow(total, r.bytes, &total))
        throw CheckpointError(fmt::format("{}: the tensors' bytes add up to more than int64 holds", where));
      m.tensors.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(where + ": malformed manifest: " + e.what());
  }
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
      crcs[static_cast<size_t>(b)] =
          crc32(crc32(0L, Z_NULL, 0), data + b * kBlock, static_cast<uInt>(std::min(kBlock, n - b * kBlock)));
  });
  uLong crc = crc32(0L, Z_NULL, 0);
  for (int64_t b = 0; b < blocks; ++b)
    crc = crc32_combine(crc, crcs[static_cast<size_t>(b)], static_cast<z_off_t>(std::min(kBlock, n - b * kBlock)));
  return static_cast<uint32_t>(crc);
}

CheckpointReader::CheckpointReader(std::string checkpoint_dir)
    : dir_(std::move(checkpoint_dir)), manifest_(read_manifest(dir_)) {
  check_committed(dir_, manifest_.step);
}

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
    throw CheckpointError(
        fmt::format("{}: CRC-32 {:08x} does not match the manifest's {:08x} (corrupt data)", where, crc, record.crc32));
  return tensor;
}

void CheckpointReader::verify_all() {
  for (const auto& record : manifest_.tensors) read(record);
}

}  // namespace moco::ckpt
