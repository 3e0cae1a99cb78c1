#include "data/idx.h"

#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
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
constexpr int64_t kMnistClasses = 10;

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
    read_gzip_trailer();
  }
  ~GzReader() { gzclose(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  const std::string& path() const { return path_; }

  // zlib reports a gzip stream that ends early as a short read, whether the file was cut or a
  // damaged byte sent the decoder past the data's end. The gzip trailer tells them apart: a whole
  // file still ends with ISIZE, the size of the uncompressed data (mod 2^32), which a cut one
  // almost never does by chance. `expected_total` is the file's uncompressed size per its header.
  bool is_gzip() const { return trailer_size_.has_value(); }
  bool damaged_not_cut(uint64_t expected_total) const {
    return trailer_size_.has_value() && *trailer_size_ == static_cast<uint32_t>(expected_total);
  }

  // The most bytes the file can decompress to: its size when plain; when gzip, its size times 1032,
  // deflate's largest compression ratio. Unknown where the size cannot be read. A header claiming
  // more is refused before its payload is allocated: 16 bytes must not cost gigabytes of memory.
  bool gzip_magic() const { return gzip_magic_; }
  std::optional<uint64_t> max_data_bytes() const {
    if (!file_bytes_) return std::nullopt;
    return gzip_magic_ ? *file_bytes_ * kDeflateMaxRatio : *file_bytes_;
  }
  static constexpr uint64_t kDeflateMaxRatio = 1032;

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

  // What follows the data read so far: nothing (a gzip stream ended with its checksum verified, or
  // a plain file's end), more bytes, or a gzip stream cut before its end.
  enum class End { kClean, kMoreData, kStreamCut };
  End end_state() {
    uint8_t byte = 0;
    const int got = gzread(file_, &byte, 1);
    if (got < 0) fail_corrupt();
    if (got > 0) return End::kMoreData;
    int code = Z_OK;
    gzerror(file_, &code);
    return code == Z_BUF_ERROR ? End::kStreamCut : End::kClean;
  }

 private:
  [[noreturn]] void fail_corrupt() {
    int code = Z_OK;
    const char* zlib_message = gzerror(file_, &code);
    std::string message = zlib_message != nullptr ? zlib_message : "unknown error";
    // zlib prefixes its message with the path, which fail() adds already.
    if (message.rfind(path_ + ": ", 0) == 0) message.erase(0, path_.size() + 2);
    fail(path_,
         "corrupt compressed data after " + std::to_string(position_) + " decompressed bytes (zlib: " + message + ")");
  }

  void read_gzip_trailer() {
    std::ifstream in(path_, std::ios::binary | std::ios::ate);
    const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : -1;
    if (size < 0) return;
    file_bytes_ = static_cast<uint64_t>(size);
    std::array<unsigned char, 4> bytes{};
    in.seekg(0);
    in.read(reinterpret_cast<char*>(bytes.data()), 2);
    if (!in || bytes[0] != 0x1f || bytes[1] != 0x8b) return;  // not gzip: read as a plain file
    gzip_magic_ = true;
    if (size < 18) return;  // a gzip member has a 10-byte header and an 8-byte trailer
    in.seekg(size - 4);
    in.read(reinterpret_cast<char*>(bytes.data()), 4);
    if (!in) return;
    trailer_size_ =
        uint32_t{bytes[0]} | (uint32_t{bytes[1]} << 8) | (uint32_t{bytes[2]} << 16) | (uint32_t{bytes[3]} << 24);
  }

  std::string path_;
  gzFile file_ = nullptr;
  uint64_t position_ = 0;
  std::optional<uint32_t> trailer_size_;  // ISIZE of a gzip file
  std::optional<uint64_t> file_bytes_;
  bool gzip_magic_ = false;
};

uint32_t big_endian32(const uint8_t* bytes) {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) | uint32_t{bytes[3]};
}

