#include "run/resume_data.h"

#include "data/fingerprint.h"
#include "run/setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

namespace moco::run {

std::string train_data_note(const Config& config) {
  return data::to_json(data::fingerprint(split_listing(config, /*train=*/true)));
}

void check_resume_data(const Config& config, const ckpt::Manifest& manifest, const std::string& dir, bool log) {
  const auto note = manifest.notes.find(kTrainDataNote);
  if (note == manifest.notes.end()) {
    if (log)
      spdlog::info(
          "resume: {} was written before checkpoints kept the fingerprint of their data: its data is not "
          "compared with this run's",
          dir);
    return;
  }
  data::DataFingerprint then;
  try {
    then = data::fingerprint_from_json(note->second, dir + "/" + ckpt::kManifestFile + ": notes." + kTrainDataNote);
  } catch (const std::runtime_error& e) {
    throw ckpt::CheckpointError(e.what());
  }
  const std::string change = data::describe_change(then, split_listing(config, /*train=*/true));
  if (change.empty()) return;
  if (!config.train.resume_on_changed_data)
    throw ConfigError(fmt::format(
        "{} was trained on other data than the train split holds now: {}\n(restore the data; or set "
        "train.resume_on_changed_data=true to go on with the data as it is now; or start a new run in another "
        "train.output_dir)",
        dir, change));
  if (log)
    spdlog::warn("resume: {} was trained on other data (train.resume_on_changed_data=true: going on with it): {}", dir,
                 change);
}

}  // namespace moco::run
