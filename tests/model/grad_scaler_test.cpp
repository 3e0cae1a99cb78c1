// model::GradScaler against torch.cuda.amp.GradScaler: its defaults, the scales and skip decisions over
// scripted steps of finite, Inf and NaN gradients (tests/fixtures/grad_scaler_sequence.tsv, written by
// tools/gen_grad_scaler_sequence.py from GradScaler's documented algorithm and checked there against
// torch 2.x's own GradScaler on a CPU), the unscaled gradients, and a restored state that continues
// bit for bit.
#include "model/grad_scaler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

using moco::model::GradScaler;
using moco::model::GradScalerOptions;

namespace {

struct Run {
  int64_t steps = 0;
  std::string grads;  // finite, inf or nan
  bool skipped = false;
  double scale = 0;
  int64_t tracker = 0;
};

struct Scenario {
  std::string name;
  GradScalerOptions options;
  std::vector<Run> runs;
};

std::vector<Scenario> read_sequence() {
  std::ifstream in(std::string(MOCO_TEST_DATA_DIR) + "/grad_scaler_sequence.tsv");
  EXPECT_TRUE(in.good());
  std::vector<Scenario> scenarios;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "scenario") {
      Scenario s;
      fields >> s.name >> s.options.init_scale >> s.options.growth_factor >> s.options.backoff_factor >>
          s.options.growth_interval;
      scenarios.push_back(s);
    } else {
      Run r;
      fields >> r.steps >> r.grads >> r.skipped >> r.scale >> r.tracker;
      scenarios.back().runs.push_back(r);
    }
  }
  return scenarios;
}

// A step's gradients as the backward of the scaled loss leaves them (small values, so that they stay
// finite at any scale, as in the torch replay): two tensors, the second holding an Inf or a NaN where
// the script says so.
std::vector<torch::Tensor> step_grads(const std::string& kind) {
  auto first = torch::tensor({0.25f, -1.5f, 1.0f});
  auto second = torch::tensor({0.5f, 0.125f});
  if (kind == "inf") second[1] = std::numeric_limits<float>::infinity();
  if (kind == "nan") second[0] = std::numeric_limits<float>::quiet_NaN();
  return {first, second};
}

// One step: unscale_ then update; whether it was skipped.
bool step(GradScaler& scaler, const std::string& kind) {
  const auto found_inf = scaler.unscale_(step_grads(kind));
  scaler.update(found_inf);
  return found_inf.item<float>() != 0;
}

}  // namespace

TEST(GradScalerTest, StartsWithGradScalersDefaultsAndState) {
  const GradScalerOptions defaults;
  EXPECT_EQ(defaults.init_scale, 65536.0);
  EXPECT_EQ(defaults.growth_factor, 2.0);
  EXPECT_EQ(defaults.backoff_factor, 0.5);
  EXPECT_EQ(defaults.growth_interval, 2000);
  const GradScaler scaler;
  const auto state = scaler.state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "scaler/scale");
  EXPECT_EQ(state[0].second.scalar_type(), torch::kFloat);
  EXPECT_EQ(state[0].second.sizes(), (std::vector<int64_t>{1}));
  EXPECT_EQ(state[0].second.item<float>(), 65536.0f);
  EXPECT_EQ(state[1].first, "scaler/growth_tracker");
  EXPECT_EQ(state[1].second.scalar_type(), torch::kInt);
  EXPECT_EQ(state[1].second.sizes(), (std::vector<int64_t>{1}));
  EXPECT_EQ(state[1].second.item<int>(), 0);
}

