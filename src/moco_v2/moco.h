// defines: MocoOptions, Moco (query encoder, momentum key encoder, queue of keys)
#pragma once

#include "dist/process_group.h"
#include "model/flat_tensors.h"
#include "model/nonfinite.h"
#include "model/resnet.h"
#include "model/step_rollback.h"
#include "run/piece_hooks.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moco::moco_v2 {

struct MocoOptions {
  int64_t queue_size = 65536;  // K
  double momentum = 0.999;     // m in k = m*k + (1-m)*q
  double temperature = 0.07;   // T (0.2 for v2)
  // Every rank checks its queries, keys, loss and gradients before the step's state changes are
  // kept: if any rank's are not finite, all ranks skip the step (MocoOutput::trained).
  bool skip_nonfinite = false;
  // The encoders' forward (and so their backward) under bfloat16 autocast; their outputs are cast
  // back to fp32 before anything else (normalisation, loss, queue) sees them.
  bool bf16 = false;
  // A world of one that rehearses world N (dist.world_group_at_one): the key batch goes through the
  // group's all-to-all even with one BatchNorm group, which otherwise needs no shuffle.
  bool shuffle_at_world_one = false;
};

struct MocoOutput {
  torch::Tensor loss;           // scalar, with a graph into the query encoder only
  torch::Tensor positive_rank;  // [n]: how many of the K negatives score above the positive
  torch::Tensor q;              // [n, dim] normalised queries
  torch::Tensor k;              // [n, dim] normalised keys, no graph
  // Set by end_step with MocoOptions::skip_nonfinite, both on the device, decided there (the host
  // never waits): nonfinite_by_rank [world] int32, that rank's NonfiniteCause bits (0 where all its
  // values were finite); trained, a bool scalar, true when every rank's are 0. When false the step
  // changed nothing (the momentum update, both encoders' BatchNorm buffers and the enqueue all kept
  // their old values) and the caller must not step either: pass `trained` to MomentumSgd::step.
  // The loss then means nothing. Undefined without skip_nonfinite.
  torch::Tensor nonfinite_by_rank;
  torch::Tensor trained;
  torch::Tensor
      q_features;  // [n, feature_dim] the queries' pooled backbone features, no graph (an online probe's input)
};

// The key encoder is a copy of the query encoder that no optimizer sees and no gradient reaches:
// its parameters never require grad and move only by the momentum update. The queue holds only
// detached, normalised key-encoder outputs. Both are buffers/submodules so state_dict carries them.
class MocoImpl : public torch::nn::Module {
 public:
  MocoImpl(const model::ResNetOptions& encoder, const MocoOptions& options, std::shared_ptr<dist::ProcessGroup> group,
           uint64_t seed);

  // The first half of a training step: query forward (with graph); momentum update; key forward (no
  // graph, train mode BN); the loss against the queue as it is; the keys of all ranks gathered. The
  // caller then runs backward and calls end_step, which enqueues the keys; forward again before
  // end_step throws std::logic_error.
  MocoOutput forward(const torch::Tensor& im_q, const torch::Tensor& im_k);
  // The second half, after backward and before the optimizer's step. With skip_nonfinite: this
  // rank's NonfiniteCause bits (from out's queries, keys and loss and from `gradients_nonfinite`, a
  // bool scalar on the device: this rank's gradients held NaN or Inf) are gathered from every rank
  // into out.nonfinite_by_rank and out.trained; where not trained, the key encoder's parameters and
  // both encoders' BatchNorm buffers get back their values from before forward. Then the keys enter
  // the queue (or not: out.trained). Note [Skipping a step on the device].
  void end_step(MocoOutput& out, const torch::Tensor& gradients_nonfinite = {});
  // optim.micro_batch: forward and backward of the share in pieces of `piece` rows (a divisor), in
  // place of forward and the caller's backward; end_step follows as after forward. One momentum update
  // before the first piece; each piece's keys shuffled across ranks on their own (shuffle-BN per piece,
  // by the step's permutation of a piece's rows), its loss against the queue as it was before the step, weighted by
  // its share of the rows (the whole share's mean); every piece's keys enter the queue at end_step, the
  // share's in row order on each rank, ranks in order, as the whole share's would. The queries' and
  // keys' BatchNorm see a piece at a time (as a smaller batch per rank), so the step is the whole
  // share's only where BatchNorm does not couple the rows. The returned output has no graph: q, k,
  // positive_rank and q_features of the whole share, loss the weighted sum. The hooks (each optional):
  // the loss to back-propagate of a piece's output (a fault hook may spoil it), and calls before the
  // first and before the last backward (the reducer's local accumulation on, then off).
  MocoOutput forward_backward_in_pieces(const torch::Tensor& im_q, const torch::Tensor& im_k, int64_t piece,
                                        const run::PieceHooks<MocoOutput>& hooks = {});

