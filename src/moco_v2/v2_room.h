// defines: room, what MoCo v1/v2 hands the programs (run/method_room.h): model.method v2, its keys
// (moco.*, model.mlp, debug.check_invariants) and their checks, its encoder in a checkpoint, the factory
#pragma once

#include "run/method_room.h"

namespace moco::moco_v2 {

run::MethodRoom room();

}  // namespace moco::moco_v2