// Every step's skip decision, and the scale and the count of good steps after every run of steps,
// equal GradScaler's (growth after exactly growth_interval good steps, a reset on Inf and on NaN,
// back-offs in a row, fp32 rounding of odd factors, no growth past fp32's range).
TEST(GradScalerTest, ScalesAndSkipsAsTorchsGradScalerOverScriptedSteps) {
  const auto scenarios = read_sequence();
  ASSERT_EQ(scenarios.size(), 4u);
  for (const auto& scenario : scenarios) {
    GradScaler scaler(scenario.options);
    int64_t at = 0;
    for (const auto& run : scenario.runs) {
      for (int64_t i = 0; i < run.steps; ++i)
        ASSERT_EQ(step(scaler, run.grads), run.skipped) << scenario.name << " step " << at + i + 1;
      at += run.steps;
      EXPECT_EQ(scaler.current_scale().item<float>(), static_cast<float>(run.scale))
          << scenario.name << " after step " << at;
      EXPECT_EQ(scaler.growth_tracker().item<int>(), run.tracker) << scenario.name << " after step " << at;
    }
  }
}

// unscale_ multiplies each gradient by float(1 / double(scale)) in place, bit for bit, passes over an
// undefined one, and finds an Inf or a NaN in any of them (the finite ones are unscaled all the same).
TEST(GradScalerTest, UnscaleMultipliesByTheReciprocalAndFindsInfOrNan) {
  GradScalerOptions options;
  options.init_scale = 3.0;  // 1/3 is inexact: the reciprocal's rounding shows
  const GradScaler scaler(options);
  const float inv = static_cast<float>(1.0 / 3.0);
  for (const std::string kind : {"finite", "inf", "nan"}) {
    auto grads = step_grads(kind);
    const auto first = grads[0].clone(), second = grads[1].clone();
    grads.push_back(torch::Tensor());
    grads.push_back(torch::full({}, 6.0f));  // a 0-dim gradient
    const auto found_inf = scaler.unscale_(grads);
    EXPECT_EQ(found_inf.scalar_type(), torch::kFloat);
    EXPECT_EQ(found_inf.item<float>(), kind == "finite" ? 0.0f : 1.0f) << kind;
    EXPECT_TRUE(torch::equal(grads[0], first * inv)) << kind;
    EXPECT_TRUE(torch::equal(grads[1].nan_to_num(0, 0, 0), (second * inv).nan_to_num(0, 0, 0))) << kind;
    EXPECT_EQ(grads[3].item<float>(), 6.0f * inv);
  }
  EXPECT_EQ(scaler.unscale_({}).item<float>(), 0.0f);
  EXPECT_EQ(scaler.scale(torch::tensor(2.0f)).item<float>(), 6.0f);
}

// A checkpoint's copy of the state, restored into a new scaler, continues the sequence bit for bit.
TEST(GradScalerTest, ARestoredStateContinuesBitForBit) {
  GradScalerOptions options;
  options.growth_interval = 3;
  options.growth_factor = 1.5;
  options.backoff_factor = 0.3;
  const std::vector<std::string> script = {"finite", "inf",    "finite", "finite", "finite", "nan",   "finite",
                                           "finite", "finite", "finite", "inf",    "finite", "finite"};
  GradScaler straight(options);
  for (size_t i = 0; i < 5; ++i) step(straight, script[i]);
  GradScaler resumed(options);
  for (size_t k = 0; k < 2; ++k) resumed.state()[k].second.copy_(straight.state()[k].second);
  for (size_t i = 5; i < script.size(); ++i) {
    EXPECT_EQ(step(resumed, script[i]), step(straight, script[i])) << i;
    EXPECT_TRUE(torch::equal(resumed.current_scale(), straight.current_scale())) << i;
    EXPECT_TRUE(torch::equal(resumed.growth_tracker(), straight.growth_tracker())) << i;
  }
}

TEST(GradScalerTest, RefusesOptionsTorchRefuses) {
  const auto refused = [](auto change) {
    GradScalerOptions o;
    change(o);
    EXPECT_THROW(GradScaler{o}, std::invalid_argument);
  };
  refused([](GradScalerOptions& o) { o.growth_factor = 1.0; });
  refused([](GradScalerOptions& o) { o.backoff_factor = 1.0; });
  refused([](GradScalerOptions& o) { o.init_scale = 0.0; });
  refused([](GradScalerOptions& o) { o.init_scale = 1e39; });
  refused([](GradScalerOptions& o) { o.growth_interval = 0; });
}
