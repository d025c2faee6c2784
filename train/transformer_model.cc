#include "vtpu/train/transformer_model.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <numeric>
#include <random>

#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"
#include "vtpu/sharding/mesh.h"
#include "vtpu/sharding/named_sharding.h"
#include "vtpu/train/nn_kernels.h"

namespace vtpu {

namespace {

template <typename S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename S>
using MatMap = Eigen::Map<Mat<S>>;
template <typename S>
using CMatMap = Eigen::Map<const Mat<S>>;
// A block of columns inside wider rows (q, k, v of one head inside the qkv rows).
template <typename S>
using StridedMap = Eigen::Map<Mat<S>, 0, Eigen::OuterStride<>>;
template <typename S>
using CStridedMap = Eigen::Map<const Mat<S>, 0, Eigen::OuterStride<>>;
template <typename S>
using RowVec = Eigen::Matrix<S, 1, Eigen::Dynamic>;
template <typename S>
using VecMap = Eigen::Map<RowVec<S>>;
template <typename S>
using CVecMap = Eigen::Map<const RowVec<S>>;

constexpr double kInitStd = 0.02;

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

void TransformerConfig::validate() const {
  auto check = [](const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      throw InvalidArgumentError(std::string(name) + " is " + str(v) + " (expected " + str(lo) +
                                 ".." + str(hi) + ")");
    }
  };
  check("vocab", vocab, 64, 256);  // >= 64 so that '?' (63), the non-ASCII stand-in, is a token
  check("context", context, 1, 4096);
  check("d_model", d_model, 1, 8192);
  check("heads", heads, 1, d_model);
  check("layers", layers, 1, 256);
  check("hidden", hidden, 1, 65536);
  check("batch", batch, 1, 1 << 20);
  check("steps", steps, 1, 100000000);
  check("log_every", log_every, 0, int64_t{1} << 40);
  check("micro_batches", micro_batches, 1, 1 << 20);
  if (d_model % heads != 0) {
    throw InvalidArgumentError("d_model " + str(d_model) + " is not divisible by heads " +
                               str(heads) + " (expected head dim d_model / heads to be whole)");
  }
  if (!(learning_rate > 0.0f) || !std::isfinite(learning_rate)) {
    throw InvalidArgumentError("learning rate is " +
                               format_text("%g", static_cast<double>(learning_rate)) +
                               " (expected a finite value > 0)");
  }
  AdamOptions{beta1, beta2, adam_eps}.validate();
  if (kernels != "eigen" && kernels != "pallas") {
    throw InvalidArgumentError("kernels is '" + kernels + "' (expected eigen or pallas)");
  }
}

void TransformerConfig::validate_mesh(int64_t data, int64_t tensor) const {
  if (data < 1 || tensor < 1) {
    throw InvalidArgumentError("mesh " + str(data) + "x" + str(tensor) +
                               " (expected data and tensor axis sizes >= 1)");
  }
  if (heads % tensor != 0) {
    throw InvalidArgumentError("heads " + str(heads) +
                               " are not divisible by the tensor-parallel "
                               "axis size " +
                               str(tensor) +
                               " (Megatron splits attention heads evenly across the axis)");
  }
  if (hidden % tensor != 0) {
    throw InvalidArgumentError("MLP hidden " + str(hidden) +
                               " is not divisible by the tensor-parallel axis size " + str(tensor) +
                               " (Megatron splits the MLP hidden units evenly)");
  }
  if (batch % data != 0) {
    throw InvalidArgumentError("batch " + str(batch) +
                               " is not divisible by the data-parallel axis size " + str(data) +
                               " (each data shard takes batch / data sequences)");
  }
  if ((batch / data) % micro_batches != 0) {
    throw InvalidArgumentError("micro_batches " + str(micro_batches) + " does not divide the " +
                               str(batch / data) + " sequences of a data shard (batch " +
                               str(batch) + " / data " + str(data) + ")");
  }
}

int64_t TransformerParam::num_elements() const {
  int64_t n = 1;
  for (int64_t d : local_shape) n *= d;
  return n;
}

TransformerLayout::TransformerLayout(const TransformerConfig& c, int64_t tp_size)
    : tp_size_(tp_size) {
  c.validate();
  c.validate_mesh(1, tp_size);
  const Mesh mesh({tp_size}, {"model"});
  const PartitionSpec::Entry model{"model"};
  auto add = [&](std::string name, std::vector<int64_t> shape, PartitionSpec spec) {
    TransformerParam p;
    p.name = std::move(name);
    p.global_shape = shape;
    p.spec = spec;
    p.local_shape = NamedSharding(mesh, spec, ShardingMode::kStrict).shard_shape(shape);
    p.offset = size_;
    size_ += p.num_elements();
    params_.push_back(std::move(p));
  };
  const int64_t d = c.d_model;
  const PartitionSpec rep{};
  add("tok_emb", {c.vocab, d}, rep);
  add("pos_emb", {c.context, d}, rep);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string b = "blocks." + str(l) + ".";
    add(b + "ln1.gain", {d}, rep);
    add(b + "ln1.bias", {d}, rep);
    // (D, 3, D): input dim, q/k/v, output dim; the output dim (heads x head dim) is split.
    add(b + "attn.wqkv", {d, 3, d}, PartitionSpec({{}, {}, model}));
    add(b + "attn.bqkv", {3, d}, PartitionSpec({{}, model}));
    add(b + "attn.wo", {d, d}, PartitionSpec({model}));  // rows: row-parallel
    add(b + "attn.bo", {d}, rep);
    add(b + "ln2.gain", {d}, rep);
    add(b + "ln2.bias", {d}, rep);
    add(b + "mlp.w1", {d, c.hidden}, PartitionSpec({{}, model}));  // column-parallel
    add(b + "mlp.b1", {c.hidden}, PartitionSpec({model}));
    add(b + "mlp.w2", {c.hidden, d}, PartitionSpec({model}));  // row-parallel
    add(b + "mlp.b2", {d}, rep);
  }
  add("ln_f.gain", {d}, rep);
  add("ln_f.bias", {d}, rep);
  add("head.w", {d, c.vocab}, rep);
  add("head.b", {c.vocab}, rep);
}

