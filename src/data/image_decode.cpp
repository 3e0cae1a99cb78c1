#include "data/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <memory>
#include <vector>

namespace moco::data {
namespace {

// PIL's limit (Image.MAX_IMAGE_PIXELS * 2, where it raises DecompressionBombError): a damaged header
// that claims 65535 x 65535 pixels must be a bad file, not a 12 GiB allocation that ends the run.
constexpr int64_t kMaxPixels = 2 * 89478485;

void check_pixels(int64_t height, int64_t width, const char* what) {
  if (height <= 0 || width <= 0 || height * width > kMaxPixels)
    throw DecodeError(std::string(what) + " of " + std::to_string(width) + "x" + std::to_string(height) +
                      " pixels (more than " + std::to_string(kMaxPixels) +
                      ": a damaged header or a decompression bomb)");
}

bool is_jpeg(const uint8_t* b, size_t n) { return n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF; }
bool is_png(const uint8_t* b, size_t n) { return n >= 8 && png_sig_cmp(b, 0, 8) == 0; }

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

// Interleaved (HWC) to planar (CHW), replicating one channel to three.
Image planar_rgb(const uint8_t* hwc, int64_t height, int64_t width, int channels) {
  Image out(3, height, width);
  const int64_t n = height * width;
  for (int64_t c = 0; c < 3; ++c) {
    uint8_t* dst = out.channel(c);
    const int64_t from = channels == 1 ? 0 : c;
    for (int64_t i = 0; i < n; ++i) dst[i] = hwc[i * channels + from];
  }
  return out;
}

ImageSize jpeg_size(const uint8_t* bytes, size_t size, int* colorspace = nullptr) {
  TjHandle tj;
  int width = 0, height = 0, subsamp = 0, space = 0;
  if (!tj.h ||
      tjDecompressHeader3(tj.h, bytes, static_cast<unsigned long>(size), &width, &height, &subsamp, &space) != 0)
    throw DecodeError(std::string("JPEG header: ") + tjGetErrorStr2(tj.h));
  if (colorspace) *colorspace = space;
  check_pixels(height, width, "JPEG");
  return {height, width};
}

Decoded decode_jpeg(const uint8_t* bytes, size_t size, int64_t min_height, int64_t min_width) {
  int colorspace = 0;
  const ImageSize full = jpeg_size(bytes, size, &colorspace);
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) throw DecodeError("CMYK JPEG (not supported)");
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  tjscalingfactor best{1, 1};
  double best_scale = 1.0;
  for (int i = 0; i < count; ++i) {
    const tjscalingfactor f = factors[i];
    const double s = static_cast<double>(f.num) / f.denom;
    if (s > 1.0 || s >= best_scale) continue;
    if (TJSCALED(full.width, f) >= min_width && TJSCALED(full.height, f) >= min_height && min_width > 0 &&
        min_height > 0)
      best = f, best_scale = s;
  }
  const int width = TJSCALED(static_cast<int>(full.width), best),
            height = TJSCALED(static_cast<int>(full.height), best);
  const bool gray = colorspace == TJCS_GRAY;
  std::vector<uint8_t> hwc(static_cast<size_t>(width) * height * (gray ? 1 : 3));
  TjHandle tj;
  // TJFLAG_STOPONWARNING: a truncated or damaged stream is an error, not a half-grey picture.
  if (!tj.h || tjDecompress2(tj.h, bytes, static_cast<unsigned long>(size), hwc.data(), width, 0, height,
                             gray ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING) != 0)
    throw DecodeError(std::string("JPEG: ") + tjGetErrorStr2(tj.h));
  return {planar_rgb(hwc.data(), height, width, gray ? 1 : 3),
          static_cast<double>(width) / static_cast<double>(full.width)};
}

struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data;
  size_t size, offset = 0;
  std::string error;
  ~PngReader() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

void png_read(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (r->offset + n > r->size) png_error(png, "truncated");
  std::memcpy(out, r->data + r->offset, n);
  r->offset += n;
}

void png_fail(png_structp png, png_const_charp message) {
  static_cast<PngReader*>(png_get_error_ptr(png))->error = message;
  png_longjmp(png, 1);
}

void png_warn(png_structp, png_const_charp) {}

// n big-endian 16-bit samples at `samples` become n bytes there, each min(value, 255).
void clip_grey16_in_place(uint8_t* samples, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const unsigned value = (unsigned{samples[2 * i]} << 8) | samples[2 * i + 1];
    samples[i] = static_cast<uint8_t>(std::min(value, 255u));
  }
}

