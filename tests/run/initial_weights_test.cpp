// run::InitialWeights: the encoder's weights as copied, lent for an evaluation and given back bitwise.
#include "run/initial_weights.h"

#include "model/resnet.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

namespace {

using moco::model::ResNet;

ResNet tiny_net() {
  auto o = moco::model::resnet_options_for("resnet_tiny");
  o.in_channels = 1;
  o.small_stem = true;
  return ResNet(o);
}

// Every parameter and buffer of `net`, cloned, in one list.
std::vector<torch::Tensor> snapshot(ResNet& net) {
  std::vector<torch::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  for (const auto& b : net->buffers()) out.push_back(b.detach().clone());
  return out;
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// A step's worth of change to every tensor, as training would make.
void train_a_little(ResNet& net) {
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.add_(0.5);
  for (auto& b : net->buffers())
    if (b.is_floating_point()) b.mul_(3.0);
}

TEST(InitialWeightsTest, LendsTheWeightsAsCopiedAndGivesTheTrainedOnesBackBitwise) {
  torch::manual_seed(7);
  auto net = tiny_net();
  const auto initial = snapshot(net);
  moco::run::InitialWeights copy(net);
  train_a_little(net);
  const auto trained = snapshot(net);
  ASSERT_FALSE(same(initial, trained));
  bool lent = false;
  copy.lend(net, [&] {
    lent = true;
    EXPECT_TRUE(same(snapshot(net), initial)) << "the encoder does not hold the weights as copied";
  });
  EXPECT_TRUE(lent);
  EXPECT_TRUE(same(snapshot(net), trained)) << "the trained weights did not come back";
}

TEST(InitialWeightsTest, TheTrainedWeightsComeBackWhenTheEvaluationThrows) {
  torch::manual_seed(7);
  auto net = tiny_net();
  moco::run::InitialWeights copy(net);
  train_a_little(net);
  const auto trained = snapshot(net);
  EXPECT_THROW(copy.lend(net, [] { throw std::runtime_error("evaluation failed"); }), std::runtime_error);
  EXPECT_TRUE(same(snapshot(net), trained));
}

TEST(InitialWeightsTest, AnotherNetworkIsRefused) {
  torch::manual_seed(7);
  auto net = tiny_net();
  moco::run::InitialWeights copy(net);
  auto o = moco::model::resnet_options_for("resnet18");
  ResNet other(o);
  EXPECT_THROW(copy.lend(other, [] {}), std::logic_error);
}

}  // namespace
