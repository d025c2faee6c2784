// The non-GEMM kernels of `vtpu train transformer` (train/transformer_model.cc), in one place so
// that `vtpu bench hardware` (bench/kernel_bench.cc) measures exactly the code the trainer runs
// when it fills a profile's kernel rates (runtime/hardware_profile.h, KernelRates; priced by
// planner/cost_model.h). Row-major, contiguous unless a stride is given; sizes in elements.
// Templated on the scalar (float for training, double for the finite-difference check).
// Thread-compatible (pure functions of their arguments).
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>

namespace vtpu::nn {

template <typename S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename S>
using RowVec = Eigen::Matrix<S, 1, Eigen::Dynamic>;

inline constexpr double kLayerNormEps = 1e-5;

/// y = LN(x) * gain + bias over each of n rows of d; stores the row mean and 1/std (n each).
template <typename S>
void layer_norm_forward(const S* x, S* y, S* mu, S* rs, const S* gain, const S* bias, int64_t n,
                        int64_t d) {
  Eigen::Map<const Mat<S>> X(x, n, d);
  Eigen::Map<Mat<S>> Y(y, n, d);
  Eigen::Map<const RowVec<S>> g(gain, d), b(bias, d);
  for (int64_t i = 0; i < n; ++i) {
    const S m = X.row(i).mean();
    const S var = (X.row(i).array() - m).square().mean();
    const S r = S(1) / std::sqrt(var + static_cast<S>(kLayerNormEps));
    mu[i] = m;
    rs[i] = r;
    Y.row(i) = (((X.row(i).array() - m) * r) * g.array() + b.array()).matrix();
  }
}

/// Given dy (n x d), accumulates dgain and dbias and writes dx (overwrites; may alias dy: each dy
/// row is read before that dx row is written).
template <typename S>
void layer_norm_backward(const S* x, const S* dy, const S* mu, const S* rs, const S* gain, S* dx,
                         S* dgain, S* dbias, int64_t n, int64_t d) {
  Eigen::Map<const Mat<S>> X(x, n, d), DY(dy, n, d);
  Eigen::Map<Mat<S>> DX(dx, n, d);
  Eigen::Map<const RowVec<S>> g(gain, d);
  Eigen::Map<RowVec<S>> dg(dgain, d), db(dbias, d);
  RowVec<S> xhat(d), dxhat(d);
  for (int64_t i = 0; i < n; ++i) {
    xhat = (X.row(i).array() - mu[i]) * rs[i];
    dxhat = (DY.row(i).array() * g.array()).matrix();
    dg.array() += DY.row(i).array() * xhat.array();
    db += DY.row(i);
    const S mean_dxhat = dxhat.mean();
    const S mean_dxhat_xhat = (dxhat.array() * xhat.array()).mean();
    DX.row(i) = (rs[i] * (dxhat.array() - mean_dxhat - xhat.array() * mean_dxhat_xhat)).matrix();
  }
}

/// GELU, tanh form (Hendrycks & Gimpel 2016): a = u/2 (1 + tanh(k (u + 0.044715 u^3))),
/// k = sqrt(2/pi), over n elements (u and a may alias). Vectorised: Eigen's array tanh, which for
/// float is a rational approximation on SIMD registers (Eigen 3.4 generic_fast_tanh_float, the
/// same kind of approximation XLA's CPU backend emits for tanh); for double, std::tanh.
template <typename S>
void gelu_forward(const S* u, S* a, int64_t n) {
  constexpr S k = static_cast<S>(0.7978845608028654);  // sqrt(2 / pi)
  Eigen::Map<const Eigen::Array<S, Eigen::Dynamic, 1>> U(u, n);
  Eigen::Map<Eigen::Array<S, Eigen::Dynamic, 1>> A(a, n);
  A = S(0.5) * U * (S(1) + (k * (U + S(0.044715) * U.cube())).tanh());
}

/// GELU backward in place over n elements: g *= gelu'(u). Recomputes the tanh of the forward
/// (one per element, as the forward), so the forward keeps only u.
template <typename S>
void gelu_backward(const S* u, S* g, int64_t n) {
  constexpr S k = static_cast<S>(0.7978845608028654);
  Eigen::Map<const Eigen::Array<S, Eigen::Dynamic, 1>> U(u, n);
  Eigen::Map<Eigen::Array<S, Eigen::Dynamic, 1>> G(g, n);
  const auto t = (k * (U + S(0.044715) * U.cube())).tanh();
  G *= S(0.5) * (S(1) + t) +
       S(0.5) * U * (S(1) - t.square()) * k * (S(1) + S(3 * 0.044715) * U.square());
}

/// In place on the c x c scores of one head: row i becomes softmax of its first i + 1 entries,
/// the rest 0 (the causal mask).
template <typename S>
void causal_softmax_forward(S* scores, int64_t c) {
  Eigen::Map<Mat<S>> pr(scores, c, c);
  for (int64_t i = 0; i < c; ++i) {
    auto row = pr.row(i);
    const S m = row.head(i + 1).maxCoeff();
    row.head(i + 1) = (row.head(i + 1).array() - m).exp().matrix();
    row.head(i + 1) /= row.head(i + 1).sum();
    row.tail(c - i - 1).setZero();
  }
}

/// In place on dP (c x c): dS = P o (dP - rowsum(dP o P)) * scale, the softmax backward of
/// causal_softmax_forward's P (masked entries have P = 0).
template <typename S>
void softmax_backward(const S* probs, S* dp, int64_t c, S scale) {
  Eigen::Map<const Mat<S>> pr(probs, c, c);
  Eigen::Map<Mat<S>> d(dp, c, c);
  for (int64_t i = 0; i < c; ++i) {
    const S dot = (d.row(i).array() * pr.row(i).array()).sum();
    d.row(i) = (pr.row(i).array() * (d.row(i).array() - dot) * scale).matrix();
  }
}

/// Softmax cross-entropy of n rows of v logits against `target(i)`, in place: the logits become
/// (softmax - onehot) * grad_scale. Returns the sum of -log p(target) in double.
template <typename S, typename Target>
double softmax_cross_entropy(S* logits, int64_t n, int64_t v, S grad_scale, Target&& target) {
  Eigen::Map<Mat<S>> L(logits, n, v);
  double loss_sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    auto row = L.row(i);
    const S m = row.maxCoeff();
    row = (row.array() - m).exp().matrix();
    const S z = row.sum();
    const int32_t t = target(i);
    loss_sum -= std::log(static_cast<double>(row(t)) / static_cast<double>(z));
    row *= grad_scale / z;
    row(t) -= grad_scale;
  }
  return loss_sum;
}

}  // namespace vtpu::nn
