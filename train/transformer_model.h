// A small decoder-only transformer (GPT-2 style) with a hand-written backward pass and Megatron
// tensor parallelism, for the `vtpu train transformer` example.
//
// Model (character level, one token per byte; vocab V = 128, non-ASCII bytes map to '?'):
//   x = tok_emb[token] + pos_emb[t]                                    (N x D), N = B * C tokens
//   per block l:  x += Wo^T attn(LN1(x) Wqkv + bqkv) + bo              causal multi-head attention
//                 x += gelu(LN2(x) W1 + b1) W2 + b2                    MLP, GELU (tanh form)
//   logits = LN_f(x) Wh + bh                                           separate (untied) LM head
//   loss   = mean over the B * C positions of -log softmax(logits)[next token]
// Pre-layer-norm as GPT-2 (Radford et al. 2019); GELU tanh approximation (Hendrycks & Gimpel
// 2016); LayerNorm eps 1e-5; init N(0, 0.02) weights, unit gains, zero biases. Forward and
// backward are Eigen matmuls over caller-owned memory (HBM buffers in the trainer); no autodiff.
//
// Megatron tensor parallelism (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter
// Language Models Using Model Parallelism", Sec. 3, Fig. 3) over T shards, shard r of T:
//   attention  heads [r*H/T, (r+1)*H/T): Wqkv is column-parallel (the Q, K and V columns of those
//              heads), Wo is row-parallel (the matching rows). Each shard computes a partial
//              (N x D) sum of the output projection; one all-reduce (Megatron's g) completes it,
//              then bo is added once. In backward, the input gradient of LN1's output is a partial
//              sum over shards (each holds d(LN1 out) through its heads only); one all-reduce
//              (Megatron's f, the conjugate of g) completes it.
//   MLP        W1 column-parallel (hidden units [r*F/T, (r+1)*F/T)), W2 row-parallel: the same
//              one all-reduce in forward after W2 and one in backward before LN2.
//   everything else (embeddings, layer norms, the biases bo and b2, the LM head) is replicated:
//   every shard computes the same values and the same gradients for it, so it needs no
//   communication. Total: 2 * layers all-reduces of N x D in forward, 2 * layers in backward.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "vtpu/sharding/partition_spec.h"
#include "vtpu/train/adam.h"

namespace vtpu {

/// Model shape and training hyper-parameters. The defaults are the ones of
/// examples/models/transformer.json. Plain data, thread-compatible.
struct TransformerConfig {
  int64_t vocab = 128;   // token ids 0..vocab-1 (bytes)
  int64_t context = 64;  // C: tokens per sequence
  int64_t d_model = 64;  // D
  int64_t heads = 4;     // H; head dim D / H
  int64_t layers = 2;    // L
  int64_t hidden = 256;  // F: MLP hidden units
  int64_t batch = 16;    // B: sequences per step over all cores (global batch)
  int64_t steps = 200;   // Adam steps
  float learning_rate = 3e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, adam_eps = 1e-8f;  // Adam (Kingma & Ba 2015)
  uint64_t seed = 0;                                     // parameter init and batch windows
  int64_t log_every = 25;  // print the loss every this many steps (0: never)
  /// Gradient accumulation: each core computes its batch / data sequences as this many
  /// micro-batches of equal size, micro-batch k's gradients and loss sum (cast to f32) added to
  /// the bucket in order ((g_0 + g_1) + g_2) + ... . The single-core reference of a mesh with D
  /// data shards runs with micro_batches = D: the same f32 additions, in the same order, as the
  /// data-parallel all-reduce's rank-order fold (collectives/all_reduce_algorithms.h).
  int64_t micro_batches = 1;
  /// Dense projections: "eigen" (Eigen GEMMs) or "pallas" (the pipelined tiled matmul of
  /// runtime/pallas_kernels.h on each core, through VMEM and the DMA engine).
  std::string kernels = "eigen";
  /// Throws InvalidArgumentError naming the field and the expected range.
  void validate() const;
  /// Checks a data x tensor mesh: `tensor` divides heads and hidden, `data` divides batch, and
  /// micro_batches divides batch / data. Throws InvalidArgumentError naming both values.
  void validate_mesh(int64_t data, int64_t tensor) const;
};

/// One parameter tensor of a tensor-parallel shard: its global shape, the PartitionSpec over the
/// tensor axis 'model', and where its local block sits in the shard's flat vector.
/// Plain data, thread-compatible.
struct TransformerParam {
  std::string name;                   // e.g. "blocks.0.attn.wqkv"
  std::vector<int64_t> global_shape;  // elements per dimension
  PartitionSpec spec;                 // over the mesh axis "model"
  std::vector<int64_t> local_shape;   // the shard's block
  int64_t offset = 0;                 // in the flat shard vector, in elements
  int64_t num_elements() const;       // of the local block
};

/// The flat parameter vector of shard `tp_rank` of `tp_size`. Thread-safe (immutable).
class TransformerLayout {
 public:
  /// Throws InvalidArgumentError for a bad config or when tp_size does not divide heads or hidden
  /// (see TransformerConfig::validate_mesh).
  TransformerLayout(const TransformerConfig& config, int64_t tp_size);

