#include "lincls/linear_classifier.h"

#include <torch/torch.h>

namespace moco::lincls {

LinearClassifier::LinearClassifier(int64_t in_features, int64_t num_classes, double momentum, double weight_decay,
                                   std::shared_ptr<dist::ProcessGroup> group, uint64_t seed, torch::Device device)
    : fc_(torch::nn::LinearOptions(in_features, num_classes)),
      mean_(torch::zeros({in_features}, torch::TensorOptions(device))),
      std_(torch::ones({in_features}, torch::TensorOptions(device))) {
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(seed);
    fc_->weight.normal_(0.0, 0.01);
    fc_->bias.zero_();
  }
  fc_->to(device);
  if (group->world_size() > 1) dist::broadcast_parameters(fc_->parameters(), *group);
  sgd_ = std::make_unique<optim::MomentumSgd>(fc_->parameters(), momentum, weight_decay);
  reducer_ = std::make_unique<dist::GradientReducer>(
      fc_->parameters(), std::move(group), dist::GradientReducer::kDefaultBucketCapBytes,
      dist::GradientReducer::kDefaultFirstBucketCapBytes, std::vector<std::string>{"fc.weight", "fc.bias"});
}

void LinearClassifier::set_standardization(const torch::Tensor& mean, const torch::Tensor& std) {
  torch::NoGradGuard no_grad;
  mean_.copy_(mean);
  std_.copy_(std);
}

torch::Tensor LinearClassifier::standardize(const torch::Tensor& features) const {
  return (features.to(mean_.device(), torch::kFloat) - mean_) / std_;
}

torch::Tensor LinearClassifier::predict(const torch::Tensor& features) {
  torch::NoGradGuard no_grad;
  return fc_->forward(standardize(features));
}

torch::Tensor LinearClassifier::step(const torch::Tensor& features, const torch::Tensor& labels, double lr) {
  const auto loss = torch::nn::functional::cross_entropy(fc_->forward(standardize(features).detach()),
                                                         labels.to(mean_.device(), torch::kLong));
  sgd_->set_lr(lr);
  sgd_->zero_grad();
  loss.backward();
  reducer_->finalize();
  sgd_->step();
  return loss.detach();
}

std::vector<ckpt::StateEntry> LinearClassifier::state_entries() {
  const auto& buffers = sgd_->momentum_buffers();
  return {{"lincls/fc.weight", fc_->weight},
          {"lincls/fc.bias", fc_->bias},
          {"lincls/feature_mean", mean_},
          {"lincls/feature_std", std_},
          {"optimizer/momentum_buffer/fc.weight", buffers[0]},
          {"optimizer/momentum_buffer/fc.bias", buffers[1]}};
}

TopK topk_correct(const torch::Tensor& logits, const torch::Tensor& labels) {
  torch::NoGradGuard no_grad;
  const int64_t k = std::min<int64_t>(5, logits.size(1));
  const auto top = std::get<1>(logits.topk(k, 1));
  const auto hit = top.eq(labels.to(top.device(), torch::kLong).view({-1, 1}));
  TopK t;
  t.correct1 = hit.select(1, 0).sum().item<int64_t>();
  t.correct5 = hit.any(1).sum().item<int64_t>();
  t.total = logits.size(0);
  return t;
}

TopK evaluate_classifier(LinearClassifier& classifier, const torch::Tensor& features, const torch::Tensor& labels,
                         dist::ProcessGroup& group, int64_t batch_size) {
  const int64_t n = features.size(0), world = group.world_size(), rank = group.rank();
  const int64_t begin = n * rank / world, end = n * (rank + 1) / world;
  TopK mine;
  for (int64_t start = begin; start < end; start += batch_size) {
    const int64_t count = std::min(batch_size, end - start);
    const auto t = topk_correct(classifier.predict(features.narrow(0, start, count)), labels.narrow(0, start, count));
    mine.correct1 += t.correct1;
    mine.correct5 += t.correct5;
    mine.total += t.total;
  }
  auto counts = torch::tensor({mine.correct1, mine.correct5, mine.total}, torch::kLong);
  if (world > 1) group.all_reduce(counts, dist::ReduceOp::kSum);
  return {counts[0].item<int64_t>(), counts[1].item<int64_t>(), counts[2].item<int64_t>()};
}

}  // namespace moco::lincls
