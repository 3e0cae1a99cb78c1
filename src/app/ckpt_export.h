// defines: ExportRequest and export_checkpoint, moco_ckpt's `export`: a checkpoint's module (or, with
// --format moco, the whole checkpoint as the official main_moco.py saves it) written to a file, after
// the checks that refuse a request before any work (exit 2, nothing written)
#pragma once

#include <string>

namespace moco::app {

struct ExportRequest {
  std::string checkpoint;  // a checkpoint folder, a checkpoints folder or a run's output_dir
  std::string out;
  std::string module;  // empty: the encoder the checkpoint's method evaluates (its room's encoder_group)
  std::string format = "h5";
  bool keep_head = false;
  bool force = false;
};

// Writes the export and says what it wrote; throws Refusal for a request that cannot be done as asked.
int export_checkpoint(const ExportRequest& request);

}  // namespace moco::app
