// MoCo v3's step skip and its loss scale (src/moco_v3/moco_v3.cpp, model/step_rollback.h): a finite step with the
// check is the plain step bit for bit; a step whose queries, keys, loss or gradients went NaN keeps
// every tensor of the checkpoint (the momentum encoder, every BatchNorm buffer of both encoders and
// the predictor, LARS's and AdamW's state with its step count); the loss scale (fp16's, here on an
// fp32 step: the CPU has no float16 autocast) skips the optimizer's step on an Inf gradient and halves,
// grows after its interval, is checkpointed and resumes bit for bit. On 2 ranks: faults.nan_skip*_v3.
#include "app/methods.h"
#include "dist/process_group.h"
#include "model/nonfinite.h"
#include "moco_v3/moco_v3.h"
#include "moco_v3/v3_settings.h"
#include "run/config.h"
#include "run/device.h"
#include "run/run_context.h"
#include "scoped_env.h"
#include "thrown_message.h"
#include "train/step_sync_check.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace moco;

namespace {

enum class Net { kResnetLars, kVitAdamw };

// A small v3 of either family: resnet_tiny with LARS (the R50 recipe's shape), or vit_tiny_cpu on 8 px
// images with AdamW and the official ViT predictor (its last BN).
run::Config small_v3(Net net) {
  run::Config c;
  c.model.method = moco_v3::kMethod;
  c.model.dim = 8;
  c.optim.momentum = 0.9;
  c.optim.weight_decay = 1e-4;
  moco_v3::settings(c).mlp_dim = 16;
  if (net == Net::kResnetLars) {
    c.model.width = 0.125;
    c.optim.optimizer = run::Optimizer::kLars;
  } else {
    c.model.arch = run::Arch::kVitTinyCpu;
    c.data.augment.out_size = 8;
    c.optim.optimizer = run::Optimizer::kAdamw;
    moco_v3::settings(c).projector_layers = 3;
    moco_v3::settings(c).predictor_last_bn = true;
  }
  return c;
}

run::RunContext local_context() {
  run::RunContext context;
  context.group = std::make_shared<dist::LocalProcessGroup>();
  return context;
}

// MocoV3 built from `seed` (its initialisation draws from the global generator), lr set, 10 steps long.
std::unique_ptr<moco_v3::MocoV3> make_v3(const run::Config& c, const run::RunContext& context, uint64_t seed,
                                         const moco_v3::StepPrecision& precision = {}) {
  torch::manual_seed(seed);
  auto method = std::make_unique<moco_v3::MocoV3>(c, context, /*in_channels=*/1, precision);
  method->set_run_length(10);
  method->set_lr(c.optim.optimizer == run::Optimizer::kAdamw ? 1e-3 : 0.3);
  return method;
}

// The views of step `step`, the same for every method given them.
data::TwoViewBatch views(int64_t step, int64_t size) {
  torch::manual_seed(1000 + static_cast<uint64_t>(step));
  data::TwoViewBatch batch;
  batch.query = torch::randn({6, 1, size, size});
  batch.key = torch::randn({6, 1, size, size});
  return batch;
}

int64_t image_size(Net net) { return net == Net::kVitAdamw ? 8 : 12; }

using State = std::map<std::string, torch::Tensor>;

State copy_of(const std::vector<ckpt::StateEntry>& entries) {
  State state;
  for (const auto& e : entries) state[e.name] = e.tensor.detach().clone();
  return state;
}

// The names where `got` and `want` differ in any bit ("" when none), a name missing from either included.
std::string differences(const State& got, const State& want) {
  std::string names;
  for (const auto& [name, tensor] : want) {
    const auto it = got.find(name);
    if (it == got.end() || !torch::equal(it->second, tensor)) names += " " + name;
  }
  for (const auto& [name, tensor] : got)
    if (!want.count(name)) names += " " + name + "(extra)";
  return names;
}

int32_t causes_of(const run::StepOutput& out) { return out.nonfinite_by_rank.sum().item<int32_t>(); }

const char* name_of(Net net) { return net == Net::kResnetLars ? "resnet_tiny with LARS" : "vit_tiny_cpu with AdamW"; }

}  // namespace

