// defines: DistError (a failed or mismatched collective, naming the rank that saw it), MPI_CHECK.
// CUDA_CHECK and NCCL_CHECK live in cuda_errors.h so that this header needs neither CUDA nor MPI.
#pragma once

#include <stdexcept>
#include <string>

namespace moco::dist {

// Every distributed failure is reported as this. what() starts with "rank R: " so that the
// interleaved stderr of many ranks still says who is speaking; rank() is -1 when unknown
// (MPI not initialised).
class DistError : public std::runtime_error {
 public:
  DistError(int rank, const std::string& message);
  int rank() const { return rank_; }

 private:
  int rank_;
};

// Rank in MPI_COMM_WORLD, or -1 when MPI is not (or no longer) initialised.
int world_rank_or_unknown();

namespace detail {
// "src/dist/x.cpp" out of whatever absolute path the compiler put in __FILE__.
const char* short_path(const char* file);
// Throws DistError "rank R: <call> failed at <file>:<line>: <library_error>".
[[noreturn]] void throw_call_failed(const char* call, const char* file, int line, const std::string& library_error);
// The same for an MPI return code, with the text of MPI_Error_string.
[[noreturn]] void throw_mpi_failed(int code, const char* call, const char* file, int line);
}  // namespace detail

}  // namespace moco::dist

// Expands to a check of an MPI call's return code; the caller includes <mpi.h> (through
// dist/mpi_comm.h). Only calls on a communicator whose error handler is MPI_ERRORS_RETURN can fail
// here: under the default MPI_ERRORS_ARE_FATAL the library aborts first, which is why init_world()
// and MpiProcessGroup install MPI_ERRORS_RETURN.
#define MPI_CHECK(call)                                                                                               \
  do {                                                                                                                \
    const int moco_mpi_rc_ = (call);                                                                                  \
    if (moco_mpi_rc_ != MPI_SUCCESS) ::moco::dist::detail::throw_mpi_failed(moco_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