  // k = m*k + (1-m)*q for every parameter. A few ops on the encoders' flat parameter buffers,
  // whatever the number of tensors (Note [Flat buffers]).
  void momentum_update();
  // Makes the key encoder an exact copy of the query encoder (at start, after rank 0's state arrives).
  void copy_query_to_key();
  // The queue and its pointer: rank 0's copy is broadcast once at start; after that every rank
  // enqueues the same keys and they never travel again.
  std::vector<torch::Tensor> queue_state() { return {queue_, queue_ptr_}; }
  // What the optimizer may train: the query encoder's parameters, nothing else.
  std::vector<torch::Tensor> trainable_parameters() const { return encoder_q->parameters(); }

  model::ResNet encoder_q{nullptr};
  model::ResNet encoder_k{nullptr};
  const torch::Tensor& queue() const { return queue_; }                 // [dim, K]
  int64_t queue_pointer() const { return queue_ptr_.item<int64_t>(); }  // a host read: for checks and tests
  const MocoOptions& options() const { return options_; }
  // Steps taken so far, skipped ones included: each step's shuffle permutation is drawn from (seed,
  // this count), so a resumed run must restore it to draw the permutations the uninterrupted run would have.
  int64_t shuffle_steps() const { return steps_; }
  void set_shuffle_steps(int64_t steps) { steps_ = steps; }
  // Bytes of images and keys this rank sent to other ranks for shuffle-BN in the last step.
  int64_t last_shuffle_bytes() const { return last_shuffle_bytes_; }
  // Both encoders' BatchNorm buffers (the query encoder's first), one flat buffer per dtype (Note
  // [Flat buffers]): what travels when rank 0's buffers are broadcast.
  std::vector<torch::Tensor> buffer_flats();

 private:
  MocoOptions options_;
  // The step's opening: refused while one is open; the rollback's snapshot with skip_nonfinite.
  void open_step();
  // Queries (with the graph), the momentum update where `momentum`, keys (shuffled across ranks), the
  // loss against the queue; the keys are not gathered.
  MocoOutput forward_piece(const torch::Tensor& im_q, const torch::Tensor& im_k, bool momentum);
  torch::Tensor key_forward(const torch::Tensor& im_k);
  std::vector<int64_t> key_permutation(int64_t global_rows) const;
  // encoder(images) under autocast when MocoOptions::bf16, returned in fp32; with `pooled`, also the
  // backbone's pooled features there, detached.
  torch::Tensor encode(model::ResNet& encoder, const torch::Tensor& images, torch::Tensor* pooled = nullptr) const;

  std::shared_ptr<dist::ProcessGroup> group_;
  uint64_t seed_;
  int64_t steps_ = 0;  // picks each step's shuffle permutation
  int64_t last_shuffle_bytes_ = 0;
  torch::Tensor queue_;
  torch::Tensor queue_ptr_;  // int64 [1]; a tensor so that state_dict and checkpoints carry it

  // Note [Flat buffers]: the encoders' parameters in two buffers of one layout; their BatchNorm
  // buffers in one per dtype, the query encoder's tensors first, then the key encoder's.
  model::FlatTensors q_params_, k_params_;
  std::vector<model::FlatTensors> bn_;

  // With skip_nonfinite, what a skipped step puts back: the key encoder's parameters, both encoders'
  // BatchNorm buffers.
  model::StepRollback rollback_{k_params_, bn_};
  // What forward keeps for end_step: the keys to enqueue.
  std::optional<torch::Tensor> open_step_keys_;
};
TORCH_MODULE(Moco);

}  // namespace moco::moco_v2
