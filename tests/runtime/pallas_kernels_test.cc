// Tests for runtime/pallas_kernels.h against Eigen references: tiled matmul (plain and
// transposed operands), fused dense (bias + ReLU) and row-wise softmax, for shapes that divide
// evenly into blocks and shapes with edge blocks, with 1, 2 and 3 buffers.
#include "vtpu/runtime/pallas_kernels.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <ostream>
#include <random>

#include "vtpu/runtime/device_buffer.h"
#include "vtpu/runtime/virtual_core.h"

namespace vtpu {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMatrix>;

struct Mat {
  DeviceBuffer buf;
  HbmMatrix m;
  Map view() const { return Map(buf.as<float>().data(), m.rows, m.cols); }
};

Mat make(VirtualCore& core, int64_t rows, int64_t cols, uint64_t seed) {
  Mat x{DeviceBuffer(core.hbm_shared(), static_cast<uint64_t>(rows * cols) * 4, "m"), {}};
  x.m = HbmMatrix{&x.buf, rows, cols};
  std::mt19937 gen(static_cast<unsigned>(seed));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (float& v : x.buf.as<float>()) v = d(gen);
  return x;
}

// Largest |a - b| relative to the largest |b| (f32 sums in a different order differ slightly).
double rel_error(const RowMatrix& got, const RowMatrix& want) {
  return (got - want).cwiseAbs().maxCoeff() / std::max(1.0f, want.cwiseAbs().maxCoeff());
}

struct MatmulCase {
  int64_t m, k, n, bm, bk, bn;
  bool ta, tb;
};

// gtest prints a parameter with neither PrintTo nor operator<< as its bytes, and
// gtest_discover_tests puts that into the CTest name.
void PrintTo(const MatmulCase& c, std::ostream* os) {
  // The operands as stored: a transposed one is (cols x rows)^T.
  if (c.ta) {
    *os << c.k << "x" << c.m << "^T";
  } else {
    *os << c.m << "x" << c.k;
  }
  *os << " @ ";
  if (c.tb) {
    *os << c.n << "x" << c.k << "^T";
  } else {
    *os << c.k << "x" << c.n;
  }
  *os << " blocks " << c.bm << "x" << c.bk << "x" << c.bn;
}

class PallasMatmulTest : public ::testing::TestWithParam<std::tuple<MatmulCase, int>> {};

TEST_P(PallasMatmulTest, EqualsEigen) {
  const auto [c, buffers] = GetParam();
  VirtualCore core(0, 256 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  Mat a = c.ta ? make(core, c.k, c.m, 1) : make(core, c.m, c.k, 1);
  Mat b = c.tb ? make(core, c.n, c.k, 2) : make(core, c.k, c.n, 2);
  Mat out = make(core, c.m, c.n, 3);
  MatmulOptions o{c.bm, c.bn, c.bk, buffers, c.ta, c.tb, MatmulEpilogue::kNone};
  const PallasCallStats st = pallas_matmul(core, a.m, b.m, out.m, o);
  const RowMatrix A = c.ta ? RowMatrix(a.view().transpose()) : RowMatrix(a.view());
  const RowMatrix B = c.tb ? RowMatrix(b.view().transpose()) : RowMatrix(b.view());
  const RowMatrix want = A * B;
  EXPECT_LT(rel_error(out.view(), want), 1e-5);
  EXPECT_DOUBLE_EQ(st.total_flops, 2.0 * c.m * c.n * c.k);
  EXPECT_EQ(core.memory(MemorySpace::kAccumulator).memory_stats().peak_bytes_in_use,
            static_cast<uint64_t>(std::min(c.bm, c.m) * std::min(c.bn, c.n) * 4 + 255) / 256 * 256);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PallasMatmulTest,
    ::testing::Combine(
        ::testing::Values(MatmulCase{256, 512, 384, 128, 128, 128, false, false},  // even
                          MatmulCase{100, 300, 200, 32, 128, 128, false, false},   // edges
                          MatmulCase{64, 200, 130, 64, 128, 128, true, false},     // A^T, edges
                          MatmulCase{48, 256, 136, 16, 128, 128, false, true},     // B^T, edges
                          MatmulCase{8, 64, 10, 8, 64, 10, true, true}),           // whole dims
        ::testing::Values(1, 2, 3)));

TEST(PallasDenseTest, BiasAndReluEqualEigen) {
  VirtualCore core(0, 64 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  Mat x = make(core, 72, 200, 1), w = make(core, 200, 300, 2), bias = make(core, 1, 300, 3);
  Mat out = make(core, 72, 300, 4);
  pallas_dense(core, x.m, w.m, bias.m, out.m, MatmulOptions{32, 128, 128, 2});
  const RowMatrix want = ((x.view() * w.view()).rowwise() + bias.view().row(0)).cwiseMax(0.0f);
  EXPECT_LT(rel_error(out.view(), want), 1e-5);
  EXPECT_GT((out.view().array() == 0.0f).count(), 0);  // ReLU clipped something
  MatmulOptions no_relu{32, 128, 128, 2};
  no_relu.epilogue = MatmulEpilogue::kBias;
  pallas_dense(core, x.m, w.m, bias.m, out.m, no_relu);
  EXPECT_LT(rel_error(out.view(), (x.view() * w.view()).rowwise() + bias.view().row(0)), 1e-5);
}

TEST(PallasSoftmaxTest, RowsEqualEigenIncludingAnEdgeBlock) {
  VirtualCore core(0, 64 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  for (int buffers : {1, 2, 3}) {
    Mat x = make(core, 100, 300, 7), out = make(core, 100, 300, 8);
    x.view() *= 10.0f;  // large logits: only the max-subtracted form stays finite
    pallas_softmax(core, x.m, out.m, 16, buffers);  // 7 blocks of 16 rows, the last has 4
    RowMatrix want(100, 300);
    for (int r = 0; r < 100; ++r) {
      const Eigen::ArrayXf e = (x.view().row(r).array() - x.view().row(r).maxCoeff()).exp();
      want.row(r) = (e / e.sum()).matrix().transpose();
    }
    EXPECT_LT(rel_error(out.view(), want), 1e-6) << buffers;
  }
}

// Rank-3 operands: a batched matmul out[b] = A[b] W with A (B, m, k) and out (B, m, n)
// blocked (1, bm, bk) / (1, bm, bn) on a leading batch grid axis (Pallas's None/1 block dim; the
// body sees squeezed 2-D blocks), W (k, n) shared by every batch entry. Edge blocks in m, k and
// n; checked against Eigen per batch entry.
TEST(PallasRank3Test, BatchedMatmulOnALeadingBatchGridAxisEqualsEigen) {
  constexpr int64_t B = 3, m = 20, k = 200, n = 130, bm = 8, bk = 128, bn = 128;
  VirtualCore core(0, 64 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  Mat a = make(core, B * m, k, 1), w = make(core, k, n, 2), out = make(core, B * m, n, 3);
  auto operand = [](const char* name, const Mat& x, std::vector<int64_t> shape,
                    std::vector<int64_t> block, IndexMap map) {
    PallasOperand op;
    op.name = name;
    op.buffer = &x.buf;
    op.shape = std::move(shape);
    op.spec.block_shape = std::move(block);
    op.spec.index_map = std::move(map);
    return op;
  };
  using G = std::span<const int64_t>;  // grid (batch, m blocks, n blocks, k blocks)
  const PallasOperand pa = operand("a", a, {B, m, k}, {1, bm, bk}, [](G g) {
    return std::vector<int64_t>{g[0], g[1], g[3]};
  });
  const PallasOperand pw = operand("w", w, {k, n}, {bk, bn}, [](G g) {
    return std::vector<int64_t>{g[3], g[2]};
  });
  const PallasOperand po = operand("out", out, {B, m, n}, {1, bm, bn}, [](G g) {
    return std::vector<int64_t>{g[0], g[1], g[2]};
  });
  for (int buffers : {1, 2, 3}) {
    out.view().setConstant(-7.0f);
    PallasCallOptions o;
    o.name = "batched_matmul";
    o.grid = {B, (m + bm - 1) / bm, (n + bn - 1) / bn, (k + bk - 1) / bk};
    o.num_buffers = buffers;
    o.scratch = {ScratchSpec{"acc", MemorySpace::kAccumulator, ElementType::kF32, {bm, bn}}};
    const PallasCallStats st = pallas_call(core, {pa, pw}, {po}, o, [](KernelContext& ctx) {
      const BlockRef& x = ctx.input(0);
      const BlockRef& y = ctx.input(1);
      const BlockRef& z = ctx.output(0);
      using Stride = Eigen::OuterStride<>;
      using BMap = Eigen::Map<RowMatrix, Eigen::Unaligned, Stride>;
      ASSERT_EQ(x.shape.size(), 2u);  // squeezed
      BMap acc(ctx.scratch(0).as<float>(), z.valid_rows(), z.valid_cols(),
               Stride(ctx.scratch(0).row_stride));
      if (ctx.program_id(3) == 0) acc.setZero();
      acc.noalias() += BMap(x.as<float>(), x.valid_rows(), x.valid_cols(), Stride(x.row_stride)) *
                       BMap(y.as<float>(), y.valid_rows(), y.valid_cols(), Stride(y.row_stride));
      if (ctx.program_id(3) == ctx.num_programs(3) - 1) {
        BMap(z.as<float>(), z.valid_rows(), z.valid_cols(), Stride(z.row_stride)) = acc;
      }
    });
    for (int64_t b = 0; b < B; ++b) {
      const RowMatrix want = a.view().middleRows(b * m, m) * w.view();
      EXPECT_LT(rel_error(out.view().middleRows(b * m, m), want), 1e-5)
          << "batch " << b << ", " << buffers << " buffers";
    }
    // Each batch entry's A is read once per column block of out (2), W once per row block (3)
    // of every batch entry, out written once.
    EXPECT_EQ(st.bytes_in, 4u * (B * m * k * 2 + B * 3 * k * n));
    EXPECT_EQ(st.bytes_out, 4u * B * m * n);
  }
  // A leading block dim other than 1 is rejected, naming the operand and shapes.
  PallasOperand bad = pa;
  bad.spec.block_shape = {2, bm, bk};
  PallasCallOptions o;
  o.grid = {1};
  EXPECT_THROW(pallas_call(core, {bad, pw}, {po}, o, [](KernelContext&) {}), InvalidArgumentError);
}

// With transpose_lhs, bm is the last dim of A's stored block;
// bm = 8 over m = 9 failed naming an internal (128, 8) block. The message now names bm and m.
TEST(PallasMatmulCallTest, TransposedLhsNamesTheBmRule) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  Mat a = make(core, 129, 9, 1), b = make(core, 129, 257, 2), out = make(core, 9, 257, 3);
  MatmulOptions o{8, 128, 128, 2, true, false, MatmulEpilogue::kNone};
  try {
    pallas_matmul(core, a.m, b.m, out.m, o);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("matmul bm 8 must be a multiple of 128 or equal m 9 "
                                         "when transpose_lhs"),
              std::string::npos)
        << e.what();
  }
  o.bm = 9;  // the whole m
  pallas_matmul(core, a.m, b.m, out.m, o);
  EXPECT_LT(rel_error(out.view(), a.view().transpose() * b.view()), 1e-5);
}

TEST(PallasMatmulCallTest, MismatchedShapesAreRejected) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  Mat a = make(core, 8, 16, 1), b = make(core, 17, 8, 2), out = make(core, 8, 8, 3);
  EXPECT_THROW(pallas_matmul(core, a.m, b.m, out.m), InvalidArgumentError);
}

}  // namespace
}  // namespace vtpu
