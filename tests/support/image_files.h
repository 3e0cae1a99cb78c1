// defines: small generated image files for the data tests: a pixel pattern, its JPEG and PNG bytes,
// files and scratch folders
#pragma once

#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace moco::test_images {

// Interleaved RGB test pattern of h x w.
inline std::vector<uint8_t> pattern(int h, int w, int seed) {
  std::vector<uint8_t> px(static_cast<size_t>(h * w * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        px[static_cast<size_t>((y * w + x) * 3 + c)] =
            static_cast<uint8_t>((x * (c + 1) * 3 + y * 5 + seed * 40) % 256);
  return px;
}

inline std::vector<uint8_t> jpeg_bytes(const std::vector<uint8_t>& px, int h, int w, int channels = 3,
                                       int quality = 95) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, px.data(), w, 0, h, channels == 1 ? TJPF_GRAY : TJPF_RGB, &out, &size,
                        channels == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0),
            0);
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  return bytes;
}

inline std::vector<uint8_t> png_bytes(const std::vector<uint8_t>& px, int h, int w, bool alpha) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_get_memory_size(image, size, 0, px.data(), 0, nullptr));
  std::vector<uint8_t> bytes(size);
  EXPECT_TRUE(png_image_write_to_memory(&image, bytes.data(), &size, 0, px.data(), 0, nullptr));
  bytes.resize(size);
  return bytes;
}

inline void write(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::filesystem::path temp_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("moco_image_folder_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace moco::test_images
