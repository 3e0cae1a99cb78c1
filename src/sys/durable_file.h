// defines: write_synced, replace_synced, fsync_path: small files written so that a crash or a full
// disk never leaves a half file under a final name (the checkpoint manifest and `latest`, the pack
// markers)
#pragma once

#include <string>

namespace moco::sys {

// Makes what `path` holds durable; std::runtime_error "PATH: cannot sync: REASON".
void fsync_path(const std::string& path);

// Writes `text` to `path` (replacing it) and fsyncs it; std::runtime_error naming the file and the
// system's reason (no space, read-only, ...).
void write_synced(const std::string& path, const std::string& text);

// `path` holds `text` whole, or keeps what it held: the text goes to `tmp` (write_synced), which is
// renamed over `path`. A failure removes `tmp` and throws as write_synced. The caller syncs the folder.
void replace_synced(const std::string& path, const std::string& tmp, const std::string& text);

}  // namespace moco::sys
