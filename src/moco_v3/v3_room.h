// defines: room, what MoCo v3 hands the programs (run/method_room.h): model.method v3, its keys (v3.*)
// and their checks, its encoder in a checkpoint, the factory
#pragma once

#include "run/method_room.h"

namespace moco::moco_v3 {

run::MethodRoom room();

}  // namespace moco::moco_v3