// The step with the skip check, where nothing is non-finite, takes the step the model and optimizer
// take alone (forward, backward, update without a flag: what MocoV3::step was before it could skip),
// bit for bit in every checkpointed tensor.
TEST(MocoV3Test, AFiniteStepIsTheStepWithoutTheCheck) {
  for (const auto net : {Net::kResnetLars, Net::kVitAdamw}) {
    const auto c = small_v3(net);
    const auto context = local_context();
    auto checked = make_v3(c, context, 3), plain = make_v3(c, context, 3);
    optim::Optimizer optimizer(c.optim.optimizer, plain->model()->trainable_parameters(), c.optim.momentum,
                               c.optim.weight_decay);
    optimizer.set_lr(c.optim.optimizer == run::Optimizer::kAdamw ? 1e-3 : 0.3);
    for (int64_t step = 1; step <= 3; ++step) {
      const auto batch = views(step, image_size(net));
      const auto out = checked->step(batch, step);
      EXPECT_TRUE(out.trained.item<bool>()) << name_of(net) << " step " << step;
      EXPECT_EQ(causes_of(out), 0);
      auto reference = plain->model()->forward(batch.query, batch.key, plain->momentum_for_step(step));
      optimizer.zero_grad();
      reference.loss.backward();
      optimizer.step();
      EXPECT_TRUE(torch::equal(out.loss, reference.loss.detach())) << name_of(net) << " step " << step;
    }
    EXPECT_EQ(
        differences(copy_of(checked->state_entries()), copy_of(moco_v3::v3_state_entries(*plain->model(), optimizer))),
        "")
        << name_of(net);
  }
}

// MOCO_INJECT_NAN at step 2 of each kind: every rank's flag names what held NaN, trained is false,
// and every checkpointed tensor (both encoders' weights and BN buffers, the predictor's, the
// optimizer's state, AdamW's step count) is bit for bit what step 1 left; step 3 trains again.
TEST(MocoV3Test, ANonFiniteStepChangesNothing) {
  const std::vector<std::pair<const char*, int32_t>> kinds = {
      {"queries", model::kNonfiniteQueries | model::kNonfiniteLoss | model::kNonfiniteGradients},
      {"keys", model::kNonfiniteKeys | model::kNonfiniteLoss | model::kNonfiniteGradients},
      {"loss", model::kNonfiniteLoss},
      {"grads", model::kNonfiniteGradients}};
  for (const auto net : {Net::kResnetLars, Net::kVitAdamw}) {
    for (const auto& [what, causes] : kinds) {
      const test::ScopedEnv nan("MOCO_INJECT_NAN", (std::string("2:0:") + what).c_str());
      const auto c = small_v3(net);
      const auto context = local_context();
      auto method = make_v3(c, context, 4);
      method->step(views(1, image_size(net)), 1);
      const auto before = copy_of(method->state_entries());
      const auto out = method->step(views(2, image_size(net)), 2);
      EXPECT_FALSE(out.trained.item<bool>()) << name_of(net) << ", " << what;
      EXPECT_EQ(causes_of(out), causes) << name_of(net) << ", " << what << ": "
                                        << model::nonfinite_causes_text(causes_of(out));
      EXPECT_EQ(differences(copy_of(method->state_entries()), before), "") << name_of(net) << ", " << what;
      const auto next = method->step(views(3, image_size(net)), 3);
      EXPECT_TRUE(next.trained.item<bool>()) << name_of(net) << ", " << what;
      const auto after = copy_of(method->state_entries());
      for (const char* moved : {"encoder_k/", "predictor/"}) {
        bool any = false;
        for (const auto& [name, tensor] : after)
          if (name.rfind(moved, 0) == 0 && name.find("num_batches_tracked") != std::string::npos)
            any = any || !torch::equal(tensor, before.at(name));
        EXPECT_TRUE(any) << name_of(net) << ", " << what << ": step 3 did not move " << moved;
      }
    }
  }
}

namespace {

moco_v3::StepPrecision loss_scaled(double init_scale, int64_t growth_interval = 2000) {
  moco_v3::StepPrecision p;
  p.loss_scale = model::GradScalerOptions{};
  p.loss_scale->init_scale = init_scale;
  p.loss_scale->growth_interval = growth_interval;
  return p;
}

State without_scaler(State state) {
  state.erase("scaler/scale");
  state.erase("scaler/growth_tracker");
  return state;
}

// Every tensor the optimizer steps or keeps: the query encoder, the predictor, optimizer/*.
State trained_part(const State& state) {
  State part;
  for (const auto& [name, tensor] : state)
    if (name.rfind("encoder_q/", 0) == 0 || name.rfind("predictor/", 0) == 0 || name.rfind("optimizer/", 0) == 0)
      if (name.find("running_") == std::string::npos && name.find("num_batches") == std::string::npos)
        part[name] = tensor;
  return part;
}

}  // namespace

