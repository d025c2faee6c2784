#include "vtpu/runtime/pallas_kernels.h"

#include <Eigen/Core>
#include <algorithm>

#include "vtpu/common/error.h"
#include "vtpu/runtime/device_buffer.h"
#include "vtpu/runtime/virtual_core.h"

namespace vtpu {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
using BlockMap = Eigen::Map<RowMatrix, Eigen::Unaligned, Stride>;

/// The valid part of a block as an Eigen matrix.
BlockMap valid(const BlockRef& r) {
  return BlockMap(r.as<float>(), r.valid_rows(), r.valid_cols(), Stride(r.row_stride));
}

std::string dims(const HbmMatrix& m) {
  return "(" + std::to_string(m.rows) + ", " + std::to_string(m.cols) + ")";
}

PallasOperand operand(const char* name, const HbmMatrix& m, std::vector<int64_t> block,
                      IndexMap map) {
  PallasOperand op;
  op.name = name;
  op.buffer = m.buffer;
  op.offset_bytes = m.offset_bytes;
  op.shape = {m.rows, m.cols};
  op.spec.block_shape = std::move(block);
  op.spec.index_map = std::move(map);
  return op;
}

}  // namespace

MatmulCall make_matmul_call(const HbmMatrix& a, const HbmMatrix& b, const HbmMatrix& out,
                            const MatmulOptions& o, const HbmMatrix* bias) {
  const int64_t m = o.transpose_lhs ? a.cols : a.rows;
  const int64_t k = o.transpose_lhs ? a.rows : a.cols;
  const int64_t kb = o.transpose_rhs ? b.cols : b.rows;
  const int64_t n = o.transpose_rhs ? b.rows : b.cols;
  if (k != kb || out.rows != m || out.cols != n) {
    throw InvalidArgumentError("matmul shapes do not match: A " + dims(a) +
                               (o.transpose_lhs ? "^T" : "") + " x B " + dims(b) +
                               (o.transpose_rhs ? "^T" : "") + " -> out " + dims(out) +
                               " (expected A (m, k), B (k, n), out (m, n))");
  }
  if (o.bm < 1 || o.bn < 1 || o.bk < 1) {
    throw InvalidArgumentError("matmul block sizes bm, bn, bk must be >= 1");
  }
  if (o.transpose_lhs && o.bm % 128 != 0 && o.bm != m) {
    // A is stored (k, m): its block is (bk, bm), so bm is the block's last (lane) dim.
    throw InvalidArgumentError("matmul bm " + std::to_string(o.bm) +
                               " must be a multiple of 128 or equal m " + std::to_string(m) +
                               " when transpose_lhs (A is stored (k, m), so bm is the last dim of "
                               "its (bk, bm) block)");
  }
  // Not clamped: pallas_call checks each block against its array (Pallas's rule).
  const int64_t bm = o.bm, bn = o.bn, bk = o.bk;
  const int64_t gm = (m + bm - 1) / bm, gn = (n + bn - 1) / bn, gk = (k + bk - 1) / bk;
  MatmulCall call;
  // A block (i, kk) of op(A); stored transposed it is block (kk, i) of shape (bk, bm).
  if (o.transpose_lhs) {
    call.inputs.push_back(operand("a", a, {bk, bm}, [](std::span<const int64_t> g) {
      return std::vector<int64_t>{g[2], g[0]};
    }));
  } else {
    call.inputs.push_back(operand("a", a, {bm, bk}, [](std::span<const int64_t> g) {
      return std::vector<int64_t>{g[0], g[2]};
    }));
  }
  if (o.transpose_rhs) {
    call.inputs.push_back(operand("b", b, {bn, bk}, [](std::span<const int64_t> g) {
      return std::vector<int64_t>{g[1], g[2]};
    }));
  } else {
    call.inputs.push_back(operand("b", b, {bk, bn}, [](std::span<const int64_t> g) {
      return std::vector<int64_t>{g[2], g[1]};
    }));
  }
  const bool has_bias = o.epilogue != MatmulEpilogue::kNone;
  if (has_bias) {
    if (bias == nullptr || bias->rows * bias->cols != n || (bias->rows != 1 && bias->cols != 1)) {
      throw InvalidArgumentError("dense bias has shape " + (bias ? dims(*bias) : "none") +
                                 " (expected (1, " + std::to_string(n) + "))");
    }
    call.inputs.push_back(operand("bias", HbmMatrix{bias->buffer, 1, n, bias->offset_bytes},
                                  {1, bn}, [](std::span<const int64_t> g) {
                                    return std::vector<int64_t>{0, g[1]};
                                  }));
  }
  call.outputs.push_back(operand("out", out, {bm, bn}, [](std::span<const int64_t> g) {
    return std::vector<int64_t>{g[0], g[1]};
  }));
  call.options.name = has_bias ? "dense" : "matmul";
  call.options.grid = {gm, gn, gk};
  call.options.num_buffers = o.num_buffers;
  call.options.scratch.push_back(
      ScratchSpec{"acc", MemorySpace::kAccumulator, ElementType::kF32, {bm, bn}});
  call.options.step_flops = [=](std::span<const int64_t> g) {
    const double rows = static_cast<double>(std::min(bm, m - g[0] * bm));
    const double cols = static_cast<double>(std::min(bn, n - g[1] * bn));
    const double depth = static_cast<double>(std::min(bk, k - g[2] * bk));
    return 2.0 * rows * cols * depth;
  };
  const bool ta = o.transpose_lhs, tb = o.transpose_rhs;
  const MatmulEpilogue epilogue = o.epilogue;
  call.body = [ta, tb, epilogue, has_bias](KernelContext& ctx) {
    const int64_t kk = ctx.program_id(2);
    const BlockRef& out_ref = ctx.output(0);
    const BlockRef& acc_ref = ctx.scratch(0);
    // The accumulator covers the output block's valid part.
    BlockMap acc(acc_ref.as<float>(), out_ref.valid_rows(), out_ref.valid_cols(),
                 Stride(acc_ref.row_stride));
    if (kk == 0) acc.setZero();
    const BlockMap a = valid(ctx.input(0));
    const BlockMap b = valid(ctx.input(1));
    if (!ta && !tb) {
      acc.noalias() += a * b;
    } else if (ta && !tb) {
      acc.noalias() += a.transpose() * b;
    } else if (!ta && tb) {
      acc.noalias() += a * b.transpose();
    } else {
      acc.noalias() += a.transpose() * b.transpose();
    }
    if (kk == ctx.num_programs(2) - 1) {
      BlockMap dst = valid(out_ref);
      if (has_bias) {
        const BlockMap bias = valid(ctx.input(2));
        dst = acc.rowwise() + bias.row(0);
        if (epilogue == MatmulEpilogue::kBiasRelu) dst = dst.cwiseMax(0.0f);
      } else {
        dst = acc;
      }
    }
  };
  return call;
}

