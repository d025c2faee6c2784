#include "vtpu/train/mlp_memory_plan.h"

#include <string>

#include "vtpu/common/error.h"
#include "vtpu/memory/tiled_layout.h"
#include "vtpu/train/mlp_layout.h"

namespace vtpu {

namespace {

// The bytes the trainer's arena is charged for `shapes` of f32 packed in one buffer
// (CoreContext::allocate_arrays): padded under the TPU tiled layout, or logical without
// padding. InvalidArgumentError naming the buffer when the sum passes 2^64 bytes.
uint64_t f32_bytes(const std::vector<std::vector<int64_t>>& shapes, bool pad, const char* label) {
  uint64_t total = 0;
  try {
    for (const std::vector<int64_t>& dims : shapes) {
      const ArrayBytes b = array_bytes(ElementType::kF32, dims);
      if (__builtin_add_overflow(total, pad ? b.padded_bytes : b.logical_bytes, &total)) {
        throw InvalidArgumentError("sum past 2^64 bytes");
      }
    }
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(std::string("MLP buffer ") + label + ": " + e.what());
  }
  return total;
}

uint64_t f32_bytes(int64_t rows, int64_t cols, bool pad, const char* label) {
  return f32_bytes({{rows, cols}}, pad, label);
}

}  // namespace

std::vector<BufferInterval> mlp_step_buffer_intervals(const MlpConfig& config, int num_cores,
                                                      bool pad_arrays) {
  config.validate(num_cores);
  const int64_t b = config.global_batch / num_cores;
  const int64_t h = config.hidden;
  const bool pad = pad_arrays;
  constexpr int64_t kIn = kMlpIn;
  constexpr int64_t kOut = kMlpOut;
  using T = MlpStepTime;
  return {
      {f32_bytes(b, kIn, pad, "mlp/x"), T::kGatherBatch, T::kW1Gradient, "mlp/x"},
      {f32_bytes(b, kOut, pad, "mlp/y"), T::kGatherBatch, T::kLogitsGradient, "mlp/y"},
      {f32_bytes(b, h, pad, "mlp/z1"), T::kHiddenPreActivation, T::kB1Gradient, "mlp/z1"},
      {f32_bytes(b, h, pad, "mlp/a1"), T::kRelu, T::kReluGradient, "mlp/a1"},
      {f32_bytes(b, kOut, pad, "mlp/logits"), T::kLogits, T::kHiddenGradient, "mlp/logits"},
      {f32_bytes(MlpLayout{h}.shapes_and_loss(), pad, "mlp/grads+loss"), T::kW2Gradient, T::kSgd,
       "mlp/grads+loss"},
  };
}

}  // namespace vtpu
