// transpose_plane against the definition, on shapes around its 8 x 8 blocks (none, some, with
// leftover rows and columns) and a source row stride wider than the block.
#include "data/plane_transpose.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace {

TEST(PlaneTransposeTest, EveryElementLandsAtItsTransposedPlace) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {1, 57}, {43, 1}, {7, 7}, {8, 8}, {9, 13}, {16, 24}, {23, 37}, {64, 8}, {375, 301}}) {
    const int64_t stride = cols + 5;
    std::vector<uint8_t> src(static_cast<size_t>(rows * stride)), dst(static_cast<size_t>(rows * cols), 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>((i * 131 + 7) % 251);
    moco::data::transpose_plane(src.data(), rows, cols, stride, dst.data());
    for (int64_t y = 0; y < rows; ++y)
      for (int64_t x = 0; x < cols; ++x)
        ASSERT_EQ(dst[static_cast<size_t>(x * rows + y)], src[static_cast<size_t>(y * stride + x)])
            << rows << "x" << cols << " at " << y << "," << x;
  }
}

}  // namespace