  const std::vector<TransformerParam>& params() const { return params_; }
  /// Elements of one shard's flat vector.
  int64_t size() const { return size_; }
  int64_t tp_size() const { return tp_size_; }
  /// Offset (elements) of a parameter by name; throws InvalidArgumentError if unknown.
  int64_t offset(const std::string& name) const;
  const TransformerParam& param(const std::string& name) const;

 private:
  std::vector<TransformerParam> params_;
  int64_t size_ = 0;
  int64_t tp_size_ = 1;
};

/// The full (unsharded, tp_size 1) initial parameters: N(0, 0.02) weights (Box-Muller over
/// mt19937_64 raw draws, so every platform gives the same values), unit LayerNorm gains, zero
/// biases.
std::vector<float> transformer_init_parameters(const TransformerConfig& config);

/// Shard `tp_rank` of the full parameters `full` (TransformerLayout(config, 1) order): each
/// tensor's block is the one NamedSharding(Mesh({T}, {"model"}), spec) gives device tp_rank.
template <typename S>
std::vector<S> shard_transformer_parameters(const TransformerConfig& config,
                                            std::span<const S> full, int64_t tp_size,
                                            int64_t tp_rank);

/// Sum-all-reduce over the tensor-parallel group, in place. Every shard calls it at the same
/// points in the same order. For one shard it is a no-op.
template <typename S>
using TensorAllReduce = std::function<void(std::span<S>)>;

/// A dense matmul for the model's projections: out(m, n) = op(A)(m, k) op(B)(k, n), every matrix
/// row-major and contiguous, op(A) = A stored (m, k), or A^T with A stored (k, m) when ta; op(B)
/// likewise ((k, n), or (n, k) when tb). `out` is overwritten and aliases neither input. Sizes in
/// elements. The trainer passes the pipelined Pallas matmul (runtime/pallas_kernels.h) for
/// `--kernels pallas`; empty means Eigen.
template <typename S>
using DenseMatmul = std::function<void(const S* a, bool ta, const S* b, bool tb, S* out, int64_t m,
                                       int64_t n, int64_t k)>;

/// Forward and backward of one tensor-parallel shard on `local_batch` sequences. Templated on the
/// scalar (float for training, double for the finite-difference check). Thread-compatible: one
/// instance per core; run() writes its workspace and the gradients.
template <typename S>
class TransformerShard {
 public:
  TransformerShard(const TransformerConfig& config, int64_t tp_size, int64_t local_batch);
  const TransformerLayout& layout() const { return layout_; }
  /// Activation workspace run() needs, in elements of S.
  int64_t workspace_elements() const { return workspace_elements_; }
  /// The shapes of the workspace's tensors (activations and their gradients), in the order they
  /// sit in it: what the trainer charges HBM for, tensor by tensor.
  const std::vector<std::vector<int64_t>>& workspace_shapes() const { return workspace_shapes_; }

  /// tokens: local_batch rows of context + 1 ids (inputs then the shifted targets), each in
  /// [0, vocab). params: layout().size() elements. grads: overwritten with grad_scale times the
  /// gradient of the summed token loss (the trainer passes 1 / (global batch * context), so a sum
  /// over the data-parallel shards gives the gradient of the global mean). workspace:
  /// workspace_elements(). Returns the sum over the local tokens of -log p(target), in double.
  /// Calls tp_all_reduce exactly 2 * layers times in forward and 2 * layers in backward.
  /// Every dense projection (4 per block and the LM head; forward, and backward for the input and
  /// the weight gradient) goes through `matmul` when it is set; the attention core
  /// (per-head QK^T and PV, strided) always runs in Eigen.
  /// Throws InvalidArgumentError for a token out of range or a span of the wrong size.
  double run(std::span<const S> params, std::span<S> grads, std::span<const int32_t> tokens,
             S grad_scale, std::span<S> workspace, const TensorAllReduce<S>& tp_all_reduce,
             const DenseMatmul<S>& matmul = {}) const;

 private:
  TransformerConfig config_;
  TransformerLayout layout_;
  int64_t local_batch_;
  int64_t workspace_elements_ = 0;
  std::vector<std::vector<int64_t>> workspace_shapes_;
};

/// Adam with bias correction (Kingma & Ba 2015, Algorithm 1), in place, step t >= 1, with the
/// config's learning rate, betas and eps: train/adam.h's adam_update.
void adam_update(std::span<float> params, std::span<const float> grads, std::span<float> m,
                 std::span<float> v, int64_t t, const TransformerConfig& config);

/// Maps text to token ids: each byte, with bytes >= vocab replaced by '?' (63).
std::vector<int32_t> tokenize_bytes(std::span<const char> text, int64_t vocab);

}  // namespace vtpu
