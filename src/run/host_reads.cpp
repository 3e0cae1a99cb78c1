#include "run/host_reads.h"

#include <torch/torch.h>

#include <atomic>
#include <stdexcept>
#include <string>

namespace moco::run {
namespace {
std::atomic<int64_t> reads{0};
thread_local const char* forbidden_by = nullptr;  // the innermost NoHostReads' `what`
}  // namespace

torch::Tensor read_on_host(const torch::Tensor& tensor) {
  if (forbidden_by)
    throw std::logic_error(std::string(forbidden_by) + ": a device tensor " + tensor.toString() +
                           " read on the host (read_on_host)");
  ++reads;
  return tensor.to(torch::kCPU);
}

NoHostReads::NoHostReads(const char* what) : outer_(forbidden_by) { forbidden_by = what; }
NoHostReads::~NoHostReads() { forbidden_by = outer_; }

int64_t host_reads() { return reads.load(); }

}  // namespace moco::run
