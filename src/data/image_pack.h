// defines: pack_image_folders (ImageFolder splits -> HDF5 image shards, the format of
// image_shards.h; what moco_pack runs)
#pragma once

#include "data/image_folder.h"

#include <string>
#include <vector>

namespace moco::data {

struct SplitToPack {
  std::string name;  // the shards' prefix: train -> train-00000-of-00004.h5
  ImageFolder folder;
};

struct PackOptions {
  int shards = 1;          // per split
  int threads = 0;         // shards written at once; 0: the hardware's threads
  bool overwrite = false;  // replace shards of the same splits already in the folder
};

struct PackedSplit {
  std::string name;
  int64_t images = 0, bytes = 0;
  std::vector<std::string> files;  // the shards' paths
};

// Writes every split into out_dir as `shards` HDF5 files, samples assigned contiguously in
// ImageFolder order. The files' bytes are stored unchanged (a corrupt image is packed as it is and
// skipped when training, as from the folder). Atomic as a whole: every shard of every split is
// written and fsynced under a temporary name first, and renamed only when all are complete; a
// failure removes the temporary files, so no shard under a final name is ever partial. Each split's
// marker (image_shards.h: pack_marker_name) is removed before the renames and written after them, so
// a pack killed in between (kill -9) is refused by every reader, and by a next pack without overwrite.
// FolderError: what the user must change (more shards than images, shards already there without
// overwrite, complete or of an interrupted pack). std::runtime_error: a failure while packing, naming the file (a
// source file that cannot be read or changed while packing, an output that cannot be written).
std::vector<PackedSplit> pack_image_folders(const std::vector<SplitToPack>& splits, const std::string& out_dir,
                                            const PackOptions& options);

}  // namespace moco::data