const TransformerParam& TransformerLayout::param(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw InvalidArgumentError("no transformer parameter named '" + name + "'");
}

int64_t TransformerLayout::offset(const std::string& name) const { return param(name).offset; }

std::vector<float> transformer_init_parameters(const TransformerConfig& config) {
  const TransformerLayout layout(config, 1);
  std::vector<float> p(static_cast<size_t>(layout.size()), 0.0f);
  std::mt19937_64 gen(config.seed);
  auto uniform = [&] { return (static_cast<double>(gen() >> 11) + 0.5) * 0x1.0p-53; };  // (0,1)
  for (const auto& t : layout.params()) {
    const bool gain = t.name.ends_with(".gain");
    const bool weight = t.global_shape.size() >= 2;  // matrices and embeddings
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      float v = 0.0f;
      if (gain) {
        v = 1.0f;
      } else if (weight) {
        // Box-Muller, one normal per pair of uniforms (platform-independent).
        const double r = std::sqrt(-2.0 * std::log(uniform()));
        v = static_cast<float>(kInitStd * r * std::cos(2.0 * std::numbers::pi * uniform()));
      }
      p[static_cast<size_t>(t.offset + i)] = v;
    }
  }
  return p;
}

template <typename S>
std::vector<S> shard_transformer_parameters(const TransformerConfig& config,
                                            std::span<const S> full, int64_t tp_size,
                                            int64_t tp_rank) {
  const TransformerLayout whole(config, 1), shard(config, tp_size);
  if (static_cast<int64_t>(full.size()) != whole.size()) {
    throw InvalidArgumentError("full parameters have " + str(static_cast<int64_t>(full.size())) +
                               " elements, expected " + str(whole.size()));
  }
  if (tp_rank < 0 || tp_rank >= tp_size) {
    throw InvalidArgumentError("tensor-parallel rank " + str(tp_rank) + " outside [0, " +
                               str(tp_size) + ")");
  }
  const Mesh mesh({tp_size}, {"model"});
  std::vector<S> out(static_cast<size_t>(shard.size()));
  for (size_t i = 0; i < shard.params().size(); ++i) {
    const TransformerParam& g = whole.params()[i];
    const TransformerParam& s = shard.params()[i];
    const auto ranges =
        NamedSharding(mesh, s.spec).index_ranges(static_cast<int>(tp_rank), s.global_shape);
    // Row-major block copy for rank <= 3: pad the shape to 3 dims.
    std::vector<int64_t> shape = s.global_shape;
    std::vector<IndexRange> r = ranges;
    while (shape.size() < 3) {
      shape.insert(shape.begin(), 1);
      r.insert(r.begin(), IndexRange{0, 1});
    }
    int64_t o = s.offset;
    for (int64_t a = r[0].start; a < r[0].stop; ++a)
      for (int64_t b = r[1].start; b < r[1].stop; ++b)
        for (int64_t c = r[2].start; c < r[2].stop; ++c)
          out[static_cast<size_t>(o++)] =
              full[static_cast<size_t>(g.offset + (a * shape[1] + b) * shape[2] + c)];
  }
  return out;
}

