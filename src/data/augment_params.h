// defines: AugmentParam and augment_params(), the one table of the augmentation's data.* keys (per row:
// the key, the AugmentOptions member it binds, its range, its help, and what the evaluation views take
// for it); range_error (a row's range check: the config's and augment_batch's) and evaluation_options
// (the linear protocol's view options from the pre-training's, by the table's evaluation column)
#pragma once

#include "data/augment_options.h"

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace moco::data {

// What a row's value may be; the message when it is not is the config's ("must lie in [0, 0.5]").
struct Range {
  enum class Kind { kAny, kPositive, kInterval, kSigmaPair };
  Kind kind = Kind::kAny;
  double lo = 0, hi = 0;  // kInterval's ends, each open or closed
  bool lo_open = false, hi_open = false;

  static constexpr Range any() { return {}; }
  static constexpr Range positive() { return {Kind::kPositive}; }
  static constexpr Range closed(double lo, double hi) { return {Kind::kInterval, lo, hi, false, false}; }
  static constexpr Range open_closed(double lo, double hi) { return {Kind::kInterval, lo, hi, true, false}; }
  static constexpr Range closed_open(double lo, double hi) { return {Kind::kInterval, lo, hi, false, true}; }
  static constexpr Range sigma_pair() { return {Kind::kSigmaPair}; }  // [min, max], 0 < min <= max
};

// Where `moco_dist --help` lists a row: kPipeline (which views, of what size, by which implementation)
// before the loader's keys, kOps (the random ops' parameters and the normalisation) after them.
enum class ParamGroup { kPipeline, kOps };

// What the evaluation views (the linear protocol's training view, lincls/views.cpp) take for a row.
// kUnstated is what a row that names no rule gets: augment_params.cpp refuses it at compile time, so
// a new op cannot leak into the linear protocol unnoticed.
enum class EvalRule {
  kUnstated,
  kKept,      // the pre-training's value (size, implementation, decoding, normalisation)
  kOff,       // 0: the op does nothing (colour jitter, greyscale, blur); a double member
  kProtocol,  // the protocol's own value (recipe, crop scale, flip), given to evaluation_options
};

using AugmentMember =
    std::variant<Recipe AugmentOptions::*, Transforms AugmentOptions::*, bool AugmentOptions::*,
                 int64_t AugmentOptions::*, double AugmentOptions::*, std::vector<double> AugmentOptions::*>;

struct AugmentParam {
  const char* key;  // data.*
  AugmentMember member;
  Range range;
  const char* help;  // as `moco_dist --help` and docs/config.md print it
  ParamGroup group;
  EvalRule eval;  // last, so that a row without one is kUnstated
};

// Every row, in the order `moco_dist --help` lists them (within each group).
const std::vector<AugmentParam>& augment_params();

// What is wrong with the row's value in `options` ("must lie in [0, 0.5]"), or "" when it is allowed.
std::string range_error(const AugmentParam& param, const AugmentOptions& options);

// The evaluation view's options: each row's member as its EvalRule says (kKept: the pre-training's,
// kOff: 0, kProtocol: the protocol's); members without a row (scale_max, ratio_min/max) the protocol's.
AugmentOptions evaluation_options(const AugmentOptions& pretraining, const AugmentOptions& protocol);

}  // namespace moco::data
