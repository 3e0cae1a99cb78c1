// defines: CUDA_CHECK (when MOCO_WITH_CUDA or MOCO_WITH_NCCL), NCCL_CHECK (when MOCO_WITH_NCCL), and
// their _ON_RANK forms, NCCL_LAUNCH_CHECK_ON_RANK (ncclInProgress allowed). All throw DistError "rank R: <call> failed
// at <file>:<line>: <library error>". Only device code includes this header: it pulls in cuda_runtime.h and nccl.h.
#pragma once

#include "dist/errors.h"

#include <string>

// CUDA_CHECK follows NCCL too: the NCCL backend is built, and its CUDA runtime calls are checked,
// with a CPU LibTorch (MOCO_WITH_CUDA off), which is how CI compiles the GPU path.
#if MOCO_WITH_CUDA || MOCO_WITH_NCCL
#include <cuda_runtime.h>

namespace moco::dist::detail {
inline std::string cuda_error_text(cudaError_t code) {
  return std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code);
}
}  // namespace moco::dist::detail

// For code that knows its rank in the group (which need not be MPI's, nor exist without MPI).
#define CUDA_CHECK_ON_RANK(rank, call)                                                                         \
  do {                                                                                                         \
    const cudaError_t moco_cuda_rc_ = (call);                                                                  \
    if (moco_cuda_rc_ != cudaSuccess)                                                                          \
      throw ::moco::dist::DistError(                                                                           \
          (rank), std::string(#call) + " failed at " + ::moco::dist::detail::short_path(__FILE__) + ":" +      \
                      std::to_string(__LINE__) + ": " + ::moco::dist::detail::cuda_error_text(moco_cuda_rc_)); \
  } while (0)

// The rank is MPI's, as for MPI_CHECK.
#define CUDA_CHECK(call) CUDA_CHECK_ON_RANK(::moco::dist::world_rank_or_unknown(), call)
#endif

#if MOCO_WITH_NCCL
#include <nccl.h>

namespace moco::dist::detail {
// ncclGetLastError (NCCL >= 2.13) often says more than the code's string (which peer, which
// transport); both go in the message.
inline std::string nccl_error_text(ncclResult_t code) {
  std::string text = ncclGetErrorString(code);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
#endif
  return text;
}
}  // namespace moco::dist::detail

#define NCCL_CHECK_ON_RANK(rank, call)                                                                         \
  do {                                                                                                         \
    const ncclResult_t moco_nccl_rc_ = (call);                                                                 \
    if (moco_nccl_rc_ != ncclSuccess)                                                                          \
      throw ::moco::dist::DistError(                                                                           \
          (rank), std::string(#call) + " failed at " + ::moco::dist::detail::short_path(__FILE__) + ":" +      \
                      std::to_string(__LINE__) + ": " + ::moco::dist::detail::nccl_error_text(moco_nccl_rc_)); \
  } while (0)

#define NCCL_CHECK(call) NCCL_CHECK_ON_RANK(::moco::dist::world_rank_or_unknown(), call)

// For a call on a non-blocking communicator (NCCL >= 2.14), which answers ncclInProgress while it is
// still enqueueing: that is not an error, the caller then waits for ncclCommGetAsyncError to settle.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define NCCL_LAUNCH_CHECK_ON_RANK(rank, call)                                                                  \
  do {                                                                                                         \
    const ncclResult_t moco_nccl_rc_ = (call);                                                                 \
    if (moco_nccl_rc_ != ncclSuccess && moco_nccl_rc_ != ncclInProgress)                                       \
      throw ::moco::dist::DistError(                                                                           \
          (rank), std::string(#call) + " failed at " + ::moco::dist::detail::short_path(__FILE__) + ":" +      \
                      std::to_string(__LINE__) + ": " + ::moco::dist::detail::nccl_error_text(moco_nccl_rc_)); \
  } while (0)
#else
#define NCCL_LAUNCH_CHECK_ON_RANK(rank, call) NCCL_CHECK_ON_RANK(rank, call)
#endif
#endif
