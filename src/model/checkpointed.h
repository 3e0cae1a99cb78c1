// defines: checkpointed(module, x, on), activation checkpointing of one module (LibTorch has no
// torch.utils.checkpoint): a ViT's block, a ResNet's stage
#pragma once

#include "model/autocast.h"
#include "model/kept_buffers.h"

#include <torch/torch.h>

#include <cstdint>

namespace moco::model {

// torch.utils.checkpoint's reentrant form as an autograd Function. Forward runs the module without a
// graph and keeps its input; backward runs it again with one, under the autocast state of the forward,
// and back-propagates the incoming gradient through it: the module's parameters get their gradients
// there (their hooks fire, as the reducer's need), the input's is returned. The recomputation in train
// mode normalises with the same batch statistics as the forward (the same input) and must not move
// BatchNorm's running statistics again (KeptBuffers). The module's address travels as an integer
// (saved_data holds IValues): the model owns the module beyond the step.
template <typename Module>
struct Checkpointed : public torch::autograd::Function<Checkpointed<Module>> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t module) {
    const AutocastState autocast = autocast_state(x.device());
    ctx->saved_data["module"] = module;
    ctx->saved_data["autocast"] = autocast.enabled;
    ctx->saved_data["dtype"] = static_cast<int64_t>(autocast.dtype);
    ctx->save_for_backward({x});
    torch::NoGradGuard no_grad;
    return reinterpret_cast<Module*>(module)->forward(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 const torch::autograd::variable_list& grad) {
    auto* module = reinterpret_cast<Module*>(ctx->saved_data["module"].toInt());
    const auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor out;
    {
      const KeptBuffers moved_once(*module);
      const torch::AutoGradMode with_graph(true);
      const AutocastGuard autocast(x.device(), ctx->saved_data["autocast"].toBool(),
                                   static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt()));
      out = module->forward(x);
    }
    torch::autograd::backward({out}, {grad[0]});
    return {x.grad(), torch::Tensor()};
  }
};

// The module on x, checkpointed where `on` and that keeps less and loses nothing: with a graph being
// recorded and an input that takes a gradient (otherwise the Function's output would carry none to
// the parameters).
template <typename Module>
torch::Tensor checkpointed(Module& module, const torch::Tensor& x, bool on) {
  if (!on || !torch::GradMode::is_enabled() || !x.requires_grad()) return module.forward(x);
  return Checkpointed<Module>::apply(x, reinterpret_cast<int64_t>(&module));
}

}  // namespace moco::model
