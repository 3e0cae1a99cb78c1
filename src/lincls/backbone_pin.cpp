#include "lincls/backbone_pin.h"

#include "ckpt/checkpoint_dir.h"
#include "ckpt/manifest.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <optional>
#include <string>

namespace moco::lincls {
namespace fs = std::filesystem;
namespace {

struct Pin {
  std::string source, hash;  // as the first start read it (an absolute path)
  std::string checkpoint;    // the checkpoint that keeps it
};

std::string absolute(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  return (ec ? fs::path(path) : p).lexically_normal().string();
}

// The manifest of the checkpoint a resume would read first; nullopt for a fresh start.
std::optional<ckpt::Manifest> resume_manifest(const run::Config& c, std::string& dir) {
  if (c.train.resume == "never") return std::nullopt;
  std::vector<std::string> candidates;
  if (c.train.resume != "auto") {
    candidates.push_back(c.train.resume);
  } else {
    const auto root = (fs::path(c.train.output_dir) / "checkpoints").string();
    const auto steps = ckpt::committed_steps(root);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) candidates.push_back(ckpt::step_dir(root, *it));
  }
  for (const auto& candidate : candidates) {
    try {
      auto manifest = ckpt::read_manifest(candidate);
      dir = candidate;
      return manifest;
    } catch (const ckpt::CheckpointError&) {
      // Left for the resume to skip (train.resume=auto) or to report.
    }
  }
  return std::nullopt;
}

// The pin the resumed checkpoint keeps, if it keeps one for this model.pretrained.
std::optional<Pin> pin_of_resume(const run::Config& c) {
  std::string dir;
  const auto manifest = resume_manifest(c, dir);
  if (!manifest) return std::nullopt;
  const auto note = manifest->notes.find(kPretrainedNote);
  if (note == manifest->notes.end()) {
    spdlog::info(
        "lincls: {} was written before checkpoints kept their backbone's path and hash: model.pretrained is "
        "read as it resolves now",
        dir);
    return std::nullopt;
  }
  try {
    if (run::load_config_text(c.methods, manifest->config_yaml, dir).model.pretrained != c.model.pretrained)
      return std::nullopt;  // another model.pretrained: the resume's config check names it
    const auto j = nlohmann::json::parse(note->second);
    return Pin{j.at("source").get<std::string>(), j.at("hash").get<std::string>(), dir};
  } catch (const std::exception& e) {
    throw run::ConfigError(fmt::format("{}: its note '{}' (the backbone this run started on) cannot be read: {}", dir,
                                       kPretrainedNote, e.what()));
  }
}

// What model.pretrained names now: the checkpoint folder a run folder's `latest` names, or the file.
std::string resolved_now(const std::string& pretrained) {
  std::error_code ec;
  if (fs::is_directory(pretrained, ec))
    if (const auto dir = ckpt::find_checkpoint_dir(pretrained)) return absolute(*dir);
  return absolute(pretrained);
}

}  // namespace

void keep_backbone_pin(run::Checkpointing& checkpointing, const Backbone& backbone) {
  if (backbone.kind() != Backbone::Kind::kPretrained) return;
  const nlohmann::json pin{{"source", absolute(backbone.source())},
                           {"hash", backbone.content_hash()},
                           {"description", backbone.description()}};
  checkpointing.keep_note(kPretrainedNote, pin.dump());
}

Backbone load_run_backbone(const run::Config& config, torch::Device device) {
  const std::string& pretrained = config.model.pretrained;
  if (pretrained.empty() || pretrained == "random" || pretrained == "raw_pixels") return Backbone::load(config, device);
  const auto pin = pin_of_resume(config);
  if (!pin) return Backbone::load(config, device);
  const std::string now = resolved_now(pretrained);
  const auto refusal = [&](const std::string& why) {
    return run::ConfigError(fmt::format(
        "model.pretrained: this run (train.output_dir {}) started on {}, as its checkpoint {} records, and a resume "
        "must read the same backbone: {}; model.pretrained={} now names {}. Restore {}, or start a new run in "
        "another train.output_dir",
        config.train.output_dir, pin->source, pin->checkpoint, why, pretrained, now, pin->source));
  };
  std::error_code ec;
  if (!fs::exists(pin->source, ec)) throw refusal(pin->source + " is gone");
  run::Config pinned = config;
  if (now != pin->source) pinned.model.pretrained = pin->source;
  Backbone backbone = Backbone::load(pinned, device);
  if (backbone.content_hash() != pin->hash)
    throw refusal(
        fmt::format("its backbone tensors hash {} now, {} when the run started", backbone.content_hash(), pin->hash));
  if (now != pin->source)
    spdlog::warn("lincls: model.pretrained={} now names {}; this run started on {} and goes on with it", pretrained,
                 now, pin->source);
  return backbone;
}

}  // namespace moco::lincls