PallasCallStats pallas_matmul(VirtualCore& core, const HbmMatrix& a, const HbmMatrix& b,
                              const HbmMatrix& out, const MatmulOptions& options) {
  MatmulOptions o = options;
  o.epilogue = MatmulEpilogue::kNone;
  const MatmulCall call = make_matmul_call(a, b, out, o);
  return pallas_call(core, call.inputs, call.outputs, call.options, call.body);
}

PallasCallStats pallas_dense(VirtualCore& core, const HbmMatrix& x, const HbmMatrix& w,
                             const HbmMatrix& bias, const HbmMatrix& out, MatmulOptions options) {
  if (options.epilogue == MatmulEpilogue::kNone) options.epilogue = MatmulEpilogue::kBiasRelu;
  const MatmulCall call = make_matmul_call(x, w, out, options, &bias);
  return pallas_call(core, call.inputs, call.outputs, call.options, call.body);
}

PallasCallStats pallas_softmax(VirtualCore& core, const HbmMatrix& x, const HbmMatrix& out,
                               int64_t block_rows, int num_buffers) {
  if (x.rows != out.rows || x.cols != out.cols) {
    throw InvalidArgumentError("softmax input " + dims(x) + " and output " + dims(out) +
                               " differ (expected equal shapes)");
  }
  if (block_rows < 1) throw InvalidArgumentError("softmax block_rows must be >= 1");
  const int64_t br = block_rows;  // not clamped: pallas_call checks it
  auto row_block = [](std::span<const int64_t> g) { return std::vector<int64_t>{g[0], 0}; };
  PallasCallOptions o;
  o.name = "softmax";
  o.grid = {(x.rows + br - 1) / br};
  o.num_buffers = num_buffers;
  const int64_t n = x.cols;
  o.step_flops = [=](std::span<const int64_t> g) {
    return 5.0 *
           static_cast<double>(std::min(br, x.rows - g[0] * br) * n);  // max, sub, exp, sum, div
  };
  return pallas_call(core, {operand("x", x, {br, n}, row_block)},
                     {operand("out", out, {br, n}, row_block)}, o, [](KernelContext& ctx) {
                       const BlockMap in = valid(ctx.input(0));
                       BlockMap dst = valid(ctx.output(0));
                       for (Eigen::Index r = 0; r < in.rows(); ++r) {
                         const float mx = in.row(r).maxCoeff();
                         dst.row(r) = (in.row(r).array() - mx).exp().matrix();
                         dst.row(r) /= dst.row(r).sum();
                       }
                     });
}

}  // namespace vtpu
