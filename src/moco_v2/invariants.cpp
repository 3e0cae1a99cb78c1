#include "moco_v2/invariants.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/torch.h>

#include <stdexcept>

namespace moco::moco_v2 {
namespace {

void check_no_gradient(moco_v2::MocoImpl& moco, int64_t step) {
  for (const auto& item : moco.encoder_k->named_parameters()) {
    if (item.value().requires_grad())
      throw std::logic_error(fmt::format("step {}: key encoder parameter {} requires grad", step, item.key()));
    if (item.value().grad().defined())
      throw std::logic_error(fmt::format("step {}: key encoder parameter {} received a gradient", step, item.key()));
  }
}

}  // namespace

void InvariantChecker::before_forward() {
  q_before_.clear();
  k_before_.clear();
  for (const auto& p : moco_.encoder_q->parameters()) q_before_.push_back(p.detach().clone());
  for (const auto& p : moco_.encoder_k->parameters()) k_before_.push_back(p.detach().clone());
}

void InvariantChecker::after_forward(int64_t step, const torch::Tensor& trained) const {
  torch::NoGradGuard no_grad;
  // host read: debug.check_invariants reads every step (slow by design, never in a timed run).
  if (trained.defined() && !trained.item<bool>()) return;  // host read: as above
  const double m = moco_.options().momentum;
  const auto names = moco_.encoder_k->named_parameters();
  for (size_t i = 0; i < k_before_.size(); ++i) {
    // The same operations as the update itself, so equality is exact.
    const auto expected = k_before_[i].mul(m).add(q_before_[i], 1.0 - m);
    if (!torch::equal(names[i].value(), expected)) {
      const double off = (names[i].value() - expected).abs().max().item<double>();  // host read: an error
      throw std::logic_error(
          fmt::format("step {}: key encoder parameter {} is not m*k + (1-m)*q of the step before (off by {:.3g})", step,
                      names[i].key(), off));
    }
  }
  check_no_gradient(moco_, step);
  const auto& queue = moco_.queue();
  if (queue.requires_grad() || queue.grad_fn())
    throw std::logic_error(fmt::format("step {}: the queue holds an autograd graph", step));
  const auto norms = queue.norm(2, 0);
  const double worst = (norms - 1).abs().max().item<double>();  // host read: debug.check_invariants
  if (worst > 1e-4)
    throw std::logic_error(fmt::format("step {}: a queue column has norm off 1 by {:.3g}", step, worst));
}

void InvariantChecker::after_step(int64_t step) const { check_no_gradient(moco_, step); }

DebugChecks::DebugChecks(bool check_invariants, bool anomaly_detection, moco_v2::MocoImpl& moco) {
  if (check_invariants) invariants_.emplace(moco);
  torch::autograd::AnomalyMode::set_enabled(anomaly_detection);
  if (check_invariants || anomaly_detection)
    spdlog::info("debug: {}{}", check_invariants ? "invariants checked every step" : "",
                 anomaly_detection
                     ? (check_invariants ? ", autograd anomaly detection on" : "autograd anomaly detection on")
                     : "");
}

}  // namespace moco::moco_v2
