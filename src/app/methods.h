// defines: methods, the self-supervised methods the programs offer (model.method), listed once
#pragma once

#include "run/method_room.h"

#include <memory>

namespace moco::app {

// MoCo v1/v2 (the default), then MoCo v3.
std::shared_ptr<const run::Methods> methods();

}  // namespace moco::app
