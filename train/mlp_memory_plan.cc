#include "vtpu/train/mlp_memory_plan.h"

#include <string>

#include "vtpu/common/error.h"
#include "vtpu/train/digits_dataset.h"

namespace vtpu {

namespace {

constexpr uint64_t kF32Bytes = 4;

// rows * cols f32 elements in bytes, or InvalidArgumentError naming the buffer on overflow.
uint64_t f32_bytes(int64_t rows, int64_t cols, const char* label) {
  uint64_t elements = 0, bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), &elements) ||
      __builtin_mul_overflow(elements, kF32Bytes, &bytes)) {
    throw InvalidArgumentError(std::string("MLP buffer ") + label + " of " + std::to_string(rows) +
                               " x " + std::to_string(cols) + " f32 overflows 2^64 bytes");
  }
  return bytes;
}

}  // namespace

std::vector<BufferInterval> mlp_step_buffer_intervals(const MlpConfig& config, int num_cores) {
  config.validate(num_cores);
  const int64_t b = config.global_batch / num_cores;
  const int64_t h = config.hidden;
  constexpr int64_t kIn = DigitsDataset::kNumFeatures;
  constexpr int64_t kOut = DigitsDataset::kNumClasses;
  using T = MlpStepTime;
  return {
      {f32_bytes(b, kIn, "mlp/x"), T::kGatherBatch, T::kW1Gradient, "mlp/x"},
      {f32_bytes(b, kOut, "mlp/y"), T::kGatherBatch, T::kLogitsGradient, "mlp/y"},
      {f32_bytes(b, h, "mlp/z1"), T::kHiddenPreActivation, T::kB1Gradient, "mlp/z1"},
      {f32_bytes(b, h, "mlp/a1"), T::kRelu, T::kReluGradient, "mlp/a1"},
      {f32_bytes(b, kOut, "mlp/logits"), T::kLogits, T::kHiddenGradient, "mlp/logits"},
      {f32_bytes(mlp_num_parameters(h) + 1, 1, "mlp/grads+loss"), T::kW2Gradient, T::kSgd,
       "mlp/grads+loss"},
  };
}

}  // namespace vtpu
