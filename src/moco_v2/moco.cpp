#include "moco_v2/moco.h"

#include "model/autocast.h"
#include "model/momentum_update.h"
#include "moco_v2/batch_shuffle.h"
#include "moco_v2/contrastive.h"
#include "model/nonfinite.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace moco::moco_v2 {

MocoImpl::MocoImpl(const model::ResNetOptions& encoder, const MocoOptions& options,
                   std::shared_ptr<dist::ProcessGroup> group, uint64_t seed)
    : options_(options), group_(std::move(group)), seed_(seed) {
  if (!group_) throw std::invalid_argument("Moco needs a process group");
  if (options.queue_size < 1) throw std::invalid_argument("moco.queue_size must be positive");
  if (options.momentum < 0 || options.momentum > 1) throw std::invalid_argument("moco.momentum must lie in [0, 1]");
  if (options.temperature <= 0) throw std::invalid_argument("moco.temperature must be positive");

  torch::manual_seed(seed);
  encoder_q = register_module("encoder_q", model::ResNet(encoder));
  encoder_k = register_module("encoder_k", model::ResNet(encoder));
  for (auto& p : encoder_k->parameters()) p.set_requires_grad(false);
  copy_query_to_key();
  auto queue = torch::randn({encoder.out_dim, options.queue_size});
  queue_ = register_buffer(
      "queue", torch::nn::functional::normalize(queue, torch::nn::functional::NormalizeFuncOptions().dim(0)));
  queue_ptr_ = register_buffer("queue_ptr", torch::zeros({1}, torch::kLong));
  q_params_ = model::FlatTensors(encoder_q->parameters());
  k_params_ = model::FlatTensors(encoder_k->parameters());
  auto buffers = encoder_q->buffers();  // the query encoder's first
  for (const auto& b : encoder_k->buffers()) buffers.push_back(b);
  bn_ = model::flat_tensors_by_kind(buffers);
}

void MocoImpl::copy_query_to_key() {
  torch::NoGradGuard no_grad;
  const auto q_params = encoder_q->parameters();
  const auto k_params = encoder_k->parameters();
  for (size_t i = 0; i < q_params.size(); ++i) k_params[i].copy_(q_params[i]);
  const auto q_buffers = encoder_q->buffers();
  const auto k_buffers = encoder_k->buffers();
  for (size_t i = 0; i < q_buffers.size(); ++i) k_buffers[i].copy_(q_buffers[i]);
}

torch::Tensor MocoImpl::encode(model::ResNet& encoder, const torch::Tensor& images, torch::Tensor* pooled) const {
  // bf16 outputs are widened for the loss; fp32 (and fp64, which the equivalence test trains in) stay.
  const auto widened = [](const torch::Tensor& t) { return t.element_size() < 4 ? t.to(torch::kFloat) : t; };
  torch::Tensor features;
  {
    const model::AutocastGuard autocast(images.device(), options_.bf16);
    const auto backbone = encoder->features(images);
    if (pooled) *pooled = widened(backbone.detach());
    features = encoder->head(backbone);
  }
  return widened(features);
}

void MocoImpl::momentum_update() {
  RECORD_USER_SCOPE("update/momentum");  // Note [Update scopes] (sys/op_count.h)
  torch::NoGradGuard no_grad;
  const auto& q = q_params_.flat();
  auto k = k_params_.flat();
  if (!k_params_.same_layout(q_params_))
    throw std::logic_error(
        "the key encoder's parameters are not laid out as the query encoder's: change both "
        "encoders' memory format together");
  model::momentum_update({k}, {q}, options_.momentum);
  k_params_.bump_versions();
}

// The permutation of the global key batch for this step (with optim.micro_batch, of each piece's).
// One rank with one BatchNorm group needs none; shuffled anyway (MocoOptions::shuffle_at_world_one)
// its rows stay in place: one group sees the same statistics in any order, and only the same order
// keeps every bit of the unshuffled run.
std::vector<int64_t> MocoImpl::key_permutation(int64_t global_rows) const {
  if (group_->world_size() > 1 || encoder_k->options().bn_splits > 1)
    return shared_permutation(global_rows, seed_, steps_);
  std::vector<int64_t> identity(global_rows);
  std::iota(identity.begin(), identity.end(), 0);
  return identity;
}

torch::Tensor MocoImpl::key_forward(const torch::Tensor& im_k) {
  const int world = group_->world_size();
  if (world == 1 && encoder_k->options().bn_splits == 1 && !options_.shuffle_at_world_one)
    return encode(encoder_k, im_k);
  // Shuffle-BN: the key batch is permuted across ranks (or, on one device, across BN groups) so that
  // a key's BN statistics come from other samples than its query's: otherwise the statistics tell
  // the model which key is the positive.
  const BatchShuffle plan(key_permutation(im_k.size(0) * world), group_->rank(), world);
  const auto k = plan.unshuffle(encode(encoder_k, plan.shuffle(im_k, *group_)), *group_);
  const int64_t row_bytes =
      (im_k.numel() / im_k.size(0)) * im_k.element_size() + (k.numel() / k.size(0)) * k.element_size();
  last_shuffle_bytes_ += plan.rows_sent_to_others() * row_bytes;
  return k;
}

