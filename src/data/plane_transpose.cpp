#include "data/plane_transpose.h"

#include <algorithm>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace moco::data {
namespace {

void transpose_scalar(const uint8_t* src, int64_t y0, int64_t y1, int64_t x0, int64_t x1, int64_t rows,
                      int64_t src_stride, uint8_t* dst) {
  for (int64_t y = y0; y < y1; ++y)
    for (int64_t x = x0; x < x1; ++x) dst[x * rows + y] = src[y * src_stride + x];
}

#if defined(__SSE2__)
// One 8 x 8 block from (y, x): three rounds of interleaving bytes, words and double words turn
// eight rows into eight columns.
void transpose_block8(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t rows) {
  __m128i a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i * src_stride));
  const __m128i t0 = _mm_unpacklo_epi8(a[0], a[1]), t1 = _mm_unpacklo_epi8(a[2], a[3]);
  const __m128i t2 = _mm_unpacklo_epi8(a[4], a[5]), t3 = _mm_unpacklo_epi8(a[6], a[7]);
  const __m128i u0 = _mm_unpacklo_epi16(t0, t1), u1 = _mm_unpackhi_epi16(t0, t1);
  const __m128i u2 = _mm_unpacklo_epi16(t2, t3), u3 = _mm_unpackhi_epi16(t2, t3);
  const __m128i cols[4] = {_mm_unpacklo_epi32(u0, u2), _mm_unpackhi_epi32(u0, u2), _mm_unpacklo_epi32(u1, u3),
                           _mm_unpackhi_epi32(u1, u3)};  // columns 2k and 2k + 1
  for (int k = 0; k < 4; ++k) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + (2 * k) * rows), cols[k]);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + (2 * k + 1) * rows), _mm_unpackhi_epi64(cols[k], cols[k]));
  }
}
#endif

}  // namespace

void transpose_plane(const uint8_t* src, int64_t rows, int64_t cols, int64_t src_stride, uint8_t* dst) {
  int64_t full_rows = 0, full_cols = 0;
#if defined(__SSE2__)
  full_rows = rows / 8 * 8;
  full_cols = cols / 8 * 8;
  for (int64_t y = 0; y < full_rows; y += 8)
    for (int64_t x = 0; x < full_cols; x += 8)
      transpose_block8(src + y * src_stride + x, src_stride, dst + x * rows + y, rows);
#endif
  // What the blocks leave: the right-hand columns of every row, then the bottom rows.
  transpose_scalar(src, 0, full_rows, full_cols, cols, rows, src_stride, dst);
  transpose_scalar(src, full_rows, rows, 0, cols, rows, src_stride, dst);
}

}  // namespace moco::data