// With a loss scale of 2^16 (a power of two: scaling and unscaling are exact), an fp32 step is the
// unscaled one bit for bit, so the scale reaches the backward and the unscale every gradient; the
// scale doubles after growth_interval good steps, as GradScaler's.
TEST(MocoV3Test, APowerOfTwoLossScaleLeavesAnFp32StepUnchangedAndGrows) {
  for (const auto net : {Net::kResnetLars, Net::kVitAdamw}) {
    const auto c = small_v3(net);
    const auto context = local_context();
    auto scaled = make_v3(c, context, 5, loss_scaled(65536.0, 2)), plain = make_v3(c, context, 5);
    ASSERT_NE(scaled->scaler(), nullptr);
    EXPECT_EQ(plain->scaler(), nullptr);
    for (int64_t step = 1; step <= 3; ++step) {
      scaled->step(views(step, image_size(net)), step);
      plain->step(views(step, image_size(net)), step);
    }
    const auto state = copy_of(scaled->state_entries());
    EXPECT_EQ(differences(without_scaler(state), copy_of(plain->state_entries())), "") << name_of(net);
    EXPECT_EQ(state.at("scaler/scale").item<float>(), 131072.0f) << "grown once, after 2 good steps";
    EXPECT_EQ(state.at("scaler/growth_tracker").item<int32_t>(), 1);
    EXPECT_EQ(state.at("scaler/scale").scalar_type(), torch::kFloat);
    EXPECT_EQ(state.at("scaler/growth_tracker").scalar_type(), torch::kInt);
  }
}

// A scale of FLT_MAX overflows the loss's gradient (2T x scale) to Inf: the loss scale skips the
// optimizer's step (the query encoder, the predictor's weights, LARS's buffers and AdamW's moments
// and step count unchanged) and halves; it is not a bad step (no rank's flag set, trained), and the
// forward's BatchNorm statistics and momentum update stay, as under torch's GradScaler.
TEST(MocoV3Test, AnInfGradientSkipsTheOptimizerAndHalvesTheScale) {
  const double most = std::numeric_limits<float>::max();
  for (const auto net : {Net::kResnetLars, Net::kVitAdamw}) {
    const auto c = small_v3(net);
    const auto context = local_context();
    auto method = make_v3(c, context, 6, loss_scaled(most));
    const auto before = copy_of(method->state_entries());
    const auto out = method->step(views(1, image_size(net)), 1);
    EXPECT_TRUE(out.trained.item<bool>()) << name_of(net);
    EXPECT_EQ(causes_of(out), 0) << model::nonfinite_causes_text(causes_of(out));
    EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
    const auto after = copy_of(method->state_entries());
    EXPECT_EQ(differences(trained_part(after), trained_part(before)), "") << name_of(net);
    EXPECT_EQ(after.at("scaler/scale").item<float>(), static_cast<float>(most * 0.5)) << name_of(net);
    EXPECT_EQ(after.at("scaler/growth_tracker").item<int32_t>(), 0);
    EXPECT_NE(differences(after, before), "") << "the forward's BatchNorm statistics were put back";
    EXPECT_EQ(after.at("predictor/1.num_batches_tracked").item<int64_t>(), 2);
  }
}

