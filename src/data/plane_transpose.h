// defines: transpose_plane (one uint8 plane, rows x cols -> cols x rows), which lets a pass along
// a row run as a pass down the columns, where the compiler vectorises across the line
#pragma once

#include <cstdint>

namespace moco::data {

// dst[x * rows + y] = src[y * src_stride + x] for y < rows, x < cols; in tiles, so both sides stay
// in cache.
void transpose_plane(const uint8_t* src, int64_t rows, int64_t cols, int64_t src_stride, uint8_t* dst);

}  // namespace moco::data
