#include "moco_v2/invariants.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace moco;

namespace {

moco_v2::Moco small_moco() {
  auto o = model::resnet_options_for("resnet_tiny");
  o.in_channels = 1;
  o.small_stem = true;
  o.width = 0.125;
  o.out_dim = 16;
  o.bn_splits = 2;
  moco_v2::MocoOptions options;
  options.queue_size = 32;
  options.momentum = 0.9;
  moco_v2::Moco m(o, options, std::make_shared<dist::LocalProcessGroup>(), 3);
  m->train();
  return m;
}

std::string error_of_step(moco_v2::Moco& moco, moco_v2::InvariantChecker& checker,
                          const std::function<void()>& tamper) {
  checker.before_forward();
  auto out = moco->forward(torch::randn({8, 1, 12, 12}), torch::randn({8, 1, 12, 12}));
  moco->end_step(out);
  tamper();
  try {
    checker.after_forward(1);
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(InvariantCheckerTest, AcceptsRealStepsAndNamesEachBrokenInvariant) {
  auto moco = small_moco();
  moco_v2::InvariantChecker checker(*moco);
  torch::optim::SGD sgd(moco->trainable_parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 1; step <= 3; ++step) {  // real steps, the query encoder moving in between
    checker.before_forward();
    auto out = moco->forward(torch::randn({8, 1, 12, 12}), torch::randn({8, 1, 12, 12}));
    moco->end_step(out);
    EXPECT_NO_THROW(checker.after_forward(step));
    sgd.zero_grad();
    out.loss.backward();
    sgd.step();
    EXPECT_NO_THROW(checker.after_step(step));
  }
  torch::NoGradGuard no_grad;
  EXPECT_NE(
      error_of_step(moco, checker, [&] { moco->encoder_k->parameters()[3].add_(1e-6); }).find("is not m*k + (1-m)*q"),
      std::string::npos);
  EXPECT_NE(
      error_of_step(
          moco, checker,
          [&] { moco->encoder_k->parameters()[0].mutable_grad() = torch::ones_like(moco->encoder_k->parameters()[0]); })
          .find("received a gradient"),
      std::string::npos);
  moco->encoder_k->parameters()[0].mutable_grad() = torch::Tensor();
  EXPECT_NE(
      error_of_step(moco, checker, [&] { const_cast<torch::Tensor&>(moco->queue()).mul_(1.01); }).find("norm off 1"),
      std::string::npos);
}
