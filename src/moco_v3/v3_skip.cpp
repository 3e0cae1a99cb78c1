#include "moco_v3/v3_skip.h"

#include "model/nonfinite.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

namespace moco::moco_v3 {
namespace {

std::vector<torch::Tensor> every_buffer(MocoV3ModelImpl& model) {
  std::vector<torch::Tensor> buffers;
  for (torch::nn::Module* module :
       std::initializer_list<torch::nn::Module*>{model.encoder_q.get(), model.encoder_k.get(), model.predictor.get()})
    for (const auto& b : module->buffers()) buffers.push_back(b);
  return buffers;
}

}  // namespace

StepRollback::StepRollback(MocoV3ModelImpl& model)
    : momentum_parameters_(model.encoder_k->parameters()), buffers_(model::flat_tensors_by_kind(every_buffer(model))) {}

void StepRollback::snapshot() {
  RECORD_USER_SCOPE("update/skip_snapshot");  // Note [Update scopes] (sys/op_count.h)
  torch::NoGradGuard no_grad;
  momentum_parameters_before_ = momentum_parameters_.flat().clone();
  buffers_before_.clear();
  for (auto& kind : buffers_) buffers_before_.push_back(kind.flat().clone());
}

// The buffers are written through their flat buffer, without bumping their versions: nothing saved
// for a backward holds them any more (this comes after the backward).
void StepRollback::restore_unless(const torch::Tensor& keep_new) {
  RECORD_USER_SCOPE("update/skip_restore");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    auto values = buffers_[i].flat();
    torch::where_out(values, keep_new, values, buffers_before_[i]);
  }
  auto k = momentum_parameters_.flat();
  torch::where_out(k, keep_new, k, momentum_parameters_before_);
  momentum_parameters_.bump_versions();
}

}  // namespace moco::moco_v3
