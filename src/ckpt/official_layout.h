// defines: OfficialModule, OfficialLayout: where each tensor of a moco_dist checkpoint lies in the
// checkpoint the official main_moco.py saves (its DistributedDataParallel names); each method's room
// hands its table over (run::MethodRoom::official_layout)
#pragma once

#include <string>
#include <vector>

namespace moco::ckpt {

// One module of the official model and the tensors of ours that are it.
struct OfficialModule {
  std::string ours;      // a group of our checkpoint ("encoder_q/") or one tensor ("moco/queue")
  std::string official;  // its name in the official state_dict ("module.encoder_q.", "module.queue")
  bool trained = false;  // the official optimizer updates its parameters (they get gradients)
  bool buffer = false;   // one buffer (the queue), not a module of parameters and buffers
};

struct OfficialLayout {
  // In the order of the official model.parameters(), whose indices optimizer.state_dict() uses.
  std::vector<OfficialModule> modules;
  // Our optimizer state "optimizer/<state>/<name>" names the parameter `optimizer_group + name`.
  std::string optimizer_group;
  bool saves_scaler = false;  // the official main_moco.py saves its GradScaler's state too (moco-v3's)
};

}  // namespace moco::ckpt
