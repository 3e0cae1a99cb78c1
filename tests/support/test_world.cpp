#include "test_world.h"

#include "dist/bootstrap.h"
#include "dist/mpi_process_group.h"

namespace {

std::shared_ptr<moco::dist::ProcessGroup>& world_slot() {
  static std::shared_ptr<moco::dist::ProcessGroup> group;
  return group;
}

}  // namespace

// Under a launcher the world group is MPI's; alone it is a LocalProcessGroup, so plain ctest runs
// pay no MPI start-up.
std::shared_ptr<moco::dist::ProcessGroup> test_world_group() {
  auto& group = world_slot();
  if (!group) {
    if (!moco::dist::launcher_world_size(moco::dist::launcher_env()).has_value()) {
      group = std::make_shared<moco::dist::LocalProcessGroup>();
    } else {
      moco::dist::MpiOptions options;
      options.timeout = std::chrono::seconds(120);
      group = std::make_shared<moco::dist::MpiProcessGroup>(options);
    }
  }
  return group;
}

void release_test_world_group() { world_slot().reset(); }