// Reads the magic number and `rank` dimensions, validating both.
std::vector<int64_t> read_header(GzReader& reader, uint32_t magic, int rank, const char* kind) {
  std::array<uint8_t, 16> raw{};
  const uint64_t want = 4 * static_cast<uint64_t>(1 + rank);
  const uint64_t got = reader.read(raw.data(), want);
  // Before the header is in, the data's size is unknown and the trailer cannot tell a cut gzip file
  // from a damaged one.
  const std::string cut = reader.is_gzip() ? "truncated or corrupt (the gzip stream ends early)" : "truncated";
  if (got < 4) {
    fail(reader.path(),
         cut + ": expected a " + std::to_string(want) + "-byte IDX header, got " + std::to_string(got) + " bytes");
  }
  const uint32_t found = big_endian32(raw.data());
  if (found != magic) {
    fail(reader.path(), "bad magic number " + hex32(found) + ", expected " + hex32(magic) + " (" + kind + ")");
  }
  if (got < want) {
    fail(reader.path(),
         cut + ": expected a " + std::to_string(want) + "-byte IDX header, got " + std::to_string(got) + " bytes");
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
  const uint64_t header = 4 * static_cast<uint64_t>(1 + shape.size());
  if (const auto most = reader.max_data_bytes(); most && header + count > *most) {
    if (!reader.gzip_magic()) {
      fail(reader.path(), "truncated: expected " + std::to_string(count) + " bytes of " + what + ", got " +
                              std::to_string(*most > header ? *most - header : 0));
    }
    std::ostringstream dims;
    for (size_t i = 0; i < shape.size(); ++i) dims << (i ? " x " : "") << shape[i];
    fail(reader.path(), "implausible dimensions " + dims.str() + " in the header: " + std::to_string(count) +
                            " bytes of " + what + ", more than a gzip file of " +
                            std::to_string(*most / GzReader::kDeflateMaxRatio) +
                            " bytes can hold (deflate compresses at most 1032:1)");
  }
  torch::Tensor out;
  try {
    out = torch::empty(shape, torch::kUInt8);
  } catch (const std::exception&) {
    fail(reader.path(), "cannot allocate " + std::to_string(count) + " bytes of " + what);
  }
  const uint64_t got = reader.read(out.data_ptr<uint8_t>(), count);
  if (got != count) {
    if (reader.damaged_not_cut(header + count)) {
      fail(reader.path(), "corrupt compressed data: the gzip stream ends after " + std::to_string(got) + " of " +
                              std::to_string(count) + " bytes of " + what +
                              " though the file is whole (its gzip trailer records the full size)");
    }
    fail(reader.path(),
         "truncated: expected " + std::to_string(count) + " bytes of " + what + ", got " + std::to_string(got));
  }
  const GzReader::End end = reader.end_state();
  if (end == GzReader::End::kStreamCut) {
    // Every byte the header announces arrived, but the stream stops before its CRC: unverified.
    if (reader.damaged_not_cut(header + count)) {
      fail(reader.path(), "corrupt compressed data: the gzip stream stops after the " + std::to_string(count) +
                              " bytes of " + what + ", before its checksum, though the file is whole");
    }
    fail(reader.path(), "truncated: the gzip stream stops after the " + std::to_string(count) + " bytes of " + what +
                            ", before its checksum");
  }
  if (end == GzReader::End::kMoreData) {
    if (reader.damaged_not_cut(header + count)) {
      fail(reader.path(), "corrupt compressed data: the gzip stream decompresses to more than the " +
                              std::to_string(count) + " bytes of " + what + " its header and gzip trailer record");
    }
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
    throw std::runtime_error(images_path + " holds " + std::to_string(images.size(0)) + " images but " + labels_path +
                             " holds " + std::to_string(labels.size(0)) + " labels");
  }
  // MNIST and Fashion-MNIST have ten classes: any other label is a damaged or foreign file, and
  // accepting it would silently add classes to the kNN monitor.
  if (labels.numel() > 0) {
    const torch::Tensor bad = (labels >= kMnistClasses).nonzero();
    if (bad.numel() > 0) {
      const int64_t at = bad[0][0].item<int64_t>();
      fail(labels_path, "label " + std::to_string(labels[at].item<int64_t>()) + " at index " + std::to_string(at) +
                            " is outside [0, " + std::to_string(kMnistClasses) + ") (" + std::to_string(bad.size(0)) +
                            " such label(s))");
    }
  }
  return std::make_shared<InMemoryDataset>(images.unsqueeze(1), std::move(labels), kMnistClasses);
}

SplitListing mnist_style_listing(const std::string& root, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  std::vector<ListedEntry> files;
  for (const char* stem : {"-images-idx3-ubyte", "-labels-idx1-ubyte"}) {
    const std::string path = find_file(root, prefix + stem);
    std::ifstream in(path, std::ios::binary);
    std::vector<char> chunk(1 << 20);
    uLong crc = crc32(0L, Z_NULL, 0);
    int64_t size = 0;
    while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
      crc = crc32(crc, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(in.gcount()));
      size += in.gcount();
    }
    if (!in.eof()) fail(path, "cannot read the file");
    files.push_back({std::filesystem::path(path).filename().string(), size, -1, crc});
  }
  const int64_t images = read_idx_labels(find_file(root, prefix + "-labels-idx1-ubyte")).size(0);
  return {"idx", root + "/" + prefix + "-*-ubyte", images, 2,
          [files](int64_t i) { return files[static_cast<size_t>(i)]; }};
}

MnistSplits load_mnist_style_splits(const std::string& root) {
  MnistSplits splits{load_mnist_style(root, Split::kTrain), load_mnist_style(root, Split::kTest)};
  if (splits.test->height() != splits.train->height() || splits.test->width() != splits.train->width()) {
    throw std::runtime_error(
        find_file(root, "t10k-images-idx3-ubyte") + ": test images are " + std::to_string(splits.test->height()) + "x" +
        std::to_string(splits.test->width()) + " but " + find_file(root, "train-images-idx3-ubyte") + " holds " +
        std::to_string(splits.train->height()) + "x" + std::to_string(splits.train->width()) + " train images");
  }
  return splits;
}

}  // namespace moco::data