template std::vector<float> shard_transformer_parameters<float>(const TransformerConfig&,
                                                                std::span<const float>, int64_t,
                                                                int64_t);
template std::vector<double> shard_transformer_parameters<double>(const TransformerConfig&,
                                                                  std::span<const double>, int64_t,
                                                                  int64_t);

namespace {

/// Workspace offsets (elements) for one shard's activations.
struct Workspace {
  struct Block {
    int64_t x_in, h1, mu1, rs1, qkv, probs, att, x_mid, h2, mu2, rs2, u, a;
  };
  std::vector<Block> blocks;
  int64_t x_out, hf, muf, rsf, logits, dx, dtmp, dqkv, datt, du, dp;
  int64_t size = 0;
  std::vector<std::vector<int64_t>> shapes;  // of every tensor, in offset order

  Workspace(const TransformerConfig& c, int64_t tp, int64_t local_batch) {
    const int64_t n = local_batch * c.context, d = c.d_model;
    const int64_t dl = d / tp, fl = c.hidden / tp, hl = c.heads / tp;
    auto take = [&](std::vector<int64_t> shape) {
      const int64_t o = size;
      size += std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
      shapes.push_back(std::move(shape));
      return o;
    };
    for (int64_t l = 0; l < c.layers; ++l) {
      Block b;
      b.x_in = take({n, d});
      b.h1 = take({n, d});
      b.mu1 = take({n});
      b.rs1 = take({n});
      b.qkv = take({n, 3 * dl});
      b.probs = take({local_batch, hl, c.context, c.context});
      b.att = take({n, dl});
      b.x_mid = take({n, d});
      b.h2 = take({n, d});
      b.mu2 = take({n});
      b.rs2 = take({n});
      b.u = take({n, fl});
      b.a = take({n, fl});
      blocks.push_back(b);
    }
    x_out = take({n, d});
    hf = take({n, d});
    muf = take({n});
    rsf = take({n});
    logits = take({n, c.vocab});
    dx = take({n, d});
    dtmp = take({n, d});
    dqkv = take({n, 3 * dl});
    datt = take({n, dl});
    du = take({n, fl});
    dp = take({c.context, c.context});
  }
};

using nn::layer_norm_backward;
using nn::layer_norm_forward;

/// One forward and backward of a TransformerShard, as named steps over the shard's parameters P,
/// gradients G and activation workspace W (offsets in `w`). Thread-compatible: one per call of
/// TransformerShard::run.
template <typename S>
class ShardPass {
 public:
  ShardPass(const TransformerConfig& c, const TransformerLayout& layout, int64_t local_batch,
            const S* params, S* grads, S* workspace, std::span<const int32_t> tokens,
            const TensorAllReduce<S>& tp_all_reduce, const DenseMatmul<S>& matmul)
      : c_(c),
        layout_(layout),
        w_(c, layout.tp_size(), local_batch),
        bsz_(local_batch),
        ctx_(c.context),
        d_(c.d_model),
        v_(c.vocab),
        n_(local_batch * c.context),
        dl_(c.d_model / layout.tp_size()),
        fl_(c.hidden / layout.tp_size()),
        hl_(c.heads / layout.tp_size()),
        dh_(c.d_model / c.heads),
        scale_(S(1) / std::sqrt(static_cast<S>(dh_))),
        P_(params),
        G_(grads),
        W_(workspace),
        tokens_(tokens),
        tp_all_reduce_(tp_all_reduce),
        matmul_(matmul) {}

