// defines: RunContext (where a run executes: its ranks, its device), shared by moco_dist and moco_lincls
#pragma once

#include "dist/process_group.h"

#include <torch/types.h>

#include <memory>

namespace moco::run {

struct RunContext {
  std::shared_ptr<dist::ProcessGroup> group;  // all ranks of the job (a LocalProcessGroup alone)
  torch::Device device = torch::kCPU;         // this rank's device
  int local_size = 1;                         // ranks on this node, this one included
  bool dry_run = false;                       // check config, data, output_dir and resume; print the plan; no training
};

}  // namespace moco::run
