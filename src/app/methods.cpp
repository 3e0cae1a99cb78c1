#include "app/methods.h"

#include "moco_v2/v2_room.h"
#include "moco_v3/v3_room.h"

namespace moco::app {

// The one place that names the methods: a new one is its room and a line here.
std::shared_ptr<const run::Methods> methods() {
  return std::make_shared<const run::Methods>(run::Methods{moco_v2::room(), moco_v3::room()});
}

}  // namespace moco::app