  const Workspace& workspace() const { return w_; }

  /// x = tok_emb[input] + pos_emb[position], into the first block's input.
  void embed() {
    MatMap<S> x(W_ + (c_.layers > 0 ? w_.blocks[0].x_in : w_.x_out), n_, d_);
    CMatMap<S> tok(prm("tok_emb"), v_, d_), pos(prm("pos_emb"), ctx_, d_);
    for (int64_t i = 0; i < n_; ++i) x.row(i) = tok.row(input(i)) + pos.row(i % ctx_);
  }

  /// x_mid = x_in + Wo^T attn(LN1(x_in) Wqkv + bqkv) + bo, over this shard's heads.
  void attention_forward(int64_t l) {
    const auto& b = w_.blocks[static_cast<size_t>(l)];
    const std::string pre = "blocks." + str(l) + ".";
    const int64_t n = n_, d = d_, dl = dl_, ctx = ctx_, dh = dh_;
    layer_norm_forward(W_ + b.x_in, W_ + b.h1, W_ + b.mu1, W_ + b.rs1, prm(pre + "ln1.gain"),
                       prm(pre + "ln1.bias"), n, d);
    MatMap<S> qkv(W_ + b.qkv, n, 3 * dl);
    mm(W_ + b.h1, false, prm(pre + "attn.wqkv"), false, W_ + b.qkv, n, 3 * dl, d);
    qkv.rowwise() += CVecMap<S>(prm(pre + "attn.bqkv"), 3 * dl);
    for (int64_t s = 0; s < bsz_; ++s) {
      for (int64_t h = 0; h < hl_; ++h) {
        const S* base = W_ + b.qkv + s * ctx * 3 * dl + h * dh;
        CStridedMap<S> q(base, ctx, dh, Eigen::OuterStride<>(3 * dl));
        CStridedMap<S> k(base + dl, ctx, dh, Eigen::OuterStride<>(3 * dl));
        CStridedMap<S> vv(base + 2 * dl, ctx, dh, Eigen::OuterStride<>(3 * dl));
        MatMap<S> pr(W_ + b.probs + (s * hl_ + h) * ctx * ctx, ctx, ctx);
        pr.noalias() = (q * k.transpose()) * scale_;
        nn::causal_softmax_forward(pr.data(), ctx);
        StridedMap<S> o(W_ + b.att + s * ctx * dl + h * dh, ctx, dh, Eigen::OuterStride<>(dl));
        o.noalias() = pr * vv;
      }
    }
    MatMap<S> y(W_ + w_.dtmp, n, d);
    mm(W_ + b.att, false, prm(pre + "attn.wo"), false, W_ + w_.dtmp, n, d, dl);
    all_reduce(W_ + w_.dtmp, n * d);  // Megatron's g: complete the row-parallel sum
    MatMap<S> xm(W_ + b.x_mid, n, d);
    xm = CMatMap<S>(W_ + b.x_in, n, d) + y;
    xm.rowwise() += CVecMap<S>(prm(pre + "attn.bo"), d);
  }

  /// The next block's input (or x_out) = x_mid + gelu(LN2(x_mid) W1 + b1) W2 + b2, over this
  /// shard's hidden units.
  void mlp_forward(int64_t l) {
    const auto& b = w_.blocks[static_cast<size_t>(l)];
    const std::string pre = "blocks." + str(l) + ".";
    const int64_t n = n_, d = d_, fl = fl_;
    layer_norm_forward(W_ + b.x_mid, W_ + b.h2, W_ + b.mu2, W_ + b.rs2, prm(pre + "ln2.gain"),
                       prm(pre + "ln2.bias"), n, d);
    MatMap<S> u(W_ + b.u, n, fl), a(W_ + b.a, n, fl);
    mm(W_ + b.h2, false, prm(pre + "mlp.w1"), false, W_ + b.u, n, fl, d);
    u.rowwise() += CVecMap<S>(prm(pre + "mlp.b1"), fl);
    nn::gelu_forward(u.data(), a.data(), n * fl);
    mm(W_ + b.a, false, prm(pre + "mlp.w2"), false, W_ + w_.dtmp, n, d, fl);
    all_reduce(W_ + w_.dtmp, n * d);  // g
    const int64_t next = l + 1 < c_.layers ? w_.blocks[static_cast<size_t>(l + 1)].x_in : w_.x_out;
    MatMap<S> xo(W_ + next, n, d);
    xo = CMatMap<S>(W_ + b.x_mid, n, d) + CMatMap<S>(W_ + w_.dtmp, n, d);
    xo.rowwise() += CVecMap<S>(prm(pre + "mlp.b2"), d);
  }

