#include "data/idx.h"

#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace moco::data {
namespace {

constexpr uint32_t kImageMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kLabelMagic = 0x00000801;  // unsigned byte, 1 dimension
// No IDX file we read comes near this; a header claiming more is corrupt, and refusing it early
// avoids reading gigabytes before reporting truncation.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 36;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string hex32(uint32_t value) {
  std::ostringstream out;
  out << "0x" << std::hex;
  out.width(8);
  out.fill('0');
  out << value;
  return out.str();
}

// gzopen reads gzip and plain files alike, so one reader serves both .gz and uncompressed IDX.
class GzReader {
 public:
  explicit GzReader(std::string path) : path_(std::move(path)) {
    errno = 0;
    file_ = gzopen(path_.c_str(), "rb");
    if (file_ == nullptr) {
      fail(path_, std::string("cannot open: ") + (errno != 0 ? std::strerror(errno) : "gzopen failed"));
    }
  }
  ~GzReader() { gzclose(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  const std::string& path() const { return path_; }

  // Reads up to `count` bytes into `out`; fewer only where the data ends. zlib reports a gzip
  // stream cut short as a short read (Z_BUF_ERROR), so the caller names it as truncation; only
  // corrupt compressed data (a CRC or format error) fails here.
  uint64_t read(uint8_t* out, uint64_t count) {
    uint64_t done = 0;
    while (done < count) {
      // gzread takes an unsigned int length; chunking keeps huge payloads within it.
      const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(count - done, 1u << 30));
      const int got = gzread(file_, out + done, chunk);
      if (got < 0) fail_corrupt();
      if (got == 0) break;
      done += static_cast<uint64_t>(got);
      position_ += static_cast<uint64_t>(got);
    }
    return done;
  }

  bool at_end() {
    uint8_t byte = 0;
    const int got = gzread(file_, &byte, 1);
    if (got < 0) fail_corrupt();
    return got == 0;
  }

 private:
  [[noreturn]] void fail_corrupt() {
    int code = Z_OK;
    const char* zlib_message = gzerror(file_, &code);
    std::string message = zlib_message != nullptr ? zlib_message : "unknown error";
    // zlib prefixes its message with the path, which fail() adds already.
    if (message.rfind(path_ + ": ", 0) == 0) message.erase(0, path_.size() + 2);
    fail(path_, "corrupt compressed data after " + std::to_string(position_) + " decompressed bytes (zlib: " +
                    message + ")");
  }

  std::string path_;
  gzFile file_ = nullptr;
  uint64_t position_ = 0;
};

uint32_t big_endian32(const uint8_t* bytes) {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) | uint32_t{bytes[3]};
}

// Reads the magic number and `rank` dimensions, validating both.
std::vector<int64_t> read_header(GzReader& reader, uint32_t magic, int rank, const char* kind) {
  std::array<uint8_t, 16> raw{};
  const uint64_t want = 4 * static_cast<uint64_t>(1 + rank);
  const uint64_t got = reader.read(raw.data(), want);
  if (got < 4) {
    fail(reader.path(), "truncated: expected a " + std::to_string(want) + "-byte IDX header, got " +
                            std::to_string(got) + " bytes");
  }
  const uint32_t found = big_endian32(raw.data());
  if (found != magic) {
    fail(reader.path(), "bad magic number " + hex32(found) + ", expected " + hex32(magic) + " (" + kind + ")");
  }
  if (got < want) {
    fail(reader.path(), "truncated: expected a " + std::to_string(want) + "-byte IDX header, got " +
                            std::to_string(got) + " bytes");
  }
  std::vector<int64_t> dims;
  for (int d = 0; d < rank; ++d) dims.push_back(big_endian32(raw.data() + 4 * (1 + d)));
  return dims;
}

uint64_t payload_bytes(const GzReader& reader, const std::vector<int64_t>& dims) {
  uint64_t total = 1;
  for (int64_t dim : dims) {
    // Each dim is below 2^32, so the product stays exact while it is below kMaxPayloadBytes.
    total *= static_cast<uint64_t>(dim);
    if (total > kMaxPayloadBytes) {
      std::ostringstream shape;
      for (size_t i = 0; i < dims.size(); ++i) shape << (i ? " x " : "") << dims[i];
      fail(reader.path(), "implausible dimensions " + shape.str() + " in the header");
    }
  }
  return total;
}

// Reads exactly `count` payload bytes and insists nothing follows them.
torch::Tensor read_payload(GzReader& reader, const std::vector<int64_t>& shape, const char* what) {
  const uint64_t count = payload_bytes(reader, shape);
  torch::Tensor out;
  try {
    out = torch::empty(shape, torch::kUInt8);
  } catch (const std::exception&) {
    fail(reader.path(), "cannot allocate " + std::to_string(count) + " bytes of " + what);
  }
  const uint64_t got = reader.read(out.data_ptr<uint8_t>(), count);
  if (got != count) {
    fail(reader.path(), "truncated: expected " + std::to_string(count) + " bytes of " + what + ", got " +
                            std::to_string(got));
  }
  if (!reader.at_end()) {
    fail(reader.path(), std::string("trailing data after the ") + std::to_string(count) + " bytes of " + what +
                            " the header announces");
  }
  return out;
}

std::string find_file(const std::string& root, const std::string& stem) {
  namespace fs = std::filesystem;
  const std::array<std::string, 2> names{stem + ".gz", stem};
  for (const auto& name : names) {
    const fs::path candidate = fs::path(root) / name;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  throw std::runtime_error(root + ": no " + stem + " file (tried " + names[0] + " and " + names[1] + ")");
}

}  // namespace

torch::Tensor read_idx_images(const std::string& path) {
  GzReader reader(path);
  const std::vector<int64_t> dims = read_header(reader, kImageMagic, 3, "idx3-ubyte images");
  if (dims[1] == 0 || dims[2] == 0) {
    fail(path, "empty image size " + std::to_string(dims[1]) + "x" + std::to_string(dims[2]) + " in the header");
  }
  return read_payload(reader, dims, "pixels");
}

torch::Tensor read_idx_labels(const std::string& path) {
  GzReader reader(path);
  const std::vector<int64_t> dims = read_header(reader, kLabelMagic, 1, "idx1-ubyte labels");
  return read_payload(reader, dims, "labels").to(torch::kInt64);
}

std::shared_ptr<InMemoryDataset> load_mnist_style(const std::string& root, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_path = find_file(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(root, prefix + "-labels-idx1-ubyte");
  torch::Tensor images = read_idx_images(images_path);
  torch::Tensor labels = read_idx_labels(labels_path);
  if (images.size(0) != labels.size(0)) {
    throw std::runtime_error(images_path + " holds " + std::to_string(images.size(0)) + " images but " +
                             labels_path + " holds " + std::to_string(labels.size(0)) + " labels");
  }
  // MNIST-style sets have ten classes; a larger label still gets a class rather than an error.
  const int64_t max_label = labels.numel() > 0 ? labels.max().item<int64_t>() : -1;
  const int64_t num_classes = std::max<int64_t>(10, max_label + 1);
  return std::make_shared<InMemoryDataset>(images.unsqueeze(1), std::move(labels), num_classes);
}

}  // namespace moco::data
