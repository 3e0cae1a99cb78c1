// defines: export_module, ExportFormat, export_format_named (one module's tensors of a checkpoint as
// a file of state_dict keys, e.g. the query encoder's backbone for torchvision or detectron2),
// export_official (the whole checkpoint as the official main_moco.py saves it)
#pragma once

#include "ckpt/official_checkpoint.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moco::ckpt {

struct ExportSummary {
  int64_t tensors = 0;
  int64_t bytes = 0;
  int64_t step = 0;
};

// h5: a flat HDF5 file of datasets; torch: a torch.load file of one dict; detectron2: a torch.load
// file of what facebookresearch/moco's convert-pretrain-to-detectron2.py writes (ckpt/torch_export.h);
// moco: the official main_moco.py's checkpoint (export_official).
enum class ExportFormat { h5, torch, detectron2, moco };

// "h5", "torch", "detectron2", "moco"; nullopt for any other name.
std::optional<ExportFormat> export_format_named(const std::string& name);

// Writes every tensor "<module>/<key>" of the checkpoint whose key starts with none of
// `drop_prefixes` as dataset "<key>" at the root of out_path (verified on the way: Fletcher-32 and
// CRC-32), so that `{k: f[k][()] for k in f}` is a state_dict; or, in the other formats, as that
// dict's entries. Throws CheckpointError.
ExportSummary export_module(const std::string& checkpoint_dir, const std::string& module,
                            const std::vector<std::string>& drop_prefixes, const std::string& out_path,
                            ExportFormat format = ExportFormat::h5);

// Writes every tensor of the checkpoint (rank 0's copy of a rank-local one) to out_path as the
// official main_moco.py's save_checkpoint does (ckpt/official_checkpoint.h), `info.epoch` taken from
// the checkpoint; atomically, as export_module. Throws CheckpointError.
ExportSummary export_official(const std::string& checkpoint_dir, const std::string& out_path,
                              const OfficialLayout& layout, OfficialCheckpointInfo info);

}  // namespace moco::ckpt