  /// logits = LN_f(x_out) Wh + bh, then softmax cross-entropy: the logits become dlogits =
  /// (softmax - onehot) * grad_scale. Returns the loss sum.
  double head_forward(S grad_scale) {
    layer_norm_forward(W_ + w_.x_out, W_ + w_.hf, W_ + w_.muf, W_ + w_.rsf, prm("ln_f.gain"),
                       prm("ln_f.bias"), n_, d_);
    MatMap<S> logits(W_ + w_.logits, n_, v_);
    mm(W_ + w_.hf, false, prm("head.w"), false, W_ + w_.logits, n_, v_, d_);
    logits.rowwise() += CVecMap<S>(prm("head.b"), v_);
    auto target = [&](int64_t row) {
      return tokens_[static_cast<size_t>((row / ctx_) * (ctx_ + 1) + row % ctx_ + 1)];
    };
    return nn::softmax_cross_entropy(logits.data(), n_, v_, grad_scale, target);
  }

  /// The head's and LN_f's gradients; dx becomes the gradient of x_out.
  void head_backward() {
    CMatMap<S> logits(W_ + w_.logits, n_, v_);
    mm(W_ + w_.hf, true, W_ + w_.logits, false, grd("head.w"), d_, v_, n_);
    VecMap<S>(grd("head.b"), v_) = logits.colwise().sum();
    mm(W_ + w_.logits, false, prm("head.w"), true, W_ + w_.dtmp, n_, d_, v_);
    layer_norm_backward(W_ + w_.x_out, W_ + w_.dtmp, W_ + w_.muf, W_ + w_.rsf, prm("ln_f.gain"),
                        W_ + w_.dx, grd("ln_f.gain"), grd("ln_f.bias"), n_, d_);
  }

  /// The MLP sub-block's gradients; dx (the gradient of the block output, which is that of x_mid
  /// through the residual) gains the gradient through LN2.
  void mlp_backward(int64_t l) {
    const auto& b = w_.blocks[static_cast<size_t>(l)];
    const std::string pre = "blocks." + str(l) + ".";
    const int64_t n = n_, d = d_, fl = fl_;
    MatMap<S> dx(W_ + w_.dx, n, d), dtmp(W_ + w_.dtmp, n, d);
    VecMap<S>(grd(pre + "mlp.b2"), d) = dx.colwise().sum();
    CMatMap<S> u(W_ + b.u, n, fl);
    MatMap<S> du(W_ + w_.du, n, fl);
    mm(W_ + b.a, true, W_ + w_.dx, false, grd(pre + "mlp.w2"), fl, d, n);
    mm(W_ + w_.dx, false, prm(pre + "mlp.w2"), true, W_ + w_.du, n, fl, d);
    nn::gelu_backward(u.data(), du.data(), n * fl);
    mm(W_ + b.h2, true, W_ + w_.du, false, grd(pre + "mlp.w1"), d, fl, n);
    VecMap<S>(grd(pre + "mlp.b1"), fl) = du.colwise().sum();
    mm(W_ + w_.du, false, prm(pre + "mlp.w1"), true, W_ + w_.dtmp, n, d, fl);
    all_reduce(W_ + w_.dtmp, n * d);  // Megatron's f (backward): sum d(LN2 out) over the shards
    // LN backward in place on dtmp (it reads each dy row before it writes that dx row).
    layer_norm_backward(W_ + b.x_mid, W_ + w_.dtmp, W_ + b.mu2, W_ + b.rs2, prm(pre + "ln2.gain"),
                        W_ + w_.dtmp, grd(pre + "ln2.gain"), grd(pre + "ln2.bias"), n, d);
    dx += dtmp;  // gradient of x_mid
  }

