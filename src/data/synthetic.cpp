#include "data/synthetic.h"

#include "data/hash.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace moco::data {
namespace {

constexpr double kTwoPi = 6.283185307179586;
constexpr uint64_t kClassTag = 0x636c617373ULL;  // keeps class and index streams apart
constexpr uint64_t kIndexTag = 0x696e646578ULL;
constexpr float kAmplitude = 50.0f;
constexpr int kNoiseLevels = 49;  // noise in [-24, 24]

// One channel of a class's pattern: a separable product of one sine per axis with 1-3 cycles across
// the image, on a class-specific base level. Low frequencies survive cropping and resizing, so
// augmented views of a class still look alike.
struct ChannelPattern {
  std::vector<float> rows, cols;
  float base = 0;
};

ChannelPattern channel_pattern(uint64_t seed, int64_t label, int64_t channel, int64_t height, int64_t width) {
  const uint64_t h = detail::hash_combine(detail::hash_combine(detail::hash_combine(seed, kClassTag), label), channel);
  const double fy = 1 + static_cast<double>(h % 3), fx = 1 + static_cast<double>((h >> 8) % 3);
  const double py = kTwoPi * static_cast<double>((h >> 16) & 0xFFFF) / 65536.0;
  const double px = kTwoPi * static_cast<double>((h >> 32) & 0xFFFF) / 65536.0;
  ChannelPattern p;
  p.base = 60.0f + static_cast<float>((h >> 48) % 136);
  p.rows.resize(static_cast<size_t>(height));
  p.cols.resize(static_cast<size_t>(width));
  for (int64_t y = 0; y < height; ++y) {
    p.rows[y] = static_cast<float>(std::sin(kTwoPi * fy * (y + 0.5) / height + py));
  }
  for (int64_t x = 0; x < width; ++x) {
    p.cols[x] = kAmplitude * static_cast<float>(std::cos(kTwoPi * fx * (x + 0.5) / width + px));
  }
  return p;
}

// A splitmix64 stream handing out one byte at a time, eight per step.
class NoiseBytes {
 public:
  explicit NoiseBytes(uint64_t state) : state_(state) {}
  uint8_t next() {
    if (left_ == 0) {
      word_ = detail::mix64(state_);
      state_ += 0x9E3779B97F4A7C15ULL;
      left_ = 8;
    }
    const auto byte = static_cast<uint8_t>(word_);
    word_ >>= 8;
    --left_;
    return byte;
  }

 private:
  uint64_t state_, word_ = 0;
  int left_ = 0;
};

}  // namespace

SyntheticDataset::SyntheticDataset(int64_t size, int64_t channels, int64_t height, int64_t width, int64_t num_classes,
                                   uint64_t seed, int64_t first)
    : size_(size),
      channels_(channels),
      height_(height),
      width_(width),
      num_classes_(num_classes),
      seed_(seed),
      first_(first) {
  if (size < 0 || channels <= 0 || height <= 0 || width <= 0 || num_classes <= 0) {
    throw std::invalid_argument(
        "SyntheticDataset: need size >= 0 and positive channels, height, width, classes; got size " +
        std::to_string(size) + ", " + std::to_string(channels) + "x" + std::to_string(height) + "x" +
        std::to_string(width) + ", " + std::to_string(num_classes) + " classes");
  }
}

Example SyntheticDataset::get(int64_t index) const {
  if (index < 0 || index >= size_) {
    throw std::out_of_range("SyntheticDataset: index " + std::to_string(index) + " out of range [0, " +
                            std::to_string(size_) + ")");
  }
  const int64_t sample = first_ + index;
  const int64_t label = sample % num_classes_;
  torch::Tensor image = torch::empty({channels_, height_, width_}, torch::kUInt8);
  uint8_t* out = image.data_ptr<uint8_t>();
  NoiseBytes noise(detail::hash_combine(detail::hash_combine(seed_, kIndexTag), static_cast<uint64_t>(sample)));
  for (int64_t c = 0; c < channels_; ++c) {
    const ChannelPattern p = channel_pattern(seed_, label, c, height_, width_);
    for (int64_t y = 0; y < height_; ++y) {
      for (int64_t x = 0; x < width_; ++x) {
        const float jitter = static_cast<float>((noise.next() * kNoiseLevels) >> 8) - (kNoiseLevels - 1) / 2;
        const float value = p.base + p.rows[y] * p.cols[x] + jitter;
        *out++ = static_cast<uint8_t>(std::clamp(std::lround(value), 0L, 255L));
      }
    }
  }
  return {image, label};
}

}  // namespace moco::data
