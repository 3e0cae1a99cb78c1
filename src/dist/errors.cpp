#include "dist/errors.h"

#include "dist/mpi_comm.h"  // <mpi.h> without its C++ bindings

#include <cstring>

namespace moco::dist {

DistError::DistError(int rank, const std::string& message)
    : std::runtime_error((rank >= 0 ? "rank " + std::to_string(rank) : std::string("rank ?")) + ": " + message),
      rank_(rank) {}

int world_rank_or_unknown() {
  int initialized = 0, finalized = 0;
  // Both queries are legal at any time, even before MPI_Init and after MPI_Finalize.
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  if (MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS) return -1;
  return rank;
}

namespace detail {

const char* short_path(const char* file) {
  // The last "/src/" or "/tests/" marks the repository root; anything else stays as given.
  const char* best = nullptr;
  for (const char* marker : {"/src/", "/tests/"}) {
    for (const char* p = std::strstr(file, marker); p != nullptr; p = std::strstr(p + 1, marker))
      if (best == nullptr || p > best) best = p;
  }
  return best != nullptr ? best + 1 : file;
}

void throw_call_failed(const char* call, const char* file, int line, const std::string& library_error) {
  throw DistError(world_rank_or_unknown(), std::string(call) + " failed at " + short_path(file) + ":" +
                                               std::to_string(line) + ": " + library_error);
}

void throw_mpi_failed(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  std::string description;
  if (MPI_Error_string(code, text, &length) == MPI_SUCCESS)
    description.assign(text, static_cast<size_t>(length));
  else
    description = "MPI error code " + std::to_string(code);
  // MPI_Error_class names the kind (MPI_ERR_TRUNCATE) where the string alone may not.
  int error_class = 0;
  if (MPI_Error_class(code, &error_class) == MPI_SUCCESS && error_class != code) {
    char class_text[MPI_MAX_ERROR_STRING] = {};
    if (MPI_Error_string(error_class, class_text, &length) == MPI_SUCCESS)
      description += " (" + std::string(class_text, static_cast<size_t>(length)) + ")";
  }
  throw_call_failed(call, file, line, description);
}

}  // namespace detail
}  // namespace moco::dist