  /// The attention sub-block's gradients; dx (the gradient of x_mid) becomes that of x_in.
  void attention_backward(int64_t l) {
    const auto& b = w_.blocks[static_cast<size_t>(l)];
    const std::string pre = "blocks." + str(l) + ".";
    const int64_t n = n_, d = d_, dl = dl_, ctx = ctx_, dh = dh_;
    MatMap<S> dx(W_ + w_.dx, n, d), dtmp(W_ + w_.dtmp, n, d);
    VecMap<S>(grd(pre + "attn.bo"), d) = dx.colwise().sum();
    mm(W_ + b.att, true, W_ + w_.dx, false, grd(pre + "attn.wo"), dl, d, n);
    mm(W_ + w_.dx, false, prm(pre + "attn.wo"), true, W_ + w_.datt, n, dl, d);
    MatMap<S> dp(W_ + w_.dp, ctx, ctx);
    for (int64_t s = 0; s < bsz_; ++s) {
      for (int64_t h = 0; h < hl_; ++h) {
        const int64_t off = s * ctx * 3 * dl + h * dh;
        const Eigen::OuterStride<> st(3 * dl);
        CStridedMap<S> q(W_ + b.qkv + off, ctx, dh, st), k(W_ + b.qkv + off + dl, ctx, dh, st),
            vv(W_ + b.qkv + off + 2 * dl, ctx, dh, st);
        StridedMap<S> dq(W_ + w_.dqkv + off, ctx, dh, st), dk(W_ + w_.dqkv + off + dl, ctx, dh, st),
            dv(W_ + w_.dqkv + off + 2 * dl, ctx, dh, st);
        CMatMap<S> pr(W_ + b.probs + (s * hl_ + h) * ctx * ctx, ctx, ctx);
        CStridedMap<S> dout(W_ + w_.datt + s * ctx * dl + h * dh, ctx, dh,
                            Eigen::OuterStride<>(dl));
        dv.noalias() = pr.transpose() * dout;
        dp.noalias() = dout * vv.transpose();
        // Softmax backward: dS = P o (dP - rowsum(dP o P)); masked entries have P = 0.
        nn::softmax_backward(pr.data(), dp.data(), ctx, scale_);
        dq.noalias() = dp * k;
        dk.noalias() = dp.transpose() * q;
      }
    }
    CMatMap<S> dqkv(W_ + w_.dqkv, n, 3 * dl);
    mm(W_ + b.h1, true, W_ + w_.dqkv, false, grd(pre + "attn.wqkv"), d, 3 * dl, n);
    VecMap<S>(grd(pre + "attn.bqkv"), 3 * dl) = dqkv.colwise().sum();
    mm(W_ + w_.dqkv, false, prm(pre + "attn.wqkv"), true, W_ + w_.dtmp, n, d, 3 * dl);
    all_reduce(W_ + w_.dtmp, n * d);  // f (backward): sum d(LN1 out) over the shards
    layer_norm_backward(W_ + b.x_in, W_ + w_.dtmp, W_ + b.mu1, W_ + b.rs1, prm(pre + "ln1.gain"),
                        W_ + w_.dtmp, grd(pre + "ln1.gain"), grd(pre + "ln1.bias"), n, d);
    dx += dtmp;  // gradient of x_in
  }

  /// The embeddings' gradients: dx scattered to the tokens' and positions' rows.
  void embed_backward() {
    CMatMap<S> dx(W_ + w_.dx, n_, d_);
    MatMap<S> dtok(grd("tok_emb"), v_, d_), dpos(grd("pos_emb"), ctx_, d_);
    for (int64_t i = 0; i < n_; ++i) {
      dtok.row(input(i)) += dx.row(i);
      dpos.row(i % ctx_) += dx.row(i);
    }
  }

