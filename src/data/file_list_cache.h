// defines: scan_image_folder_cached (scan_image_folder, its result kept in a small text file and
// reused while no folder it walked has changed)
#pragma once

#include "data/image_folder.h"

#include <string>
#include <vector>

namespace moco::data {

struct CachedScan {
  ImageFolder folder;
  std::string read_from;   // the cache file used, "" when the folder was scanned
  std::string written_to;  // the cache file written after a scan, "" if none
};

// Walking 1.28M files costs minutes on a network file system; the cache costs one stat per folder.
// The cache of split folder R is R's parent/.moco_filelist-<R's name>.txt, else the same name in the
// first of extra_dirs that exists and is writable (e.g. train.output_dir; none is created here).
// Rule: a cache is used only if it parses completely, names the same absolute R, and every folder
// the scan walked (R, each class folder, each subfolder) still has the modification time, to the
// nanosecond, it had then. Adding, removing or renaming a file or folder changes the time of the
// folder holding it, so the list cannot be stale; a file rewritten in place keeps the list valid.
// A cache that fails any check is ignored and rewritten. No cache is written when a folder changed
// less than 2 seconds before the scan began or during it (a change within one tick of a coarse
// file-system clock could go unseen), or when a name holds a line break. Errors are those of scan_image_folder
// (FolderError). With write=false a scan writes no cache: the ranks of a job read the folder each, but only
// one (rank 0) writes the cache, which several hosts may share. With write_extra_dirs=false a cache in
// extra_dirs is read but none is written there (a dry run writes nothing into train.output_dir).
CachedScan scan_image_folder_cached(const std::string& root, const std::vector<std::string>& extra_dirs = {},
                                    bool write = true, bool write_extra_dirs = true);

}  // namespace moco::data
