// defines: read_on_host (a tensor copied to the host, counted), host_reads (the count so far): every
// place where the trainer waits for the device goes through it, so a test counts a step's syncs
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace moco::run {

// tensor.to(kCPU), counted. On CUDA this waits for everything queued before it: call it only where
// the host needs a value (see docs/distributed.md, "Host syncs"). Throws std::logic_error while a
// NoHostReads is alive on the calling thread.
torch::Tensor read_on_host(const torch::Tensor& tensor);
// How many read_on_host calls this process has made (all threads).
int64_t host_reads();

// While alive, a read_on_host on this thread is an error naming `what` (debug.check_step_syncs
// around a training step: on any device the counted reads, on CUDA LibTorch's sync debug mode the
// rest as well).
class NoHostReads {
 public:
  explicit NoHostReads(const char* what);
  ~NoHostReads();
  NoHostReads(const NoHostReads&) = delete;
  NoHostReads& operator=(const NoHostReads&) = delete;

 private:
  const char* outer_;
};

}  // namespace moco::run