 private:
  const S* prm(const std::string& name) const { return P_ + layout_.offset(name); }
  S* grd(const std::string& name) const { return G_ + layout_.offset(name); }
  int32_t input(int64_t row) const {
    return tokens_[static_cast<size_t>((row / ctx_) * (ctx_ + 1) + row % ctx_)];
  }
  void all_reduce(S* data, int64_t count) const {
    if (tp_all_reduce_) tp_all_reduce_(std::span<S>(data, static_cast<size_t>(count)));
  }
  /// Every dense projection: the caller's matmul (the pipelined Pallas kernel with --kernels
  /// pallas), else Eigen.
  void mm(const S* a, bool ta, const S* bm, bool tb, S* out, int64_t m, int64_t nn,
          int64_t k) const {
    if (matmul_) {
      matmul_(a, ta, bm, tb, out, m, nn, k);
      return;
    }
    MatMap<S> C(out, m, nn);
    if (!ta && !tb) {
      C.noalias() = CMatMap<S>(a, m, k) * CMatMap<S>(bm, k, nn);
    } else if (ta && !tb) {
      C.noalias() = CMatMap<S>(a, k, m).transpose() * CMatMap<S>(bm, k, nn);
    } else if (!ta && tb) {
      C.noalias() = CMatMap<S>(a, m, k) * CMatMap<S>(bm, nn, k).transpose();
    } else {
      C.noalias() = CMatMap<S>(a, k, m).transpose() * CMatMap<S>(bm, nn, k).transpose();
    }
  }

  const TransformerConfig& c_;
  const TransformerLayout& layout_;
  const Workspace w_;
  const int64_t bsz_, ctx_, d_, v_, n_, dl_, fl_, hl_, dh_;
  const S scale_;  // 1 / sqrt(head dim)
  const S* P_;
  S* G_;
  S* W_;
  std::span<const int32_t> tokens_;
  const TensorAllReduce<S>& tp_all_reduce_;
  const DenseMatmul<S>& matmul_;
};

}  // namespace

template <typename S>
TransformerShard<S>::TransformerShard(const TransformerConfig& config, int64_t tp_size,
                                      int64_t local_batch)
    : config_(config), layout_(config, tp_size), local_batch_(local_batch) {
  if (local_batch < 1) {
    throw InvalidArgumentError("local batch is " + str(local_batch) + " (expected >= 1)");
  }
  Workspace w(config, tp_size, local_batch);
  workspace_elements_ = w.size;
  workspace_shapes_ = std::move(w.shapes);
}

template <typename S>
double TransformerShard<S>::run(std::span<const S> params, std::span<S> grads,
                                std::span<const int32_t> tokens, S grad_scale,
                                std::span<S> workspace, const TensorAllReduce<S>& tp_all_reduce,
                                const DenseMatmul<S>& matmul) const {
  const TransformerConfig& c = config_;
  auto check_size = [](const char* what, size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want) {
      throw InvalidArgumentError(std::string(what) + " has " + str(static_cast<int64_t>(got)) +
                                 " elements, expected " + str(want));
    }
  };
  check_size("params", params.size(), layout_.size());
  check_size("grads", grads.size(), layout_.size());
  check_size("tokens", tokens.size(), local_batch_ * (c.context + 1));
  check_size("workspace", workspace.size(), workspace_elements_);
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.vocab) {
      throw InvalidArgumentError("token id " + std::to_string(t) + " outside [0, " + str(c.vocab) +
                                 ")");
    }
  }
  std::fill(grads.begin(), grads.end(), S(0));
  ShardPass<S> pass(c, layout_, local_batch_, params.data(), grads.data(), workspace.data(), tokens,
                    tp_all_reduce, matmul);
  pass.embed();
  for (int64_t l = 0; l < c.layers; ++l) {
    pass.attention_forward(l);
    pass.mlp_forward(l);
  }
  const double loss_sum = pass.head_forward(grad_scale);
  pass.head_backward();
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    pass.mlp_backward(l);
    pass.attention_backward(l);
  }
  pass.embed_backward();
  return loss_sum;
}

template class TransformerShard<float>;
template class TransformerShard<double>;

void adam_update(std::span<float> params, std::span<const float> grads, std::span<float> m,
                 std::span<float> v, int64_t t, const TransformerConfig& c) {
  adam_update(params, grads, m, v, t, c.learning_rate, AdamOptions{c.beta1, c.beta2, c.adam_eps});
}

std::vector<int32_t> tokenize_bytes(std::span<const char> text, int64_t vocab) {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int32_t b = static_cast<unsigned char>(text[i]);
    out[i] = b < vocab ? b : '?';
  }
  return out;
}

}  // namespace vtpu