// A bad step (NaN query images: NaN queries, loss and gradients) keeps the scale too, which its NaN
// gradients would halve: nothing of it is kept; with a loss scale the gradients are not among its
// causes. NaN gradients alone are the scale's to skip: the optimizer's step skipped, the scale
// halved, not a bad step.
TEST(MocoV3Test, WithALossScaleABadStepKeepsTheScaleAndNanGradientsAreTheScales) {
  const auto c = small_v3(Net::kResnetLars);
  const auto context = local_context();
  {
    const test::ScopedEnv nan("MOCO_INJECT_NAN", "2:0:queries");
    auto method = make_v3(c, context, 7, loss_scaled(1024.0));
    method->step(views(1, 12), 1);
    const auto before = copy_of(method->state_entries());
    const auto out = method->step(views(2, 12), 2);
    EXPECT_FALSE(out.trained.item<bool>());
    EXPECT_EQ(causes_of(out), model::kNonfiniteQueries | model::kNonfiniteLoss);
    EXPECT_EQ(differences(copy_of(method->state_entries()), before), "");
    EXPECT_EQ(before.at("scaler/growth_tracker").item<int32_t>(), 1);
  }
  const test::ScopedEnv nan("MOCO_INJECT_NAN", "2:0:grads");
  auto method = make_v3(c, context, 7, loss_scaled(1024.0));
  method->step(views(1, 12), 1);
  const auto before = copy_of(method->state_entries());
  const auto out = method->step(views(2, 12), 2);
  EXPECT_TRUE(out.trained.item<bool>());
  EXPECT_EQ(causes_of(out), 0);
  const auto after = copy_of(method->state_entries());
  EXPECT_EQ(differences(trained_part(after), trained_part(before)), "");
  EXPECT_EQ(after.at("scaler/scale").item<float>(), 512.0f);
  EXPECT_EQ(after.at("scaler/growth_tracker").item<int32_t>(), 0);
}

// A run stopped after step 2 and resumed from its checkpointed tensors (into a model built from
// another seed) takes steps 3 to 6 as the uninterrupted run does, bit for bit, the loss scale's state
// included: a skip and a backoff at step 1, growth every 2 good steps after it.
TEST(MocoV3Test, AResumedRunContinuesTheLossScaleBitForBit) {
  for (const auto net : {Net::kResnetLars, Net::kVitAdamw}) {
    const auto c = small_v3(net);
    const auto context = local_context();
    const auto precision = loss_scaled(std::numeric_limits<float>::max(), 2);
    auto whole = make_v3(c, context, 8, precision), first = make_v3(c, context, 8, precision);
    for (int64_t step = 1; step <= 6; ++step) whole->step(views(step, image_size(net)), step);
    for (int64_t step = 1; step <= 2; ++step) first->step(views(step, image_size(net)), step);
    const auto saved = copy_of(first->state_entries());
    auto resumed = make_v3(c, context, 9, precision);
    {
      torch::NoGradGuard no_grad;
      for (const auto& entry : resumed->state_entries()) entry.tensor.copy_(saved.at(entry.name));
    }
    for (int64_t step = 3; step <= 6; ++step) resumed->step(views(step, image_size(net)), step);
    const auto want = copy_of(whole->state_entries());
    EXPECT_EQ(differences(copy_of(resumed->state_entries()), want), "") << name_of(net);
    EXPECT_LT(want.at("scaler/scale").item<float>(), static_cast<float>(std::numeric_limits<float>::max()))
        << "the first step did not overflow";
    EXPECT_NE(want.at("scaler/scale").item<float>(), saved.at("scaler/scale").item<float>())
        << "the scale did not move after the resume";
  }
}

