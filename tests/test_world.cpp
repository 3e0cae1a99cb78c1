#include "test_world.h"

#include "dist/bootstrap.h"
#include "dist/mpi_process_group.h"

// Under a launcher the world group is MPI's; alone it is a LocalProcessGroup, so plain ctest runs
// pay no MPI start-up.
std::shared_ptr<moco::dist::ProcessGroup> test_world_group() {
  static const std::shared_ptr<moco::dist::ProcessGroup> group = []() -> std::shared_ptr<moco::dist::ProcessGroup> {
    if (!moco::dist::launcher_world_size(moco::dist::launcher_env()).has_value())
      return std::make_shared<moco::dist::LocalProcessGroup>();
    moco::dist::MpiOptions options;
    options.timeout = std::chrono::seconds(120);
    return std::make_shared<moco::dist::MpiProcessGroup>(options);
  }();
  return group;
}
