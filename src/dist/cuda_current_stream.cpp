#include "dist/cuda_current_stream.h"

#if MOCO_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace moco::dist {

#if MOCO_WITH_CUDA

cudaStream_t current_cuda_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

#else

// A CPU build of LibTorch launches no CUDA kernels, so there is no LibTorch stream to order
// against; this build exists so that CI compiles and links the NCCL backend against the CUDA
// toolkit. The legacy default stream (0) is the stream any other CUDA code in the process uses when
// it names none, so events recorded on it still order the collectives correctly with such code.
// Host code compiled without --default-stream per-thread means the legacy stream by 0.
cudaStream_t current_cuda_stream(int) { return nullptr; }

#endif

}  // namespace moco::dist
