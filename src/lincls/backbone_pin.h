// defines: the backbone a linear-probe run is pinned to (the checkpoint folder or export its first
// start read, and a hash of its tensors), kept in every checkpoint of the run (keep_backbone_pin), and
// load_run_backbone, with which a resume reads that same backbone or refuses
#pragma once

#include "lincls/frozen_backbone.h"
#include "run/checkpointing.h"
#include "run/config.h"

#include <torch/types.h>

namespace moco::lincls {

inline constexpr const char* kPretrainedNote = "pretrained";  // ckpt::Manifest::notes' name for the pin

// Every later checkpoint of `checkpointing` keeps the pin of `backbone` (model.pretrained's source and
// content hash); nothing for random init or raw pixels, which the config alone decides.
void keep_backbone_pin(run::Checkpointing& checkpointing, const Backbone& backbone);

// The backbone of the run in train.output_dir. A fresh start reads model.pretrained as it resolves now
// (a run folder: the checkpoint its `latest` names). A resume (the checkpoint train.resume names, or
// with auto the newest committed one under train.output_dir/checkpoints whose manifest reads) reads
// the source that checkpoint's pin names, whatever model.pretrained resolves to now (a pre-training run
// that went on has moved its `latest`), and says so; a pinned source that is gone, or whose tensors no
// longer hash as they did, is a run::ConfigError naming both paths. A checkpoint without a pin
// (written before pins) or whose saved model.pretrained differs (the resume's config check refuses it)
// is resumed on model.pretrained as it resolves now, as Backbone::load reads it.
Backbone load_run_backbone(const run::Config& config, torch::Device device);

}  // namespace moco::lincls
