// The digits MLP's flat parameter vector and the Eigen views its trainers compute with: one
// definition for train_mlp and train_mlp_tensor_parallel (train/mlp_tp_trainer.h) and
// train_fsdp (train/fsdp_trainer.h).
//
// The model is 64 -> H -> 10 (DigitsDataset's features and classes). Its parameters live in one
// flat f32 vector [W1 (64 x H), b1 (H), W2 (H x 10), b2 (10)], row-major, 75 H + 10 elements. A
// Megatron tensor shard of T (train/mlp_tp_trainer.h) has the same layout with H / T hidden
// units, so MlpLayout{H / T} gives its offsets too.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <vector>

#include "vtpu/train/digits_dataset.h"

namespace vtpu {

/// Row-major f32 matrices and vectors mapped over HBM (or host) memory.
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMatrix>;
using ConstMatMap = Eigen::Map<const RowMatrix>;
using VecMap = Eigen::Map<Eigen::RowVectorXf>;
using ConstVecMap = Eigen::Map<const Eigen::RowVectorXf>;

inline constexpr int64_t kMlpIn = DigitsDataset::kNumFeatures;  // 64 input features
inline constexpr int64_t kMlpOut = DigitsDataset::kNumClasses;  // 10 classes

/// Offsets, in elements, of the flat vector [W1 (64 x hidden), b1 (hidden), W2 (hidden x 10),
/// b2 (10)]. Plain data.
struct MlpLayout {
  int64_t hidden;  // hidden units (of the whole model, or of one tensor shard)
  int64_t w1() const { return 0; }
  int64_t b1() const { return kMlpIn * hidden; }
  int64_t w2() const { return b1() + hidden; }
  int64_t b2() const { return w2() + hidden * kMlpOut; }
  int64_t size() const { return b2() + kMlpOut; }
  /// The tensors of the flat vector, in its order: {64, hidden}, {hidden}, {hidden, 10}, {10}.
  /// A packed buffer of them is charged what the four arrays cost one by one
  /// (CoreContext::allocate_arrays), as XLA would hold four parameters.
  std::vector<std::vector<int64_t>> shapes() const {
    return {{kMlpIn, hidden}, {hidden}, {hidden, kMlpOut}, {kMlpOut}};
  }
  /// shapes() and the loss sum, an f32 scalar: the gradient bucket [dW1, db1, dW2, db2, loss].
  std::vector<std::vector<int64_t>> shapes_and_loss() const {
    std::vector<std::vector<int64_t>> s = shapes();
    s.push_back({});
    return s;
  }
};

}  // namespace vtpu
