// defines: the note a checkpoint keeps of the data it trained on (the train split's fingerprint,
// data/fingerprint.h) and check_resume_data, which refuses a resume on other data
#pragma once

#include "ckpt/manifest.h"
#include "run/config.h"

#include <string>

namespace moco::run {

inline constexpr const char* kTrainDataNote = "train_data";  // ckpt::Manifest::notes' name for it

// The train split's fingerprint as a checkpoint keeps it (split_listing's, as JSON).
std::string train_data_note(const Config& config);

// Whether the checkpoint in `dir` (its manifest) was trained on the data the config names now. A
// different train split (another count of images, or the same count with another file, size or
// label) is a ConfigError naming what changed (the counts, the first differing entry), unless
// train.resume_on_changed_data, which logs it (with `log`) and goes on. A checkpoint written before
// checkpoints kept their data is not compared (said once, with `log`). A malformed note is a
// ckpt::CheckpointError, as any damage to the manifest.
void check_resume_data(const Config& config, const ckpt::Manifest& manifest, const std::string& dir, bool log);

}  // namespace moco::run
