// defines: export_module (one module's tensors of a checkpoint as a flat HDF5 file of state_dict
// keys, e.g. the query encoder's backbone for torchvision)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moco::ckpt {

struct ExportSummary {
  int64_t tensors = 0;
  int64_t bytes = 0;
  int64_t step = 0;
};

// Writes every tensor "<module>/<key>" of the checkpoint whose key starts with none of
// `drop_prefixes` as dataset "<key>" at the root of out_path (verified on the way: Fletcher-32 and
// CRC-32), so that `{k: f[k][()] for k in f}` is a state_dict. Throws CheckpointError.
ExportSummary export_module(const std::string& checkpoint_dir, const std::string& module,
                            const std::vector<std::string>& drop_prefixes, const std::string& out_path);

}  // namespace moco::ckpt