// train.precision fp16 needs CUDA: on a CPU the run is refused naming the key and the device; MoCo
// v1/v2 refuse it; a resume may not switch into or out of it (the checkpoint's scaler/* entries),
// while fp32 and bf16 may follow each other.
TEST(MocoV3Test, Fp16IsRefusedOnACpuWithV2AndAcrossAResume) {
  auto c = small_v3(Net::kResnetLars);
  c.train.precision = run::Precision::kFp16;
  EXPECT_THROW(run::check_precision_for_device(c, torch::kCPU, "run.yaml"), run::ConfigError);
  const auto message = test::error_of([&] { run::check_precision_for_device(c, torch::kCPU, "run.yaml"); });
  EXPECT_NE(message.find("run.yaml: key 'train.precision' fp16 needs a CUDA device, and this rank's is cpu"),
            std::string::npos)
      << message;
  EXPECT_NO_THROW(run::check_precision_for_device(c, torch::Device(torch::kCUDA, 0), "run.yaml"));
  c.train.precision = run::Precision::kBf16;
  EXPECT_NO_THROW(run::check_precision_for_device(c, torch::kCPU, "run.yaml"));
  const auto step = moco_v3::step_precision(c);
  EXPECT_EQ(step.autocast, torch::kBFloat16);
  EXPECT_FALSE(step.loss_scale);
  c.train.precision = run::Precision::kFp16;
  const auto fp16 = moco_v3::step_precision(c);
  EXPECT_EQ(fp16.autocast, torch::kHalf);
  ASSERT_TRUE(fp16.loss_scale);
  EXPECT_EQ(fp16.loss_scale->init_scale, 65536.0);
  EXPECT_EQ(fp16.loss_scale->growth_interval, 2000);
  EXPECT_NE(test::error_of([] {
              run::load_config(moco::app::methods(), MOCO_TEST_DATA_DIR "/tiny_synthetic.yaml",
                               {"train.precision=fp16"});
            }).find("key 'train.precision' fp16: model.method v2 trains in fp32 or bf16"),
            std::string::npos);
  const auto fp32 =
      run::load_config(moco::app::methods(), MOCO_TEST_DATA_DIR "/tiny_synthetic_v3.yaml", {"train.precision=fp32"});
  for (const auto& [now, refused] : {std::pair{run::Precision::kFp16, true}, std::pair{run::Precision::kBf16, false}}) {
    auto resumed = fp32;
    resumed.train.precision = now;
    const auto changes = run::config_changes(fp32, resumed);
    ASSERT_EQ(changes.size(), 1u);
    EXPECT_EQ(changes[0].key, "train.precision");
    EXPECT_EQ(changes[0].changes_math, refused) << changes[0].after;
    EXPECT_EQ(run::config_changes(resumed, fp32)[0].changes_math, refused) << "back from " << changes[0].after;
  }
}

// On a GPU (tools/gpu_check.sh's gpu_tests): train.precision fp16 as a run takes it, the encoders and
// heads under float16 autocast with the loss scale, on both families: finite losses near fp32's, the
// weights move, the scale holds or backs off by powers of two, and no step waits for the device
// (LibTorch's CUDA sync debug mode, as debug.check_step_syncs). A scale of FLT_MAX then overflows
// the loss's gradient: the optimizer's step is skipped and the scale halved, as on the CPU.
TEST(MocoV3CudaTest, Fp16StepsUnderAutocastWithTheLossScale) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  for (const auto net : {Net::kResnetLars, Net::kVitAdamw}) {
    auto c = small_v3(net);
    run::RunContext context = local_context();
    context.device = gpu;
    auto fp32 = make_v3(c, context, 10);
    c.train.precision = run::Precision::kFp16;
    auto fp16 = make_v3(c, context, 10, moco_v3::step_precision(c));
    const auto start = copy_of(fp16->state_entries());
    for (int64_t step = 1; step <= 3; ++step) {
      auto batch = views(step, image_size(net));
      batch.query = batch.query.to(gpu);
      batch.key = batch.key.to(gpu);
      run::StepOutput half, full;
      {
        const train::StepSyncCheck no_syncs(true, gpu);
        half = fp16->step(batch, step);
        full = fp32->step(batch, step);
      }
      EXPECT_TRUE(half.trained.item<bool>()) << name_of(net) << " step " << step;
      EXPECT_EQ(causes_of(half), 0);
      EXPECT_TRUE(std::isfinite(half.loss.item<double>()));
      EXPECT_NEAR(half.loss.item<double>(), full.loss.item<double>(), 0.05 * full.loss.item<double>())
          << name_of(net) << " step " << step;
    }
    const auto after = copy_of(fp16->state_entries());
    EXPECT_NE(differences(trained_part(after), trained_part(start)), "") << name_of(net) << ": nothing trained";
    const float scale = after.at("scaler/scale").item<float>();
    EXPECT_TRUE(scale == 65536.0f || scale == 32768.0f || scale == 16384.0f) << scale;

    auto overflowing = loss_scaled(std::numeric_limits<float>::max());
    overflowing.autocast = torch::kHalf;
    auto overflow = make_v3(c, context, 11, overflowing);
    const auto before = copy_of(overflow->state_entries());
    auto batch = views(1, image_size(net));
    batch.query = batch.query.to(gpu);
    batch.key = batch.key.to(gpu);
    EXPECT_TRUE(overflow->step(batch, 1).trained.item<bool>());
    const auto skipped = copy_of(overflow->state_entries());
    EXPECT_EQ(differences(trained_part(skipped), trained_part(before)), "") << name_of(net);
    EXPECT_EQ(skipped.at("scaler/scale").item<float>(), static_cast<float>(std::numeric_limits<float>::max() * 0.5));
  }
}
