#include "ckpt/official_layout.h"

namespace moco::ckpt {

// src/moco_v2/moco_v2.cpp's state_entries; tests/data/official_layout/moco_v2_resnet50.tsv.
OfficialLayout moco_v2_official_layout() {
  return {{{"encoder_q/", "module.encoder_q.", /*trained=*/true},
           {"encoder_k/", "module.encoder_k."},
           {"moco/queue", "module.queue", false, /*buffer=*/true},
           {"moco/queue_ptr", "module.queue_ptr", false, /*buffer=*/true}},
          /*optimizer_group=*/"encoder_q/"};
}

// src/moco_v3/moco_v3.cpp's v3_state_entries; tests/data/official_layout/moco_v3_*.tsv.
OfficialLayout moco_v3_official_layout() {
  return {{{"encoder_q/", "module.base_encoder.", /*trained=*/true},
           {"encoder_k/", "module.momentum_encoder."},
           {"predictor/", "module.predictor.", /*trained=*/true}},
          /*optimizer_group=*/""};
}

}  // namespace moco::ckpt
