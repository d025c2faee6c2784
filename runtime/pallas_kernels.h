// Kernels written with pallas_call (runtime/pallas_call.h), f32, each checked against Eigen in
// tests/runtime/pallas_kernels_test.cc:
//   - tiled matmul C = op(A) op(B), blocks (bm, bk) x (bk, bn), grid (m/bm, n/bn, k/bk) with the
//     reduction axis last, f32 partial sums in accumulator memory (the canonical Pallas TPU matmul,
//     docs.jax.dev/en/latest/pallas/tpu/matmul.html);
//   - fused dense: the same matmul with a bias row added and an optional ReLU in the epilogue;
//   - row-wise softmax streaming (bm, n) row blocks.
// Compute bodies use Eigen (a private dependency of vtpu::runtime).
#pragma once

#include <cstdint>
#include <vector>

#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/runtime/pallas_call.h"

namespace vtpu {

class DeviceBuffer;
class VirtualCore;

/// A row-major f32 matrix in one core's HBM. Not owned.
struct HbmMatrix {
  const DeviceBuffer* buffer = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t offset_bytes = 0;  // where the matrix starts in the buffer
};

enum class MatmulEpilogue { kNone, kBias, kBiasRelu };

struct MatmulOptions {
  /// Block sizes (elements). Each must follow pallas_call's rule: a multiple of 8 (bm) / 128
  /// (bn, bk), or equal to its dim; not clamped (fit_block() gives min(block, dim)). With
  /// transpose_lhs, bm is the last dim of A's stored block: a multiple of 128 or m.
  int64_t bm = 256, bn = 256, bk = 256;
  int num_buffers = 2;         // VMEM buffers per operand (1, 2, 3, ...)
  bool transpose_lhs = false;  // A is stored (k, m) and used as its transpose
  bool transpose_rhs = false;  // B is stored (n, k) and used as its transpose
  MatmulEpilogue epilogue = MatmulEpilogue::kNone;
};

/// The operands and options of the matmul pallas_call, for running or simulating it. `bias` is
/// used for the kBias* epilogues (a (1, n) or (n,) matrix). Block sizes are used as given
/// (pallas_call rejects an illegal one, naming the operand, block and array shape). Throws
/// InvalidArgumentError for mismatched shapes.
struct MatmulCall {
  std::vector<PallasOperand> inputs, outputs;
  PallasCallOptions options;
  KernelBody body;
};
MatmulCall make_matmul_call(const HbmMatrix& a, const HbmMatrix& b, const HbmMatrix& out,
                            const MatmulOptions& options, const HbmMatrix* bias = nullptr);

/// out(m, n) = op(A)(m, k) op(B)(k, n). Runs on `core` (call from its thread). Throws as
/// pallas_call.
PallasCallStats pallas_matmul(VirtualCore& core, const HbmMatrix& a, const HbmMatrix& b,
                              const HbmMatrix& out, const MatmulOptions& options = {});
/// out = act(x w + bias): the fused dense layer (options.epilogue kBias or kBiasRelu; kNone is
/// taken as kBiasRelu).
PallasCallStats pallas_dense(VirtualCore& core, const HbmMatrix& x, const HbmMatrix& w,
                             const HbmMatrix& bias, const HbmMatrix& out,
                             MatmulOptions options = {});
/// min(block, dim): the largest block that never exceeds the array, for callers that want "at
/// most `block`" (a block equal to the dim is always legal).
inline int64_t fit_block(int64_t block, int64_t dim) { return block < dim ? block : dim; }
/// `options` with bm, bn and bk each made fit_block of m, n and k: blocks of at most the given
/// size, the whole dim when it is smaller.
inline MatmulOptions fit_blocks(MatmulOptions options, int64_t m, int64_t n, int64_t k) {
  options.bm = fit_block(options.bm, m);
  options.bn = fit_block(options.bn, n);
  options.bk = fit_block(options.bk, k);
  return options;
}

/// out = softmax(x) along each row (max-subtracted, as jax.nn.softmax), streaming blocks of
/// `block_rows` whole rows (a multiple of 8 or x.rows; not clamped).
PallasCallStats pallas_softmax(VirtualCore& core, const HbmMatrix& x, const HbmMatrix& out,
                               int64_t block_rows = 256, int num_buffers = 2);

}  // namespace vtpu
