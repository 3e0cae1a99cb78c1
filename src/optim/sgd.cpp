#include "optim/sgd.h"

#include "model/nonfinite.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

namespace moco::optim {
namespace {

// Zero buffers shaped, strided and laid out as the parameters: the update is then element by
// element over matching strides (channels-last convolutions included), with no permuting copy.
std::vector<torch::Tensor> zero_slices(model::FlatTensors& params) {
  const auto flat = params.zeros();
  std::vector<torch::Tensor> slices;
  for (size_t i = 0; i < params.size(); ++i) slices.push_back(params.slice(flat, i));
  return slices;
}

}  // namespace

MomentumSgd::MomentumSgd(std::vector<torch::Tensor> parameters, double momentum, double weight_decay)
    : params_(std::move(parameters)),
      buffers_(zero_slices(params_)),
      momentum_(momentum),
      weight_decay_(weight_decay) {}

bool MomentumSgd::gradients_bound() const {
  if (grads_layout_ != params_.layout_version()) return false;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_.is_slice(params_.tensors()[i].grad(), grads_, i)) return false;
  return true;
}

void MomentumSgd::zero_grad() {
  RECORD_USER_SCOPE("update/zero_grad");  // Note [Update scopes] (sys/op_count.h)
  if (gradients_bound()) {
    grads_.zero_();
    return;
  }
  for (const auto& p : params_.tensors())
    if (p.grad().defined()) p.mutable_grad().zero_();
}

torch::Tensor MomentumSgd::nonfinite_gradients() const {
  RECORD_USER_SCOPE("update/skip_flag");
  torch::NoGradGuard no_grad;
  if (gradients_bound()) return model::holds_nonfinite(grads_);
  // The first step (autograd made the gradients), or one after the parameters moved: tensor by tensor.
  std::vector<torch::Tensor> bad;
  for (const auto& p : params_.tensors())
    if (p.grad().defined()) bad.push_back(model::holds_nonfinite(p.grad()));
  if (bad.empty())
    return torch::zeros(
        {}, torch::dtype(torch::kBool).device(params_.size() ? params_.tensors()[0].device() : torch::kCPU));
  return torch::stack(bad).any();
}

// Makes every defined gradient its slice of grads_ (a copy where it is elsewhere); whether every
// parameter has one.
bool MomentumSgd::bind_gradients() {
  params_.flat();  // binds the parameters again if something moved them, perhaps to a new layout
  if (grads_layout_ != params_.layout_version()) {
    grads_ = params_.zeros();
    grads_layout_ = params_.layout_version();
  }
  bool all = true;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& g = params_.tensors()[i].mutable_grad();
    if (!g.defined()) {
      all = false;
    } else if (!params_.is_slice(g, grads_, i)) {
      auto slice = params_.slice(grads_, i);
      slice.copy_(g);
      g = slice;
    }
  }
  return all;
}

// A parameter given another memory order after construction (use_channels_last) takes its buffer
// along, values kept, so that both buffers keep one layout.
void MomentumSgd::match_buffers_to_parameters() {
  buffers_.flat();
  if (buffers_.same_layout(params_)) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& b = buffers_.tensors()[i];
    b.set_data(torch::empty_like(params_.tensors()[i], torch::MemoryFormat::Preserve).copy_(b));
  }
  buffers_.flat();
}

void MomentumSgd::step(const torch::Tensor& apply) {
  RECORD_USER_SCOPE("update/sgd");
  torch::NoGradGuard no_grad;
  if (!bind_gradients()) return step_each(apply);
  match_buffers_to_parameters();
  auto p = params_.flat(), buf = buffers_.flat();
  const auto d = weight_decay_ != 0 ? grads_.add(p, weight_decay_) : grads_;
  if (!apply.defined()) {
    buf.mul_(momentum_).add_(d);
    p.add_(buf, -lr_);
  } else {
    // The same kernels out of place, then kept only where `apply`.
    const auto buffer = buf.mul(momentum_).add_(d);
    const auto moved = p.add(buffer, -lr_);
    torch::where_out(buf, apply, buffer, buf);
    torch::where_out(p, apply, moved, p);
  }
  params_.bump_versions();
}

// The same update tensor by tensor, skipping parameters without a gradient.
void MomentumSgd::step_each(const torch::Tensor& apply) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_.tensors()[i];
    const auto& b = buffers_.tensors()[i];
    if (!p.grad().defined()) continue;
    auto d = p.grad();
    if (weight_decay_ != 0) d = d.add(p, weight_decay_);
    if (!apply.defined()) {
      b.mul_(momentum_).add_(d);
      p.add_(b, -lr_);
      continue;
    }
    const auto buffer = b.mul(momentum_).add_(d);
    const auto moved = p.add(buffer, -lr_);
    b.copy_(torch::where(apply, buffer, b));
    p.copy_(torch::where(apply, moved, p));
  }
}

}  // namespace moco::optim
