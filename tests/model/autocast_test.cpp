// bf16 autocast and channels-last: the same training, other numerics or memory order.
#include "model/autocast.h"
#include "moco_v2/moco.h"
#include "run/device.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace moco {
namespace {

moco_v2::Moco moco_in_precision(bool bf16) {
  auto encoder = model::resnet_options_for("resnet_tiny");
  encoder.in_channels = 1;
  encoder.small_stem = true;
  encoder.out_dim = 32;
  moco_v2::MocoOptions options;
  options.queue_size = 256;
  options.temperature = 0.2;
  options.bf16 = bf16;
  moco_v2::Moco m(encoder, options, std::make_shared<dist::LocalProcessGroup>(), /*seed=*/4);
  m->train();
  return m;
}

// The losses of `steps` SGD steps on fixed random batches.
std::vector<double> losses(moco_v2::Moco& moco, int steps, bool channels_last = false) {
  torch::optim::SGD sgd(moco->trainable_parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::manual_seed(11);
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    auto im_q = torch::randn({32, 1, 16, 16}), im_k = torch::randn({32, 1, 16, 16});
    if (channels_last) {
      im_q = im_q.contiguous(torch::MemoryFormat::ChannelsLast);
      im_k = im_k.contiguous(torch::MemoryFormat::ChannelsLast);
    }
    auto step = moco->forward(im_q, im_k);
    EXPECT_EQ(step.q.scalar_type(), torch::kFloat);  // what leaves the encoders is fp32 again
    EXPECT_EQ(step.k.scalar_type(), torch::kFloat);
    sgd.zero_grad();
    step.loss.backward();
    moco->end_step(step);
    sgd.step();
    out.push_back(step.loss.item<double>());
  }
  return out;
}

// The check the issue asks for on CPU (bf16 autocast exists there): over a few steps bf16 tracks
// fp32's loss closely, yet it is not fp32 under another name (the losses differ).
TEST(PrecisionTest, Bf16TracksFp32LossOverSteps) {
  auto fp32 = moco_in_precision(false), bf16 = moco_in_precision(true);
  const auto a = losses(fp32, 6), b = losses(bf16, 6);
  double max_rel = 0;
  bool any_differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    max_rel = std::max(max_rel, std::abs(a[i] - b[i]) / std::abs(a[i]));
    any_differs |= a[i] != b[i];
  }
  EXPECT_LT(max_rel, 0.02) << "bf16 drifted from fp32";
  EXPECT_TRUE(any_differs) << "bf16 gave fp32's losses bit for bit: autocast is not on";
}

TEST(PrecisionTest, AutocastGuardRunsConvolutionsInBf16AndRestoresTheState) {
  auto conv = torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3));
  const auto x = torch::randn({2, 1, 8, 8});
  {
    const model::AutocastGuard guard(torch::kCPU, true);
    EXPECT_EQ(conv->forward(x).scalar_type(), torch::kBFloat16);
    {
      const model::AutocastGuard off(torch::kCPU, false);  // a disabled guard changes nothing
      EXPECT_EQ(conv->forward(x).scalar_type(), torch::kBFloat16);
    }
  }
  EXPECT_EQ(conv->forward(x).scalar_type(), torch::kFloat);
}

// float16 autocast is CUDA's: on a CPU the guard refuses it (train.precision fp16 is refused there
// before, naming the key); disabled, it does nothing; a dtype autocast has no lists for is refused.
TEST(PrecisionTest, AutocastGuardRefusesFloat16OnACpu) {
  EXPECT_THROW(model::AutocastGuard(torch::kCPU, true, torch::kHalf), std::invalid_argument);
  EXPECT_THROW(model::AutocastGuard(torch::kCPU, true, torch::kFloat), std::invalid_argument);
  EXPECT_NO_THROW(model::AutocastGuard(torch::kCPU, false, torch::kHalf));
  EXPECT_NO_THROW(model::AutocastGuard(torch::Device(torch::kCUDA, 0), false, torch::kHalf));
}

TEST(PrecisionTest, ChannelsLastChangesTheMemoryOrderNotTheTraining) {
  auto plain = moco_in_precision(false), nhwc = moco_in_precision(false);
  run::use_channels_last(*nhwc);
  int four_d = 0;
  for (const auto& p : nhwc->parameters())
    if (p.dim() == 4) {
      ++four_d;
      EXPECT_TRUE(p.is_contiguous(torch::MemoryFormat::ChannelsLast));
    }
  EXPECT_GT(four_d, 0);
  const auto a = losses(plain, 4), b = losses(nhwc, 4, /*channels_last=*/true);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * std::abs(a[i])) << "step " << i;
}

TEST(PrecisionTest, ToDeviceKeepsValuesAndAppliesTheMemoryOrder) {
  const auto x = torch::randn({3, 2, 5, 5});
  const auto y = run::to_device(x, torch::kCPU, /*channels_last=*/true);
  EXPECT_TRUE(y.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::equal(x, y));
}

}  // namespace
}  // namespace moco
