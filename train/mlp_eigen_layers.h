// The Eigen forward and backward of the digits MLP (train/mlp_layout.h) over one core's
// MlpStepBuffers, cut at the points where the trainers communicate: the tensor-parallel trainer
// (train/mlp_tp_trainer.h) all-reduces the partial logits between output_forward and
// add_output_bias, and the FSDP trainer (train/fsdp_trainer.h) gathers each layer's parameters
// before the step that reads them. Both run these same expressions, so their losses agree bit
// for bit where the reduction order does.
//
//   forward    z1 = x W1 + b1; a1 = relu(z1)            hidden_forward
//              logits = a1 W2 (+ b2)                     output_forward, add_output_bias
//              loss = CE(softmax(logits)); dZ2           loss_and_output_grad
//   backward   dW2 = a1^T dZ2; db2 = colsum(dZ2)         output_backward
//              dA1 = dZ2 W2^T (into a1)                  hidden_input_grad
//              dZ1 = dA1 (z1 > 0); dW1 = x^T dZ1; db1    hidden_backward
#pragma once

#include <cstdint>

#include "vtpu/train/mlp_layout.h"
#include "vtpu/train/mlp_trainer.h"

namespace vtpu {

/// One core's MLP layers over its step buffers: the activations are io's z1, a1 and logits
/// (io.shape().micro_rows rows, io.shape().hidden hidden units), the input rows a window of io's
/// batch. Parameter and gradient pointers are passed per call, so that a caller may hand in a
/// tensor shard, a gathered FSDP unit or a micro-batch's gradient bucket. Only the owning core
/// may call; `io` must outlive this object.
class MlpEigenLayers {
 public:
  explicit MlpEigenLayers(const MlpStepBuffers& io);

  /// The next pass reads rows [row0, row0 + micro_rows) of the batch (0 until called).
  void select_rows(int64_t row0) { row0_ = row0; }

  /// z1 = x W1 + b1, a1 = relu(z1). w1: 64 x hidden, b1: hidden.
  void hidden_forward(const float* w1, const float* b1);
  /// logits = a1 W2, without b2 (under Megatron a partial sum over the tensor shards). w2:
  /// hidden x 10.
  void output_forward(const float* w2);
  /// logits += b2 (10).
  void add_output_bias(const float* b2);
  /// Softmax cross-entropy of the logits against the rows' labels; the logits become dZ2 =
  /// (P - Y) * inv_batch. Returns the loss sum over the rows, in double.
  double loss_and_output_grad(float inv_batch);
  /// dW2 = a1^T dZ2 (hidden x 10), db2 = colsum(dZ2) (10).
  void output_backward(float* dw2, float* db2);
  /// dA1 = dZ2 W2^T, written over a1. w2: hidden x 10.
  void hidden_input_grad(const float* w2);
  /// dZ1 = dA1 where z1 > 0 (written over z1), dW1 = x^T dZ1 (64 x hidden), db1 = colsum(dZ1).
  void hidden_backward(float* dw1, float* db1);

  /// The logits buffer as the last step left it (partial logits after output_forward).
  MatMap& logits() { return logits_; }

 private:
  ConstMatMap x() const;
  ConstMatMap y() const;

  const MlpStepBuffers& io_;
  int64_t rows_, hidden_;
  int64_t row0_ = 0;
  MatMap z1_, a1_, logits_;
  // W2 and dW2 go through copies at Eigen's alignment (64 bytes): for a product this small
  // (rows + depth + cols < 20, e.g. dA1 for hidden 1 and 8 rows) Eigen computes coefficient by
  // coefficient, and which terms go through SIMD packets depends on the operands' addresses. W2
  // starts 65 H floats into the flat parameters but at the start of an FSDP unit, so without the
  // copies the two trainers' dA1 differed in its last bits.
  RowMatrix w2_aligned_, dw2_aligned_;
};

}  // namespace vtpu
