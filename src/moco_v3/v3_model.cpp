#include "moco_v3/v3_model.h"

#include "model/autocast.h"
#include "model/kept_buffers.h"
#include "model/momentum_update.h"
#include "model/sync_batchnorm.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <functional>
#include <vector>

namespace moco::moco_v3 {

namespace nn = torch::nn;

nn::Sequential make_mlp(int64_t layers, int64_t in_dim, int64_t hidden_dim, int64_t out_dim, bool last_bn) {
  nn::Sequential mlp;
  for (int64_t l = 0; l < layers; ++l) {
    const bool last = l == layers - 1;
    const int64_t from = l == 0 ? in_dim : hidden_dim, to = last ? out_dim : hidden_dim;
    mlp->push_back(nn::Linear(nn::LinearOptions(from, to).bias(false)));
    if (!last) {
      mlp->push_back(model::SyncBatchNorm(to, /*affine=*/true));
      mlp->push_back(nn::ReLU());
    } else if (last_bn) {
      mlp->push_back(model::SyncBatchNorm(to, /*affine=*/false));
    }
  }
  return mlp;
}

double momentum_at(double m0, double progress) { return 1.0 - (1.0 - m0) * (std::cos(M_PI * progress) + 1.0) / 2.0; }

ContrastiveTerm contrastive_loss(const torch::Tensor& q, const torch::Tensor& k, double temperature,
                                 dist::ProcessGroup& group) {
  namespace F = torch::nn::functional;
  const auto qn = F::normalize(q, F::NormalizeFuncOptions().dim(1));
  const auto kn = F::normalize(k, F::NormalizeFuncOptions().dim(1)).contiguous();
  const auto all_keys = group.all_gather(kn);  // [N, d]: no gradient crosses ranks (the keys have none)
  const auto logits = qn.mm(all_keys.t()) / temperature;
  const int64_t n = q.size(0);
  const auto labels = torch::arange(n, torch::dtype(torch::kLong).device(q.device())) + n * group.rank();
  const auto loss = F::cross_entropy(logits, labels) * (2.0 * temperature);
  torch::NoGradGuard no_grad;
  const auto positive = logits.gather(1, labels.unsqueeze(1));
  return {loss, (logits > positive).sum(1)};
}

MocoV3ModelImpl::MocoV3ModelImpl(const model::ResNetOptions& backbone, const V3Options& options,
                                 std::shared_ptr<dist::ProcessGroup> group)
    : MocoV3ModelImpl([&backbone] { return model::Backbone(model::ResNet(backbone)); }, options, std::move(group)) {}

MocoV3ModelImpl::MocoV3ModelImpl(const std::function<model::Backbone()>& make_backbone, const V3Options& options,
                                 std::shared_ptr<dist::ProcessGroup> group)
    : options_(options), group_(std::move(group)) {
  encoder_q = register_module("encoder_q", make_backbone());
  encoder_k = register_module("encoder_k", make_backbone());
  const int64_t features = encoder_q->feature_dim();
  projector_q_ = encoder_q->replace_module(
      encoder_q->head_name(),
      make_mlp(options.projector_layers, features, options.mlp_dim, options.dim, /*last_bn=*/true));
  projector_k_ = encoder_k->replace_module(
      encoder_k->head_name(),
      make_mlp(options.projector_layers, features, options.mlp_dim, options.dim, /*last_bn=*/true));
  predictor = register_module("predictor", make_mlp(options.predictor_layers, options.dim, options.mlp_dim, options.dim,
                                                    options.predictor_last_bn));
  for (auto& p : encoder_k->parameters()) p.requires_grad_(false);
  if (group_->world_size() > 1) model::use_sync_batchnorm(*this, group_);
  copy_query_to_key();
}

void MocoV3ModelImpl::copy_query_to_key() {
  torch::NoGradGuard no_grad;
  const auto q = encoder_q->parameters(), k = encoder_k->parameters();
  for (size_t i = 0; i < q.size(); ++i) k[i].copy_(q[i]);
  const auto qb = encoder_q->buffers(), kb = encoder_k->buffers();
  for (size_t i = 0; i < qb.size(); ++i) kb[i].copy_(qb[i]);
}

void MocoV3ModelImpl::momentum_update(double m) {
  model::momentum_update(encoder_k->parameters(), encoder_q->parameters(), m);
}

std::vector<torch::Tensor> MocoV3ModelImpl::trainable_parameters() const {
  std::vector<torch::Tensor> params;
  for (const auto& p : encoder_q->parameters())
    if (p.requires_grad()) params.push_back(p);
  for (const auto& p : predictor->parameters()) params.push_back(p);
  return params;
}

std::vector<std::string> MocoV3ModelImpl::trainable_names() const {
  std::vector<std::string> names;
  for (const auto& item : encoder_q->named_parameters())
    if (item.value().requires_grad()) names.push_back("encoder_q/" + item.key());
  for (const auto& item : predictor->named_parameters()) names.push_back("predictor/" + item.key());
  return names;
}

namespace {

// bf16 and fp16 outputs widened for the loss (and the pooled features for evaluation); fp32 and fp64 stay.
torch::Tensor widened(const torch::Tensor& t) { return t.element_size() < 4 ? t.to(torch::kFloat) : t; }

}  // namespace

torch::Tensor MocoV3ModelImpl::query(const torch::Tensor& x, torch::Tensor* pooled) {
  const model::AutocastGuard autocast(x.device(), options_.autocast != torch::kFloat, options_.autocast);
  const auto features = encoder_q->features(x);
  if (pooled) *pooled = widened(features.detach());
  return widened(predictor->forward(projector_q_->forward(features)));
}

// No NoGradGuard: the keys carry no graph because no parameter of the momentum encoder requires grad.
torch::Tensor MocoV3ModelImpl::key(const torch::Tensor& x) {
  const model::AutocastGuard autocast(x.device(), options_.autocast != torch::kFloat, options_.autocast);
  return widened(projector_k_->forward(encoder_k->features(x)));
}

void MocoV3ModelImpl::symmetric_loss(V3Output& out) {
  const auto first = contrastive_loss(out.q1, out.k2, options_.temperature, *group_);
  const auto second = contrastive_loss(out.q2, out.k1, options_.temperature, *group_);
  out.loss = first.loss + second.loss;
  out.positive_rank = first.positive_rank;
}

V3Output MocoV3ModelImpl::forward(const torch::Tensor& x1, const torch::Tensor& x2, const torch::Tensor& k_x1,
                                  const torch::Tensor& k_x2, double m) {
  V3Output out;
  out.q1 = query(x1, &out.features);
  out.q2 = query(x2);
  momentum_update(m);
  out.k1 = key(k_x1);
  out.k2 = key(k_x2);
  symmetric_loss(out);
  return out;
}

torch::Tensor MocoV3ModelImpl::query_features(const torch::Tensor& x) {
  const model::AutocastGuard autocast(x.device(), options_.autocast != torch::kFloat, options_.autocast);
  return encoder_q->features(x);
}

torch::Tensor MocoV3ModelImpl::query_heads(const torch::Tensor& features) {
  const model::AutocastGuard autocast(features.device(), options_.autocast != torch::kFloat, options_.autocast);
  return widened(predictor->forward(projector_q_->forward(features)));
}

torch::Tensor MocoV3ModelImpl::key_in_pieces(const torch::Tensor& x, int64_t piece) {
  const model::AutocastGuard autocast(x.device(), options_.autocast != torch::kFloat, options_.autocast);
  std::vector<torch::Tensor> features;
  for (const auto& part : x.split(piece)) features.push_back(encoder_k->features(part));
  return widened(projector_k_->forward(torch::cat(features)));
}

namespace {

// Each piece's pooled features without a graph, as one batch that takes a gradient (the cache).
torch::Tensor cached_features(const torch::Tensor& x, int64_t piece,
                              const std::function<torch::Tensor(const torch::Tensor&)>& features) {
  std::vector<torch::Tensor> pieces;
  {
    torch::NoGradGuard no_grad;
    for (const auto& part : x.split(piece)) pieces.push_back(features(part));
  }
  return torch::cat(pieces).requires_grad_(true);
}

}  // namespace

V3Output MocoV3ModelImpl::forward_backward_in_pieces(const torch::Tensor& x1, const torch::Tensor& x2,
                                                     const torch::Tensor& k_x1, const torch::Tensor& k_x2, double m,
                                                     int64_t piece, const run::PieceHooks<V3Output>& hooks) {
  if (piece < 1 || x1.size(0) % piece != 0)
    throw std::invalid_argument("MoCo v3: a batch of " + std::to_string(x1.size(0)) +
                                " images is not a whole number of pieces of " + std::to_string(piece));
  const auto features = [this](const torch::Tensor& x) { return query_features(x); };
  const std::vector<torch::Tensor> views{x1, x2};
  const std::vector<torch::Tensor> cache{cached_features(x1, piece, features), cached_features(x2, piece, features)};
  V3Output out;
  out.q1 = query_heads(cache[0]);
  out.q2 = query_heads(cache[1]);
  out.features = widened(cache[0].detach());
  momentum_update(m);
  out.k1 = key_in_pieces(k_x1, piece);
  out.k2 = key_in_pieces(k_x2, piece);
  symmetric_loss(out);
  const auto loss = hooks.loss_to_backward ? hooks.loss_to_backward(out) : out.loss;
  // The gradient reaching the features, without the heads' parameters: those get theirs once, with
  // the last piece's backward below (retain_graph keeps the heads' graph for it).
  const auto cached_grad = torch::autograd::grad({loss}, cache, {}, /*retain_graph=*/true);
  if (hooks.before_first_backward) hooks.before_first_backward();
  const int64_t pieces = x1.size(0) / piece;
  for (size_t v = 0; v < views.size(); ++v) {
    for (int64_t p = 0; p < pieces; ++p) {
      torch::Tensor recomputed;
      {
        const model::KeptBuffers moved_once(*encoder_q);  // a ResNet's BatchNorm moved in the first pass
        recomputed = query_features(views[v].narrow(0, p * piece, piece));
      }
      const auto grad = cached_grad[v].narrow(0, p * piece, piece);
      if (v + 1 < views.size() || p + 1 < pieces) {
        torch::autograd::backward({recomputed}, {grad});
        continue;
      }
      if (hooks.before_last_backward) hooks.before_last_backward();
      torch::autograd::backward({loss, recomputed}, {torch::ones_like(loss), grad});
    }
  }
  return out;
}

}  // namespace moco::moco_v3