Decoded decode_png(const uint8_t* bytes, size_t size) {
  PngReader r;
  r.data = bytes;
  r.size = size;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_fail, png_warn);
  if (!r.png) throw DecodeError("PNG: out of memory");
  r.info = png_create_info_struct(r.png);
  if (!r.info) throw DecodeError("PNG: out of memory");
  std::vector<uint8_t> hwc;
  std::vector<png_bytep> rows;
  png_uint_32 width = 0, height = 0;
  // libpng reports errors by longjmp: nothing with a destructor may be created below this point
  // (the vectors above live outside it).
  if (setjmp(png_jmpbuf(r.png))) throw DecodeError("PNG: " + r.error);
  png_set_read_fn(r.png, &r, png_read);
  png_read_info(r.png, r.info);
  width = png_get_image_width(r.png, r.info);
  height = png_get_image_height(r.png, r.info);
  if (int64_t{width} * int64_t{height} > kMaxPixels)
    png_error(r.png, "more pixels than a photograph can hold (a damaged header)");
  // PIL reads 16-bit greyscale as 32-bit integers (mode I), and convert("RGB") clips them at 255;
  // every other 16-bit PNG it cuts to its high byte, as png_set_strip_16 does below.
  if (png_get_color_type(r.png, r.info) == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(r.png, r.info) == 16) {
    png_set_interlace_handling(r.png);
    png_read_update_info(r.png, r.info);
    if (png_get_rowbytes(r.png, r.info) != static_cast<size_t>(width) * 2) png_error(r.png, "unexpected row layout");
    hwc.resize(static_cast<size_t>(width) * height * 2);
    rows.resize(height);
    for (png_uint_32 y = 0; y < height; ++y) rows[y] = hwc.data() + static_cast<size_t>(y) * width * 2;
    png_read_image(r.png, rows.data());
    png_read_end(r.png, nullptr);
    clip_grey16_in_place(hwc.data(), static_cast<size_t>(width) * height);
    return {planar_rgb(hwc.data(), height, width, 1), 1.0};
  }
  // As PIL's convert("RGB"): palette expanded, 16 bits cut to 8, grey replicated, alpha dropped.
  png_set_expand(r.png);
  png_set_strip_16(r.png);
  png_set_strip_alpha(r.png);
  png_set_gray_to_rgb(r.png);
  png_set_interlace_handling(r.png);
  png_read_update_info(r.png, r.info);
  if (png_get_rowbytes(r.png, r.info) != static_cast<size_t>(width) * 3) png_error(r.png, "unexpected row layout");
  hwc.resize(static_cast<size_t>(width) * height * 3);
  rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = hwc.data() + static_cast<size_t>(y) * width * 3;
  png_read_image(r.png, rows.data());
  png_read_end(r.png, nullptr);
  return {planar_rgb(hwc.data(), height, width, 3), 1.0};
}

}  // namespace

ImageSize image_size(const uint8_t* bytes, size_t size) {
  if (is_jpeg(bytes, size)) return jpeg_size(bytes, size);
  if (is_png(bytes, size)) {
    // IHDR is the first chunk: signature (8), length (4), "IHDR" (4), width (4), height (4).
    if (size < 24 || std::memcmp(bytes + 12, "IHDR", 4) != 0) throw DecodeError("PNG without an IHDR chunk");
    auto be32 = [&](size_t at) {
      return (int64_t{bytes[at]} << 24) | (int64_t{bytes[at + 1]} << 16) | (int64_t{bytes[at + 2]} << 8) |
             int64_t{bytes[at + 3]};
    };
    const ImageSize s{be32(20), be32(16)};
    check_pixels(s.height, s.width, "PNG");
    return s;
  }
  throw DecodeError("neither a JPEG nor a PNG");
}

Decoded decode_image(const uint8_t* bytes, size_t size, int64_t min_height, int64_t min_width) {
  if (is_jpeg(bytes, size)) return decode_jpeg(bytes, size, min_height, min_width);
  if (is_png(bytes, size)) return decode_png(bytes, size);
  throw DecodeError("neither a JPEG nor a PNG");
}

}  // namespace moco::data
