#include "vtpu/train/mlp_eigen_layers.h"

namespace vtpu {

namespace {

constexpr int64_t kIn = kMlpIn;
constexpr int64_t kOut = kMlpOut;

}  // namespace

MlpEigenLayers::MlpEigenLayers(const MlpStepBuffers& io)
    : io_(io),
      rows_(io.shape().micro_rows),
      hidden_(io.shape().hidden),
      z1_(io.z1.as<float>().data(), rows_, hidden_),
      a1_(io.a1.as<float>().data(), rows_, hidden_),
      logits_(io.logits.as<float>().data(), rows_, kOut),
      w2_aligned_(hidden_, kOut),
      dw2_aligned_(hidden_, kOut) {}

ConstMatMap MlpEigenLayers::x() const {
  return ConstMatMap(io_.x_data() + row0_ * kIn, rows_, kIn);
}

ConstMatMap MlpEigenLayers::y() const {
  return ConstMatMap(io_.y_data() + row0_ * kOut, rows_, kOut);
}

void MlpEigenLayers::hidden_forward(const float* w1, const float* b1) {
  z1_.noalias() = x() * ConstMatMap(w1, kIn, hidden_);
  z1_.rowwise() += ConstVecMap(b1, hidden_);
  a1_ = z1_.cwiseMax(0.0f);
}

void MlpEigenLayers::output_forward(const float* w2) {
  w2_aligned_ = ConstMatMap(w2, hidden_, kOut);
  logits_.noalias() = a1_ * w2_aligned_;
}

void MlpEigenLayers::add_output_bias(const float* b2) {
  logits_.rowwise() += ConstVecMap(b2, kOut);
}

double MlpEigenLayers::loss_and_output_grad(float inv_batch) {
  const ConstMatMap yb = y();
  const double loss_sum = softmax_cross_entropy_rows(logits_.data(), yb.data(), rows_);
  // Scaled by the global batch, so that the sum over the data shards is the gradient of the
  // global mean.
  logits_ = (logits_ - yb) * inv_batch;
  return loss_sum;
}

void MlpEigenLayers::output_backward(float* dw2, float* db2) {
  dw2_aligned_.noalias() = a1_.transpose() * logits_;
  MatMap(dw2, hidden_, kOut) = dw2_aligned_;
  VecMap(db2, kOut) = logits_.colwise().sum();
}

void MlpEigenLayers::hidden_input_grad(const float* w2) {
  w2_aligned_ = ConstMatMap(w2, hidden_, kOut);
  a1_.noalias() = logits_ * w2_aligned_.transpose();
}

void MlpEigenLayers::hidden_backward(float* dw1, float* db1) {
  z1_ = (z1_.array() > 0.0f).select(a1_, 0.0f);
  MatMap(dw1, kIn, hidden_).noalias() = x().transpose() * z1_;
  VecMap(db1, hidden_) = z1_.colwise().sum();
}

}  // namespace vtpu
