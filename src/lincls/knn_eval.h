// defines: knn_eval_only (moco_dist --eval-only: the kNN monitor's protocol on any checkpoint,
// export, random init or the raw pixels, with the raw-pixel baseline beside it)
#pragma once

#include "run/config.h"
#include "run/config.h"
#include "run/run_context.h"

namespace moco::lincls {

struct KnnEvalResult {
  double top1 = 0;        // of model.pretrained's backbone
  double raw_pixels = 0;  // NaN when knn.raw_baseline is off (or the backbone is the raw pixels)
};

// Scores the backbone model.pretrained names (when unset: the newest checkpoint of
// train.output_dir) with the kNN monitor exactly as training does (knn.*, eval-mode features of the
// normalised images), and the raw pixels when knn.raw_baseline allows. Writes no file. Collective.
KnnEvalResult knn_eval_only(const run::Config& config, const run::RunContext& context);

}  // namespace moco::lincls
