#include "moco_v2/v2_room.h"

#include "moco_v2/moco_v2.h"
#include "moco_v2/v2_settings.h"
#include "run/memory_plan.h"
#include "run/setup.h"

#include <fmt/format.h>
#include <torch/torch.h>

namespace moco::moco_v2 {
namespace {

template <typename T>
run::RowOf<T> key(const char* name, T Settings::*member, const char* help) {
  return run::ConfigRow::of<T>(name, help, [member](run::Config& c) -> T& { return settings(c).*member; });
}

std::vector<run::ConfigRow> keys() {
  using run::rules::in_closed;
  using run::rules::non_negative;
  using run::rules::positive;
  return {
      key("model.mlp", &Settings::mlp, "MoCo v2 projection head: Linear-ReLU-Linear instead of Linear")
          .after("model.dim"),
      key("moco.queue_size", &Settings::queue_size, "K, negatives in the queue; need not be a multiple of the batch")
          .must(run::rules::in_range(1, int64_t{1} << 30))
          .after("model.pretrained"),
      key("moco.momentum", &Settings::momentum, "m of the key encoder's update k = m*k + (1-m)*q")
          .must(in_closed(0, 1))
          .after("model.pretrained"),
      key("moco.temperature", &Settings::temperature, "T of the logits (0.07 in v1, 0.2 in v2)")
          .must(positive)
          .after("model.pretrained"),
      key("moco.bn_splits", &Settings::bn_splits,
          "BatchNorm groups in the global batch, keys shuffled across them (shuffle-BN): each of W ranks runs "
          "bn_splits/W groups (one when bn_splits <= W), so any W dividing it computes the same; 1: plain BN on "
          "one device")
          .after("model.pretrained"),
      key("dist.broadcast_buffers", &Settings::broadcast_buffers,
          "each step, both encoders' BatchNorm buffers are broadcast from rank 0 (the queue never is)")
          .after("dist.first_bucket_mb")
          .free_on_resume(),
      key("dist.queue_check_every", &Settings::queue_check_every,
          "steps between checks that every rank holds the same queue and pointer (and, with "
          "dist.broadcast_buffers, started the step with the same BatchNorm buffers); 0: never")
          .must(non_negative)
          .after("dist.first_bucket_mb")
          .free_on_resume(),
      key("debug.check_invariants", &Settings::check_invariants,
          "each step, check that the key encoder moved by exactly m*k + (1-m)*q and got no gradient, and that "
          "the queue holds unit keys and no graph (slow); not with debug.check_step_syncs, as it reads inside the "
          "step")
          .after("debug.anomaly_detection")
          .free_on_resume(),
  };
}

// Combinations that would not run as they read: a step's keys must fit in the queue, the BatchNorm
// groups must split the batch.
void check(const run::Config& c, const std::string& where) {
  const Settings& s = settings(c);
  run::require(s.queue_size >= c.optim.batch_size, where, "moco.queue_size",
               "must be at least optim.batch_size (a step's keys must fit in the queue)");
  run::require(s.bn_splits >= 1 && c.optim.batch_size % s.bn_splits == 0, where, "moco.bn_splits",
               "must be >= 1 and divide optim.batch_size");
  run::require(!(s.check_invariants && c.debug.check_step_syncs), where, "debug.check_invariants",
               "cannot be on with debug.check_step_syncs: its checks read the step's results on the host inside the "
               "step");
}

// A piece of optim.micro_batch splits into the rank's BatchNorm groups as the share would.
void check_for_world(const run::Config& c, int world_size, const std::string& where) {
  const int64_t groups = bn_splits_per_rank(c, world_size), piece = c.optim.micro_batch;
  run::require(piece == 0 || piece % groups == 0, where, "optim.micro_batch",
               fmt::format("({}) must be a multiple of the {} BatchNorm groups each of {} rank(s) runs (moco.bn_splits "
                           "{}): each piece splits into them",
                           piece, groups, world_size, settings(c).bn_splits));
}

// The query encoder trains on one view (the key encoder's forward keeps nothing for backward), a
// piece of it at a time with optim.micro_batch; its parameters are held 4 times (with their
// gradients, the key encoder, SGD's momentum). Every rank holds the whole queue, model.dim x
// moco.queue_size float32.
run::MemoryPlan step_memory(const run::Config& c, int world_size) {
  const double share = run::rank_images(c, world_size, run::Job::kMoco),
               piece = static_cast<double>(c.optim.micro_batch);
  auto plan = run::encoder_parts(c, world_size, run::Job::kMoco, piece > 0 && piece < share ? piece : share,
                                 /*parameter_copies=*/4);
  const Settings& s = settings(c);
  plan.push_back({"moco.queue_size",
                  fmt::format("({}) makes a queue of {} x {} float32", s.queue_size, c.model.dim, s.queue_size),
                  4.0 * static_cast<double>(c.model.dim) * static_cast<double>(s.queue_size)});
  return plan;
}

// Where its tensors lie in facebookresearch/moco's main_moco.py checkpoint: builder.py's MoCo registers
// encoder_q, encoder_k, then the queue (state_entries; tests/fixtures/official_layout/moco_v2_resnet50.tsv).
ckpt::OfficialLayout official_layout() {
  return {{{run::kQueryEncoderGroup, "module.encoder_q.", /*trained=*/true},
           {run::kMomentumEncoderGroup, "module.encoder_k."},
           {"moco/queue", "module.queue", false, /*buffer=*/true},
           {"moco/queue_ptr", "module.queue_ptr", false, /*buffer=*/true}},
          /*optimizer_group=*/run::kQueryEncoderGroup,
          /*saves_scaler=*/false};
}

}  // namespace

run::MethodRoom room() {
  run::MethodRoom r;
  r.name = kMethod;
  r.about = "MoCo v1/v2 with the queue (v1 or v2 as model.mlp, moco.temperature and data.augmentation say)";
  // The official main_moco.py trains torchvision's ResNets with SGD, without torch.cuda.amp.
  r.accepts = {{run::Arch::kResnetTiny, run::Arch::kResnet18, run::Arch::kResnet34, run::Arch::kResnet50},
               {run::Optimizer::kSgd},
               {run::Precision::kFp32, run::Precision::kBf16},
               /*micro_batch=*/true};
  r.keys = keys();
  r.check = check;
  r.memory_plan = step_memory;
  r.check_for_world = check_for_world;
  r.encoder_group = run::kQueryEncoderGroup;
  r.official_layout = official_layout;
  r.initial_encoder = [](const run::Config& c, int64_t in_channels) -> model::Backbone {
    torch::manual_seed(c.train.seed);                      // as Moco seeds the generator, then builds encoder_q first
    auto options = run::backbone_options(c, in_channels);  // plain BatchNorm: groups draw nothing
    options.mlp_head = settings(c).mlp;                    // the head's draws come after the backbone's
    return model::ResNet(options);
  };
  r.make = [](const run::Config& c, const run::RunContext& ctx, int64_t in_channels) -> std::unique_ptr<run::Method> {
    return std::make_unique<MocoV2>(c, ctx, in_channels);
  };
  return r;
}

}  // namespace moco::moco_v2
