// defines: test_world_group(), the process group spanning every rank of the test run: an MPI group
// under mpirun, a LocalProcessGroup in a plain ctest run. Tests derive expected values from rank and
// world size, so one binary serves both.
#pragma once

#include "dist/process_group.h"

#include <memory>

std::shared_ptr<moco::dist::ProcessGroup> test_world_group();
// Frees the group's communicator; main() calls it before MPI_Finalize (a static destroyed after it
// could no longer free it: a leak under tools/sanitize.sh).
void release_test_world_group();