std::vector<torch::Tensor> MocoImpl::buffer_flats() {
  std::vector<torch::Tensor> flats;
  for (auto& kind : bn_) flats.push_back(kind.flat());
  return flats;
}

// Note [Skipping a step on the device]
// Whether any rank's step went non-finite (queries, keys, loss or gradients: NaN or Inf) is known
// only on the device. Reading it on the host would stall the GPU's queue every step, so every rank
// runs the whole step, and once the gradients are known (after backward, before anything is kept)
// one flag per rank is gathered; each state change then keeps its old value where `trained` is
// false (torch::where, bit for bit the new value where it is true; one per flat buffer: Note [Flat
// buffers]): the key encoder's parameters (saved before the momentum update, one copy), both
// encoders' BatchNorm buffers (the two: model::StepRollback, as v3's), the enqueue (after the flag, so no NaN key ever
// enters the queue) and the SGD step (MomentumSgd::step). The host learns of a skipped step later, when it reads the
// step's records anyway. The gradients are checked on each rank before they are averaged, so the
// flag names the rank they came from; a finite sum of finite averages is finite.
void MocoImpl::open_step() {
  if (open_step_keys_)
    throw std::logic_error("Moco::forward: the step before has not ended: call end_step after backward");
  if (options_.skip_nonfinite) rollback_.snapshot();
  last_shuffle_bytes_ = 0;
}

MocoOutput MocoImpl::forward_piece(const torch::Tensor& im_q, const torch::Tensor& im_k, bool momentum) {
  namespace F = torch::nn::functional;
  const auto unit = F::NormalizeFuncOptions().dim(1);
  MocoOutput out;
  out.q = F::normalize(encode(encoder_q, im_q, &out.q_features), unit);
  {
    torch::NoGradGuard no_grad;
    if (momentum) momentum_update();
    out.k = F::normalize(key_forward(im_k), unit);
  }
  // The fused loss makes its gradient here and keeps nothing of the queue, so end_step's enqueue
  // may come before or after backward (the plain composition would need a snapshot of it).
  auto contrastive = fused_contrastive_loss(out.q, out.k, queue_, options_.temperature);
  out.loss = contrastive.loss;
  out.positive_rank = contrastive.positive_rank;
  return out;
}

MocoOutput MocoImpl::forward(const torch::Tensor& im_q, const torch::Tensor& im_k) {
  open_step();
  MocoOutput out = forward_piece(im_q, im_k, /*momentum=*/true);
  open_step_keys_ = group_->all_gather(out.k);
  ++steps_;
  return out;
}

MocoOutput MocoImpl::forward_backward_in_pieces(const torch::Tensor& im_q, const torch::Tensor& im_k, int64_t piece,
                                                const run::PieceHooks<MocoOutput>& hooks) {
  const int64_t rows = im_q.size(0);
  if (piece < 1 || rows % piece != 0 || im_k.size(0) != rows)
    throw std::invalid_argument("Moco::forward_backward_in_pieces: pieces of " + std::to_string(piece) +
                                " rows do not split a share of " + std::to_string(rows));
  open_step();
  const int64_t pieces = rows / piece;
  const double weight = static_cast<double>(piece) / static_cast<double>(rows);
  std::vector<torch::Tensor> q, k, positive_rank, q_features;
  torch::Tensor loss;
  for (int64_t i = 0; i < pieces; ++i) {
    MocoOutput out = forward_piece(im_q.narrow(0, i * piece, piece), im_k.narrow(0, i * piece, piece), i == 0);
    const auto piece_loss = hooks.loss_to_backward ? hooks.loss_to_backward(out) : out.loss;
    if (i == 0 && hooks.before_first_backward) hooks.before_first_backward();
    if (i == pieces - 1 && hooks.before_last_backward) hooks.before_last_backward();
    const auto weighted = piece_loss * weight;
    weighted.backward();
    loss = i == 0 ? weighted.detach() : loss + weighted.detach();
    q.push_back(out.q.detach());
    k.push_back(out.k);
    positive_rank.push_back(out.positive_rank);
    q_features.push_back(out.q_features);
  }
  MocoOutput whole;
  whole.loss = loss;
  whole.q = torch::cat(q);
  whole.k = torch::cat(k);
  whole.positive_rank = torch::cat(positive_rank);
  whole.q_features = torch::cat(q_features);
  open_step_keys_ = group_->all_gather(whole.k);
  ++steps_;
  return whole;
}

void MocoImpl::end_step(MocoOutput& out, const torch::Tensor& gradients_nonfinite) {
  if (!open_step_keys_) throw std::logic_error("Moco::end_step: no step to end: call forward first");
  const torch::Tensor all_keys = std::move(*open_step_keys_);
  open_step_keys_.reset();
  if (options_.skip_nonfinite) {
    // One flag per rank, so that every rank skips the same step and can name who caused it.
    auto agreed =
        model::agree_on_step(model::nonfinite_causes({out.q}, {out.k}, out.loss, gradients_nonfinite), *group_);
    out.nonfinite_by_rank = std::move(agreed.nonfinite_by_rank);
    out.trained = std::move(agreed.trained);
    rollback_.restore_unless(out.trained);
  }
  enqueue_keys(queue_, queue_ptr_, all_keys, out.trained);
}

}  // namespace moco::moco_v2
