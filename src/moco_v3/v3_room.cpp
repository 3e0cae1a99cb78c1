#include "moco_v3/v3_room.h"

#include "model/vit.h"
#include "moco_v3/moco_v3.h"
#include "moco_v3/v3_settings.h"
#include "run/memory_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>

namespace moco::moco_v3 {
namespace {

// Bounds of the heads' sizes, far above the official recipes' (mlp_dim 4096, 2-3 layers).
constexpr int64_t kMostMlpDim = 1 << 16;
constexpr int64_t kMostLayers = 16;

template <typename T>
run::RowOf<T> key(const char* name, T Settings::*member, const char* help) {
  return run::ConfigRow::of<T>(name, help, [member](run::Config& c) -> T& { return settings(c).*member; })
      .after("model.pretrained");
}

std::vector<run::ConfigRow> keys() {
  using run::rules::in_closed;
  using run::rules::in_range;
  using run::rules::positive;
  return {
      key("v3.mlp_dim", &Settings::mlp_dim, "model.method v3: hidden width of the projector and predictor MLPs")
          .must(in_range(1, kMostMlpDim)),
      key("v3.projector_layers", &Settings::projector_layers,
          "model.method v3: Linear layers of the projector on the pooled features (2: the official ResNet "
          "builder, 3: its ViT builder; BN and ReLU between, a BN without affine last; its output is model.dim)")
          .must(in_range(1, kMostLayers)),
      key("v3.predictor_layers", &Settings::predictor_layers,
          "model.method v3: Linear layers of the predictor on the query side (BN and ReLU between)")
          .must(in_range(1, kMostLayers)),
      key("v3.predictor_last_bn", &Settings::predictor_last_bn,
          "model.method v3: the predictor's last Linear followed by BatchNorm without affine, as the official "
          "MoCo_ViT's (builder.py's _build_mlp, last_bn defaulting to true); false: none, as its MoCo_ResNet's"),
      key("v3.momentum", &Settings::momentum,
          "model.method v3: m0, the momentum encoder's m at the first step; m = 1 - (1-m0)(cos(pi p)+1)/2 at "
          "progress p of the run")
          .must(in_closed(0, 1)),
      key("v3.momentum_schedule", &Settings::momentum_schedule,
          "model.method v3: cosine (m from v3.momentum to 1 as above; main_moco.py --moco-m-cos, as the paper's "
          "recipes) or constant (v3.momentum throughout; main_moco.py without the flag)")
          .must([](const std::string& v) {
            return v == "cosine" || v == "constant" ? "" : "must be cosine or constant, not '" + v + "'";
          }),
      key("v3.temperature", &Settings::temperature, "model.method v3: T of the logits; each loss term is scaled by 2T")
          .must(positive),
      key("v3.stop_grad_conv1", &Settings::stop_grad_conv1,
          "model.method v3 with a ViT: the patch projection (patch_embed.proj) keeps its random initialisation, "
          "no gradient (main_moco.py --stop-grad-conv1)"),
  };
}

// A ViT's patches must tile the image, v3.stop_grad_conv1 is a ViT's; the momentum's schedule follows
// the steps of train.epochs.
void check(const run::Config& c, const std::string& where) {
  run::require(run::is_vit(c.model.arch) || !settings(c).stop_grad_conv1, where, "v3.stop_grad_conv1",
               fmt::format("applies to a ViT's patch projection, and model.arch {} is a ResNet", c.model.arch));
  if (run::is_vit(c.model.arch)) {
    const int64_t patch = model::vit_options_for(run::to_string(c.model.arch)).patch_size;
    run::require(
        c.data.augment.out_size % patch == 0, where, "data.image_size",
        fmt::format("({}) must be a multiple of {}'s patch size {}: the ViT's grid of patches covers the image",
                    c.data.augment.out_size, c.model.arch, patch));
  }
  run::require(c.train.time_budget_s == 0, where, "train.time_budget_s",
               "cannot be used with model.method v3 yet: its momentum schedule follows the steps of train.epochs");
}

// Both views go through the query encoder with autograd's graph (optim.micro_batch: a piece of one
// at a time). Its parameters and the projector's
// are held as the trained ones, their gradients, the momentum copies and the optimizer's state (two
// for AdamW), the predictor's without a momentum copy; the heads' square hidden layers and last
// layers make the most of them.
run::MemoryPlan step_memory(const run::Config& c, int world_size) {
  const double states = c.optim.optimizer == run::Optimizer::kAdamw ? 2 : 1;
  // optim.micro_batch: one piece of one view through the graph at a time.
  const double share = run::rank_images(c, world_size, run::Job::kMoco),
               piece = static_cast<double>(c.optim.micro_batch);
  const double graph_images = piece > 0 && piece < share ? piece : 2 * share;
  auto plan = run::encoder_parts(c, world_size, run::Job::kMoco, graph_images,
                                 /*parameter_copies=*/static_cast<int64_t>(3 + states));
  const Settings& s = settings(c);
  const auto width = static_cast<double>(s.mlp_dim), dim = static_cast<double>(c.model.dim);
  // Hidden layers width x width, the last width x model.dim; the projector's first (from the backbone's
  // features) is left out, a lower bound.
  const auto hidden = [width](int64_t layers) {
    return width * width * static_cast<double>(std::max<int64_t>(layers - 2, 0));
  };
  const double projector = hidden(s.projector_layers) + (s.projector_layers > 1 ? width * dim : 0);
  const double predictor = s.predictor_layers > 1 ? dim * width + hidden(s.predictor_layers) + width * dim : dim * dim;
  plan.push_back({"v3.mlp_dim",
                  fmt::format("({}) with v3.projector_layers {} and v3.predictor_layers {} makes heads of about "
                              "{:.3g} parameters",
                              s.mlp_dim, s.projector_layers, s.predictor_layers, projector + predictor),
                  4.0 * (projector * (3 + states) + predictor * (2 + states))});
  return plan;
}

// The official builder.py's heads: MoCo_ResNet a 2-layer projector and a predictor without a last BN,
// MoCo_ViT a 3-layer projector and a predictor with one (_build_mlp's last_bn), both 2-layer predictors.
std::string unofficial_modules(const run::Config& c) {
  const Settings& s = settings(c);
  const bool vit = run::is_vit(c.model.arch);
  const char* builder = vit ? "MoCo_ViT" : "MoCo_ResNet";
  std::vector<std::string> differ;
  if (s.projector_layers != (vit ? 3 : 2))
    differ.push_back(fmt::format("v3.projector_layers={} ({} builds {})", s.projector_layers, builder, vit ? 3 : 2));
  if (s.predictor_layers != 2)
    differ.push_back(fmt::format("v3.predictor_layers={} ({} builds 2)", s.predictor_layers, builder));
  if (s.predictor_last_bn != vit)
    differ.push_back(fmt::format("v3.predictor_last_bn={} ({} builds {})", s.predictor_last_bn, builder, vit));
  return fmt::format("{}", fmt::join(differ, ", "));
}

// Where its tensors lie in facebookresearch/moco-v3's main_moco.py checkpoint: builder.py's MoCo
// registers base_encoder (its projector in the head's place), momentum_encoder, then the predictor
// (v3_state_entries; tests/fixtures/official_layout/moco_v3_*.tsv); it saves its GradScaler too.
ckpt::OfficialLayout official_layout() {
  return {{{run::kQueryEncoderGroup, "module.base_encoder.", /*trained=*/true},
           {run::kMomentumEncoderGroup, "module.momentum_encoder."},
           {"predictor/", "module.predictor.", /*trained=*/true}},
          /*optimizer_group=*/"",
          /*saves_scaler=*/true};
}

}  // namespace

run::MethodRoom room() {
  run::MethodRoom r;
  r.name = kMethod;
  r.about = "MoCo v3 (projector and predictor, symmetric loss over the gathered keys, the v3.* keys)";
  r.accepts = {{run::Arch::kResnetTiny, run::Arch::kResnet18, run::Arch::kResnet34, run::Arch::kResnet50,
                run::Arch::kVitTinyCpu, run::Arch::kVitSmall, run::Arch::kVitBase},
               {run::Optimizer::kSgd, run::Optimizer::kLars, run::Optimizer::kAdamw},
               {run::Precision::kFp32, run::Precision::kBf16, run::Precision::kFp16},
               /*micro_batch=*/true};
  r.keys = keys();
  r.check = check;
  r.memory_plan = step_memory;
  r.unofficial_modules = unofficial_modules;
  r.encoder_group = run::kQueryEncoderGroup;
  r.official_layout = official_layout;
  r.initial_encoder = [](const run::Config& c, int64_t in_channels) {
    torch::manual_seed(c.train.seed);  // the run seeds the generator, then MocoV3Model builds encoder_q first
    return v3_backbone(c, in_channels);
  };
  r.make = [](const run::Config& c, const run::RunContext& ctx, int64_t in_channels) -> std::unique_ptr<run::Method> {
    return std::make_unique<MocoV3>(c, ctx, in_channels);
  };
  return r;
}

}  // namespace moco::moco_v3
