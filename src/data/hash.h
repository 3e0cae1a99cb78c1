// defines: splitmix64-based mixing and platform-independent random draws (private to src/data)
#pragma once

#include <cstdint>
#include <random>

namespace moco::data::detail {

// The splitmix64 finaliser: a bijection on 64 bits with full avalanche, so chaining it over the
// inputs of a seed keeps distinct inputs apart.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Folds one more value into a running hash; the per-position constant makes (a, b) and (b, a)
// hash differently.
inline uint64_t hash_combine(uint64_t h, uint64_t value) { return mix64(h ^ mix64(value + 0xD1B54A32D192ED03ULL)); }

// std::uniform_*_distribution are implementation-defined, while mt19937_64's output sequence is
// fixed by the standard: these keep every draw identical across standard libraries.
inline double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;  // 53 random bits -> [0, 1)
}

inline double uniform(std::mt19937_64& rng, double lo, double hi) { return lo + (hi - lo) * uniform01(rng); }

// Unbiased integer in [0, bound) by rejection; bound must be > 0.
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound: values below it are biased
  for (;;) {
    const uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace moco::data::detail
