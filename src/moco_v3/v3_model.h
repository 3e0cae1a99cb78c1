// defines: V3Options, make_mlp (MoCo v3's MLP heads with BN), momentum_at (the momentum's half cosine
// to 1), contrastive_loss (the InfoNCE term over the keys gathered from every rank), V3Output, MocoV3Model
// (the query encoder with projector and predictor, the momentum encoder with projector)
#pragma once

#include "dist/process_group.h"
#include "model/backbone.h"
#include "model/resnet.h"
#include "run/piece_hooks.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace moco::moco_v3 {

struct V3Options {
  int64_t dim = 256;       // output of the projector and the predictor
  int64_t mlp_dim = 4096;  // their hidden width
  int64_t projector_layers = 2;
  int64_t predictor_layers = 2;
  double temperature = 1.0;  // T
  // The encoders and heads under autocast in this dtype (kBFloat16, or kHalf on CUDA), the loss in
  // fp32; kFloat: no autocast (train.precision).
  torch::Dtype autocast = torch::kFloat;
  // The predictor's last Linear followed by BatchNorm without affine: the official MoCo_ViT's
  // (builder.py's _build_mlp, whose last_bn defaults to true); MoCo_ResNet's predictor has none.
  bool predictor_last_bn = false;
};

// The official builder's MLP: `layers` Linear layers without bias, each but the last followed by
// BatchNorm and ReLU; the last by BatchNorm without affine when last_bn (SimCLR's design: the
// projector, and a ViT's predictor), by nothing otherwise (a ResNet's predictor). Indices as
// torch.nn.Sequential numbers them.
torch::nn::Sequential make_mlp(int64_t layers, int64_t in_dim, int64_t hidden_dim, int64_t out_dim, bool last_bn);

// The momentum encoder's m at `progress` (in [0, 1]: steps done / steps of the run): from m0 at the
// start to 1 at the end on a half cosine, m = 1 - (1 - m0) (cos(pi progress) + 1) / 2.
double momentum_at(double m0, double progress);

struct ContrastiveTerm {
  torch::Tensor loss;           // scalar, CE(q k_all^T / T, labels) * 2T, with the graph of q
  torch::Tensor positive_rank;  // [n]: how many of the gathered keys score above each query's own
};

// One term of v3's loss on this rank's n queries q (with graph) and keys k (no graph): the keys of
// every rank gathered (rank order), query i's positive is key n*rank + i of the gathered ones.
ContrastiveTerm contrastive_loss(const torch::Tensor& q, const torch::Tensor& k, double temperature,
                                 dist::ProcessGroup& group);

struct V3Output {
  torch::Tensor loss;           // ctr(q1, k2) + ctr(q2, k1)
  torch::Tensor positive_rank;  // of ctr(q1, k2)
  torch::Tensor q1, k2;         // the first term's queries (graph) and keys (no graph), not normalised
  torch::Tensor q2, k1;         // the second term's
  torch::Tensor features;       // the first view's pooled backbone features, no graph
};

// With more than one rank every BatchNorm is SyncBN across them (the official code converts the whole
// model), so N ranks compute what one process does with the global batch.
// The query encoder is a backbone whose head is the projector (as the official builder replaces a
// ResNet's fc, MoCo_ResNet, or a ViT's head, MoCo_ViT, so that names equal its state_dict:
// encoder_q.fc.0.weight, encoder_q.head.0.weight ...), then the predictor; the momentum encoder is a
// backbone with a projector of its own and no predictor. Its parameters never require grad: they move
// only by the momentum update, and its keys carry no graph.
class MocoV3ModelImpl : public torch::nn::Module {
 public:
  // `make_backbone` is called twice: the query encoder's, then the momentum encoder's.
  MocoV3ModelImpl(const std::function<model::Backbone()>& make_backbone, const V3Options& options,
                  std::shared_ptr<dist::ProcessGroup> group);
  MocoV3ModelImpl(const model::ResNetOptions& backbone, const V3Options& options,
                  std::shared_ptr<dist::ProcessGroup> group);

  // Both views through both encoders (the momentum update with m first, as the official forward),
  // and the symmetric loss. Collective (the keys' all-gather).
  V3Output forward(const torch::Tensor& x1, const torch::Tensor& x2, double m) { return forward(x1, x2, x1, x2, m); }
  // The same with the momentum encoder given views of its own (k_x1, k_x2): apart from the query
  // encoder's only where a test spoils one encoder's images (MOCO_INJECT_NAN).
  V3Output forward(const torch::Tensor& x1, const torch::Tensor& x2, const torch::Tensor& k_x1,
                   const torch::Tensor& k_x2, double m);
  // optim.micro_batch's forward and backward, the representation cache of GradCache (Gao et al.
  // 2021): the query backbone's pooled features of each piece of `piece` images without a graph; the
  // heads, the momentum encoder's projector and the loss on the whole batch (their BatchNorm over it);
  // the loss's gradient with respect to those features; then each piece again through the query
  // backbone, back-propagated with its share of that gradient. For a backbone without BatchNorm (a
  // ViT) the parameters' gradients are the whole batch's up to fp32 rounding; a ResNet's BatchNorm
  // normalises each piece apart (SyncBN: the ranks' same piece), the second pass with the first's
  // statistics, its running statistics moved once per piece (model::KeptBuffers). At most one piece's
  // activations are alive. `hooks` say what backward takes as the loss (a loss scale, a
  // test's fault) and what happens before the last backward (the reducer's averaging turned on).
  V3Output forward_backward_in_pieces(const torch::Tensor& x1, const torch::Tensor& x2, const torch::Tensor& k_x1,
                                      const torch::Tensor& k_x2, double m, int64_t piece,
                                      const run::PieceHooks<V3Output>& hooks);
  // k = m k + (1 - m) q over the backbone and projector parameters.
  void momentum_update(double m);
  // Makes the momentum encoder an exact copy of the query encoder (at start).
  void copy_query_to_key();
  // What the optimizer trains: the query encoder (projector included), then the predictor, each
  // parameter that requires grad (not a ViT's fixed position embedding, nor its patch projection with
  // stop_grad_conv1, which the official optimizer holds but never updates); and their names.
  std::vector<torch::Tensor> trainable_parameters() const;
  std::vector<std::string> trainable_names() const;

  model::Backbone encoder_q{nullptr}, encoder_k{nullptr};
  torch::nn::Sequential predictor{nullptr};
  const V3Options& options() const { return options_; }

 private:
  torch::Tensor query(const torch::Tensor& x, torch::Tensor* pooled = nullptr);
  torch::Tensor key(const torch::Tensor& x);
  // The pieces' ways: the query backbone's pooled features (autocast's dtype), the heads on them.
  torch::Tensor query_features(const torch::Tensor& x);
  torch::Tensor query_heads(const torch::Tensor& features);
  torch::Tensor key_in_pieces(const torch::Tensor& x, int64_t piece);
  // The loss of both terms on the queries and keys in `out` (which it completes).
  void symmetric_loss(V3Output& out);

  V3Options options_;
  std::shared_ptr<dist::ProcessGroup> group_;
  // The projectors, registered inside their encoders in the head's place ("fc", "head"; the
  // backbone's own head member is then stale: this model never calls it).
  torch::nn::Sequential projector_q_{nullptr}, projector_k_{nullptr};
};
TORCH_MODULE(MocoV3Model);

}  // namespace moco::moco_v3
