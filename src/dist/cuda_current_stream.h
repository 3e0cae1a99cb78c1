// defines: current_cuda_stream (the stream LibTorch launches on for a device), the one function of
// the NCCL backend that needs a CUDA build of LibTorch
#pragma once

// Forward declaration, as cuda_runtime.h spells it, so this header does not pull the CUDA headers
// into every file that includes it.
typedef struct CUstream_st* cudaStream_t;

namespace moco::dist {

// The stream LibTorch's kernels on `device` go to right now in this thread. The NCCL backend orders
// its collectives after this stream's pending work and orders later work on it after the
// collective.
cudaStream_t current_cuda_stream(int device);

}  // namespace moco::dist
