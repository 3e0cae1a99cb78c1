// The IDX reader (MNIST / Fashion-MNIST files, plain or gzip). The first input byte chooses how the
// rest reaches the reader: 0 as it is (plain files, and gzip files mutated byte by byte), 1 gzip-
// compressed whole (the IDX parser behind a valid gzip stream), 2 compressed and then cut at a length
// taken from the next two bytes (streams that end early). Both readers, images and labels, see every
// input. A std::runtime_error naming the file is the expected answer to bad input; anything else (a
// c10::Error, another exception, a sanitizer report, an allocation over libFuzzer's limit) is a bug.
#include "data/idx.h"
#include "fuzz_util.h"

#include <torch/torch.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::vector<uint8_t> gzip(const uint8_t* data, size_t size, const std::string& scratch) {
  gzFile file = gzopen(scratch.c_str(), "wb");
  if (file == nullptr) std::abort();
  if (size > 0 && gzwrite(file, data, static_cast<unsigned>(size)) != static_cast<int>(size)) std::abort();
  if (gzclose(file) != Z_OK) std::abort();
  std::ifstream in(scratch, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void read_both(const std::string& path) {
  const std::string expected = path + ": ";
  for (int labels = 0; labels < 2; ++labels) {
    try {
      const torch::Tensor t = labels ? moco::data::read_idx_labels(path) : moco::data::read_idx_images(path);
      if (t.dim() != (labels ? 1 : 3) || t.scalar_type() != (labels ? torch::kInt64 : torch::kUInt8))
        moco::fuzz::fuzz_bug("the reader returned a tensor of the wrong rank or dtype");
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()).rfind(expected, 0) != 0)
        moco::fuzz::fuzz_bug(std::string("error does not name the file: ") + e.what());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const moco::fuzz::ScratchGuard file(moco::fuzz::scratch_path("idx"));
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 3;
  ++data, --size;
  if (mode == 0) {
    moco::fuzz::write_file(file.path(), data, size);
  } else {
    size_t keep = SIZE_MAX;
    if (mode == 2) {
      if (size < 2) return 0;
      keep = (size_t{data[0]} << 8) | data[1];
      data += 2, size -= 2;
    }
    std::vector<uint8_t> packed = gzip(data, size, file.path());
    if (keep < packed.size()) packed.resize(keep);
    moco::fuzz::write_file(file.path(), packed.data(), packed.size());
  }
  read_both(file.path());
  return 0;
}
