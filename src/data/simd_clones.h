// defines: MOCO_AVX2_CLONE, which compiles a function twice, for the baseline x86-64 and for AVX2,
// and picks one when the program loads (GCC's target_clones); empty elsewhere
#pragma once

// For integer loops only, where AVX2's 32-bit multiplies vectorise what SSE2 must emulate and the
// results are the same integers. Float code stays baseline: the AVX2 clone may not fuse a * b + c
// (it is not FMA), but keeping float off it spares that question.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MOCO_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define MOCO_AVX2_CLONE
#endif
