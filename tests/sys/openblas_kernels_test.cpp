#include "sys/openblas_kernels.h"

#include <gtest/gtest.h>

#include <string>

using moco::sys::openblas_kernels_to_set;

// OpenBLAS fell back to its generic kernels on a CPU with AVX2 or AVX-512: the restart names the
// kernels for its features.
TEST(OpenblasKernelsTest, AFallbackToPrescottIsReplacedByTheKernelsTheCpuAllows) {
  const char* set = openblas_kernels_to_set(nullptr, "Prescott", "SkylakeX");
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(std::string(set), "SkylakeX");
  EXPECT_EQ(std::string(openblas_kernels_to_set(nullptr, "Prescott", "Haswell")), "Haswell");
}

// Nothing is set where OpenBLAS knew the CPU, where the CPU has nothing better, where the BLAS is
// not OpenBLAS, or where the user chose.
TEST(OpenblasKernelsTest, NothingSetOtherwise) {
  EXPECT_EQ(openblas_kernels_to_set(nullptr, "Cooperlake", "SkylakeX"), nullptr);
  EXPECT_EQ(openblas_kernels_to_set(nullptr, "Prescott", nullptr), nullptr);
  EXPECT_EQ(openblas_kernels_to_set(nullptr, nullptr, "SkylakeX"), nullptr);
  EXPECT_EQ(openblas_kernels_to_set("Haswell", "Prescott", "SkylakeX"), nullptr);
}
