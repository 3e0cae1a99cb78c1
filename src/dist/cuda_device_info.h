// defines: cuda_device_summary (a CUDA device's name and PCI bus id, for the log), compiled with the
// NCCL backend (MOCO_WITH_NCCL), which brings the CUDA runtime
#pragma once

#include <string>

namespace moco::dist {

// "<name>, PCI <domain:bus:device.function>" of CUDA device `device` (an index among the visible
// ones), or what went wrong in asking. The PCI id tells which physical GPU a rank drove, whatever
// CUDA_VISIBLE_DEVICES renumbered.
std::string cuda_device_summary(int device);

}  // namespace moco::dist
