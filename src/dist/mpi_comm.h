// defines: MpiComm, the MPI_Comm handle that mpi_process_group.h only forward-declares, so that
// users of MpiProcessGroup over MPI_COMM_WORLD need not see <mpi.h>. Include <mpi.h> through this
// header: it turns off the deprecated MPI C++ bindings, whose inline code references symbols of
// libmpi_cxx, which we do not link (CMake's MPI::MPI_C target does not define these for us).
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

namespace moco::dist {

struct MpiComm {
  MPI_Comm comm;
};

}  // namespace moco::dist
