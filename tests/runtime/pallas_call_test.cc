// Tests for runtime/pallas_call.h: the pipeline moves every block (even and edge shapes, 1, 2 and 3
// buffers), never lets the body read a block before its copy completed (slowed DMA engine; run
// under TSan too), checks block shapes and VMEM before starting, rejects a kernel that ends with a
// copy in flight or a semaphore not at 0, supports a remote copy from another core's HBM, and its
// simulated time matches a hand-worked schedule.
#include "vtpu/runtime/pallas_call.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <ostream>
#include <thread>

#include "vtpu/common/error.h"
#include "vtpu/runtime/device_buffer.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/runtime/virtual_core.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;

DeviceBuffer make_matrix(VirtualCore& core, int64_t rows, int64_t cols, float base = 0.0f) {
  DeviceBuffer b(core.hbm_shared(), static_cast<uint64_t>(rows * cols) * 4, "m");
  auto v = b.as<float>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return b;
}

PallasOperand op2(const char* name, const DeviceBuffer& b, int64_t rows, int64_t cols,
                  std::vector<int64_t> block, IndexMap map) {
  PallasOperand o;
  o.name = name;
  o.buffer = &b;
  o.shape = {rows, cols};
  o.spec.block_shape = std::move(block);
  o.spec.index_map = std::move(map);
  return o;
}

IndexMap ij() {
  return [](std::span<const int64_t> g) { return std::vector<int64_t>{g[0], g[1]}; };
}

/// out = in * 2 + 1 block by block, on a grid (ceil(R/br), ceil(C/bc)); returns the stats.
PallasCallStats scale_kernel(VirtualCore& core, const DeviceBuffer& in, const DeviceBuffer& out,
                             int64_t rows, int64_t cols, int64_t br, int64_t bc, int buffers) {
  PallasCallOptions o;
  o.name = "scale";
  o.grid = {(rows + br - 1) / br, (cols + bc - 1) / bc};
  o.num_buffers = buffers;
  return pallas_call(core, {op2("x", in, rows, cols, {br, bc}, ij())},
                     {op2("y", out, rows, cols, {br, bc}, ij())}, o, [](KernelContext& ctx) {
                       const BlockRef& x = ctx.input(0);
                       const BlockRef& y = ctx.output(0);
                       for (int64_t r = 0; r < x.valid_rows(); ++r) {
                         for (int64_t c = 0; c < x.valid_cols(); ++c) {
                           y.as<float>()[r * y.row_stride + c] =
                               2.0f * x.as<float>()[r * x.row_stride + c] + 1.0f;
                         }
                       }
                     });
}

struct Shape {
  int64_t rows, cols, br, bc;
};

// Readable in the CTest name (gtest would print the struct's bytes).
void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.rows << "x" << s.cols << " blocks " << s.br << "x" << s.bc;
}

class PallasCallShapes : public ::testing::TestWithParam<std::tuple<Shape, int>> {};

TEST_P(PallasCallShapes, EveryElementIsTransformedOnce) {
  const auto [s, buffers] = GetParam();
  VirtualCore core(0, 64 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, s.rows, s.cols);
  DeviceBuffer out = make_matrix(core, s.rows, s.cols, -1e6f);
  const PallasCallStats st = scale_kernel(core, in, out, s.rows, s.cols, s.br, s.bc, buffers);
  auto x = in.as<float>();
  auto y = out.as<float>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], 2.0f * x[i] + 1.0f) << "element " << i;
  EXPECT_EQ(st.bytes_in, static_cast<uint64_t>(s.rows * s.cols) * 4);
  EXPECT_EQ(st.bytes_out, static_cast<uint64_t>(s.rows * s.cols) * 4);
  EXPECT_EQ(st.grid_steps, ((s.rows + s.br - 1) / s.br) * ((s.cols + s.bc - 1) / s.bc));
  EXPECT_EQ(core.memory(MemorySpace::kVmem).memory_stats().bytes_in_use, 0u);  // all freed
}

INSTANTIATE_TEST_SUITE_P(
    EvenAndEdge, PallasCallShapes,
    ::testing::Combine(::testing::Values(Shape{64, 512, 16, 128},   // even
                                         Shape{100, 300, 16, 128},  // edge blocks in both dims
                                         Shape{7, 130, 7, 128},     // whole-dim rows, edge cols
                                         Shape{24, 40, 8, 40}),     // whole-dim cols
                       ::testing::Values(1, 2, 3)));

TEST(PallasCallTest, IllegalBlockShapeNamesOperandAndShape) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 64, 512);
  DeviceBuffer out = make_matrix(core, 64, 512);
  try {
    scale_kernel(core, in, out, 64, 512, 12, 128, 2);  // 12 rows: not a multiple of 8, not 64
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("input 'x'"), std::string::npos) << what;
    EXPECT_NE(what.find("(64, 512)"), std::string::npos) << what;
    EXPECT_NE(what.find("(12, 128)"), std::string::npos) << what;
  }
  EXPECT_THROW(scale_kernel(core, in, out, 64, 512, 16, 100, 2), InvalidArgumentError);  // lanes
  EXPECT_EQ(core.dma().copies_completed(), 0u);  // rejected before any copy
}

TEST(PallasCallTest, VmemOverBudgetIsCheckedBeforeStarting) {
  CoreMemoryOptions m;
  m.vmem_bytes = 1 << 20;  // 1 MiB of scoped VMEM
  VirtualCore core(0, 64 << 20, ArenaLimit::fraction(1.0), ArenaOptions{}, m);
  DeviceBuffer in = make_matrix(core, 1024, 512);
  DeviceBuffer out = make_matrix(core, 1024, 512);
  // Blocks of 256 x 512 f32 = 512 KiB; 2 operands x 2 buffers = 2 MiB > 1 MiB.
  try {
    scale_kernel(core, in, out, 1024, 512, 256, 512, 2);
    FAIL() << "expected ScratchExhaustedError";
  } catch (const ScratchExhaustedError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_EQ(e.requested_bytes(), 2u << 20);
    EXPECT_EQ(e.available_bytes(), 1u << 20);
    EXPECT_NE(std::string(e.what()).find("scoped vmem limit"), std::string::npos) << e.what();
  }
  EXPECT_EQ(core.dma().copies_completed(), 0u);
  // One buffer each fits exactly (2 x 512 KiB).
  EXPECT_NO_THROW(scale_kernel(core, in, out, 1024, 512, 256, 512, 1));
}

TEST(PallasCallTest, KernelEndingWithACopyInFlightIsAnError) {
  CoreMemoryOptions m;
  m.dma.latency = 200ms;  // the body's copy is still in flight when the kernel ends
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{}, m);
  DeviceBuffer in = make_matrix(core, 8, 128);
  DeviceBuffer out = make_matrix(core, 8, 128);
  PallasCallOptions o;
  o.name = "leaky";
  o.num_dma_semaphores = 1;
  o.scratch = {ScratchSpec{"tmp", MemorySpace::kVmem, ElementType::kF32, {8, 128}}};
  PallasOperand x = op2("x", in, 8, 128, {}, {});
  x.spec.memory_space = MemorySpace::kHbm;
  try {
    pallas_call(core, {x}, {op2("y", out, 8, 128, {}, {})}, o, [](KernelContext& ctx) {
      ctx.async_copy(ctx.input(0).region(), ctx.scratch(0).region(), ctx.semaphore(0));
    });
    FAIL() << "expected FailedPreconditionError";
  } catch (const FailedPreconditionError& e) {
    EXPECT_NE(std::string(e.what()).find("in flight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("leaky"), std::string::npos) << e.what();
  }
  EXPECT_EQ(core.dma().in_flight(), 0);  // drained before the VMEM was freed
}

TEST(PallasCallTest, KernelEndingWithASemaphoreNotAtZeroIsAnError) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 8, 128);
  DeviceBuffer out = make_matrix(core, 8, 128);
  PallasCallOptions o;
  o.name = "unwaited";
  o.num_dma_semaphores = 2;
  o.scratch = {ScratchSpec{"tmp", MemorySpace::kVmem, ElementType::kF32, {8, 128}}};
  PallasOperand x = op2("x", in, 8, 128, {}, {});
  x.spec.memory_space = MemorySpace::kHbm;
  try {
    pallas_call(core, {x}, {op2("y", out, 8, 128, {}, {})}, o, [](KernelContext& ctx) {
      ctx.async_copy(ctx.input(0).region(), ctx.scratch(0).region(), ctx.semaphore(1));
      // The copy completes (nothing slows it) but nobody waits: the semaphore keeps 4096 bytes.
      while (ctx.semaphore(1).value() == 0) std::this_thread::sleep_for(1ms);
    });
    FAIL() << "expected FailedPreconditionError";
  } catch (const FailedPreconditionError& e) {
    EXPECT_NE(std::string(e.what()).find("semaphore 1 holds 4096 bytes"), std::string::npos)
        << e.what();
  }
}

TEST(PallasCallTest, RemoteCopyFromAnotherCoresHbm) {
  RuntimeOptions ro;
  ro.num_cores = 2;
  ro.hbm_bytes_per_core = 64 << 20;
  Runtime rt(ro);
  // Core 1 holds a 32 x 128 matrix; core 0 pulls rows 8..23 into its VMEM and writes them out.
  DeviceBuffer remote = rt.allocate(1, 32 * 128 * 4, "remote");
  auto rv = remote.as<float>();
  std::iota(rv.begin(), rv.end(), 1000.0f);
  DeviceBuffer out = rt.allocate(0, 16 * 128 * 4, "out");
  rt.run_spmd({0}, [&](CoreContext& cc) {
    PallasCallOptions o;
    o.name = "pull";
    o.num_dma_semaphores = 1;
    PallasOperand y = op2("y", out, 16, 128, {}, {});
    pallas_call(cc.core(), {}, {y}, o, [&](KernelContext& ctx) {
      ctx.async_remote_copy(remote, 128, 8, ctx.output(0), ctx.semaphore(0)).wait();
    });
  });
  auto ov = out.as<float>();
  for (size_t i = 0; i < ov.size(); ++i)
    ASSERT_EQ(ov[i], 1000.0f + 8 * 128 + static_cast<float>(i));
}

// The owner frees the source of a remote copy while the copy is still queued, and a new
// buffer of the same size is allocated and overwritten on that core. The pin held by the copy
// defers the free, so the copy still reads the original rows, never the new buffer's bytes.
TEST(PallasCallTest, RemoteCopyReadsItsSourceEvenIfTheOwnerFreesItMeanwhile) {
  RuntimeOptions ro;
  ro.num_cores = 2;
  ro.hbm_bytes_per_core = 64 << 20;
  ro.dma_latency = 40ms;  // every copy lasts >= 40 ms: the remote one waits in line
  Runtime rt(ro);
  auto remote = std::make_unique<DeviceBuffer>(rt.allocate(1, 16 * 128 * 4, "remote"));
  auto rv = remote->as<float>();
  std::iota(rv.begin(), rv.end(), 1000.0f);
  DeviceBuffer first = rt.allocate(0, 16 * 128 * 4, "first");
  DeviceBuffer out = rt.allocate(0, 16 * 128 * 4, "out");
  DeviceBuffer reuse;
  rt.run_spmd({0}, [&](CoreContext& cc) {
    PallasCallOptions o;
    o.num_dma_semaphores = 2;
    PallasOperand y = op2("y", out, 16, 128, {}, {});
    pallas_call(cc.core(), {}, {y}, o, [&](KernelContext& ctx) {
      // A copy ahead in the queue, then the remote copy behind it.
      auto c0 = ctx.async_remote_copy(first, 128, 0, ctx.output(0), ctx.semaphore(0));
      auto c1 = ctx.async_remote_copy(*remote, 128, 0, ctx.output(0), ctx.semaphore(1));
      remote.reset();  // the owner frees it while the copy is queued
      reuse = rt.allocate(1, 16 * 128 * 4, "reuse");
      auto u = reuse.as<float>();
      std::fill(u.begin(), u.end(), -1.0f);
      c0.wait();
      c1.wait();
    });
  });
  EXPECT_EQ(rt.core(1).hbm().memory_stats().pending_free_buffers, 0u);  // released at unpin
  auto ov = out.as<float>();
  for (size_t i = 0; i < ov.size(); ++i) ASSERT_EQ(ov[i], 1000.0f + static_cast<float>(i)) << i;
}

// With a DMA engine slowed to 3 ms per copy, a body that read a block before its copy completed
// would see the previous contents of the slot (another block's values, or zeros). Every element
// encodes its global position, so the body checks it sees exactly its block. Run under TSan as
// well (a premature read is also a data race with the engine's memcpy).
class PallasCallSlowDma : public ::testing::TestWithParam<int> {};

TEST_P(PallasCallSlowDma, BodyNeverReadsABlockBeforeItsCopyCompletes) {
  const int buffers = GetParam();
  CoreMemoryOptions m;
  m.dma.latency = 3ms;
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{}, m);
  constexpr int64_t R = 64, C = 1024, BR = 8, BC = 128;
  DeviceBuffer in = make_matrix(core, R, C);
  DeviceBuffer out = make_matrix(core, R, C, -1.0f);
  std::atomic<int64_t> bad{0}, steps{0};
  PallasCallOptions o;
  o.grid = {R / BR, C / BC};
  o.num_buffers = buffers;
  pallas_call(core, {op2("x", in, R, C, {BR, BC}, ij())}, {op2("y", out, R, C, {BR, BC}, ij())}, o,
              [&](KernelContext& ctx) {
                const int64_t r0 = ctx.program_id(0) * BR, c0 = ctx.program_id(1) * BC;
                const float* x = ctx.input(0).as<float>();
                float* y = ctx.output(0).as<float>();
                for (int64_t r = 0; r < BR; ++r) {
                  for (int64_t c = 0; c < BC; ++c) {
                    const float want = static_cast<float>((r0 + r) * C + c0 + c);
                    if (x[r * BC + c] != want) ++bad;
                    y[r * BC + c] = x[r * BC + c];
                  }
                }
                ++steps;
              });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(steps.load(), (R / BR) * (C / BC));
  auto x = in.as<float>();
  auto y = out.as<float>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i]);
}

INSTANTIATE_TEST_SUITE_P(Buffers, PallasCallSlowDma, ::testing::Values(1, 2, 3));

// Hand-worked schedule: input (8, 512) f32 in 4 blocks of (8, 128) = 4096 bytes, output one
// (8, 128) block written back once; DMA at 4096 B/s (1 s per block) and 2 FLOPs per step at
// 1 FLOP/s (2 s of compute per step).
//   N=1: fetch, compute, 4 times (4 x 3 s) + writeback 1 s = 13 s; exposed DMA 5 s.
//   N=2: fetch0 [0,1], fetch1 [1,2]; compute [1,3]; fetch2 [3,4]; compute [3,5]; fetch3 [5,6];
//        compute [5,7], [7,9]; writeback [9,10] = 10 s; exposed 2 s.
//   N=3: fetches 0..2 at [0,3]; compute [1,3], fetch3 [3,4]; compute [3,5], [5,7], [7,9]; wb 10 s.
TEST(PallasCallTest, SimulatedTimeMatchesAHandWorkedSchedule) {
  HardwareProfile p = HardwareProfile::get("v5e");
  p.hbm_bytes_per_second = 4096.0;
  p.peak_flops_per_second["f32"] = 1.0;
  PallasOperand x;
  x.name = "x";
  x.shape = {8, 512};
  x.spec.block_shape = {8, 128};
  x.spec.index_map = [](std::span<const int64_t> g) { return std::vector<int64_t>{0, g[0]}; };
  PallasOperand y;
  y.name = "y";
  y.shape = {8, 128};
  PallasCallOptions o;
  o.grid = {4};
  o.step_flops = [](std::span<const int64_t>) { return 2.0; };
  const SimulatedTime t1 = simulate_pallas_call({x}, {y}, o, 1, p);
  const SimulatedTime t2 = simulate_pallas_call({x}, {y}, o, 2, p);
  const SimulatedTime t3 = simulate_pallas_call({x}, {y}, o, 3, p);
  EXPECT_DOUBLE_EQ(t1.total_seconds, 13.0);
  EXPECT_DOUBLE_EQ(t1.exposed_dma_seconds, 5.0);
  EXPECT_DOUBLE_EQ(t2.total_seconds, 10.0);
  EXPECT_DOUBLE_EQ(t2.exposed_dma_seconds, 2.0);
  EXPECT_DOUBLE_EQ(t3.total_seconds, 10.0);
  for (const auto& t : {t1, t2, t3}) {
    EXPECT_DOUBLE_EQ(t.compute_seconds, 8.0);
    EXPECT_DOUBLE_EQ(t.dma_seconds, 5.0);
    EXPECT_FALSE(t.dma_bound());
  }
}

TEST(PallasCallTest, IndexMapOutsideTheArrayIsRejected) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 16, 128);
  DeviceBuffer out = make_matrix(core, 16, 128);
  PallasCallOptions o;
  o.grid = {3};  // a third row block does not exist
  auto rows = [](std::span<const int64_t> g) { return std::vector<int64_t>{g[0], 0}; };
  EXPECT_THROW(pallas_call(core, {op2("x", in, 16, 128, {8, 128}, rows)},
                           {op2("y", out, 16, 128, {8, 128}, rows)}, o, [](KernelContext&) {}),
               InvalidArgumentError);
}

// With the DMA engine throttled to 1000 B/s each (8, 128)
// block took 4 s, the pipeline waited for the full copy and then drained the engine without
// bound. Now the fetch wait gives up at dma timeout naming the copy, and teardown cancels the
// queued copies, so the call fails within a second or so with nothing left in flight.
TEST(PallasCallTest, ThrottledDmaTimesOutNamingTheCopyAndTearsDownPromptly) {
  CoreMemoryOptions m;
  m.dma.bytes_per_second = 1000.0;
  m.dma.wait_timeout = 300ms;
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{}, m);
  DeviceBuffer in = make_matrix(core, 64, 512);
  DeviceBuffer out = make_matrix(core, 64, 512);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    scale_kernel(core, in, out, 64, 512, 8, 128, 2);
    FAIL() << "expected DeadlineExceededError";
  } catch (const DeadlineExceededError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pallas_call 'scale' on core 0: fetch 0 of input 'x' (block (0, 0), "
                        "4096 bytes) timed out"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("DMA copy of 4096 bytes on core 0 did not complete: waited"),
              std::string::npos)
        << what;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 10.0);  // hang guard: the copies alone would take 4 s each
  EXPECT_EQ(core.dma().in_flight(), 0);
  EXPECT_GE(core.dma().copies_cancelled(), 1u);  // the prefetch of block 1 was dropped
  EXPECT_EQ(core.memory(MemorySpace::kVmem).memory_stats().bytes_in_use, 0u);
}

// Pallas TPU has no "block <= array" rule: a block dim larger than the array is legal exactly
// when it is a multiple of 8 (second-to-last) or 128 (last); the one block spans the whole dim
// and the rest is padding. Regression: vtpu's matmul clamped an oversized block
// instead of checking it; pallas_call now applies this rule to every operand.
TEST(PallasCallTest, BlockLargerThanTheArrayFollowsPallasRule) {
  VirtualCore core(0, 64 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 5, 128);
  DeviceBuffer out = make_matrix(core, 5, 128, -1e6f);
  // (16, 128) over (5, 128): a multiple of 8, one padded block.
  const PallasCallStats st = scale_kernel(core, in, out, 5, 128, 16, 128, 2);
  EXPECT_EQ(st.grid_steps, 1);
  auto x = in.as<float>();
  auto y = out.as<float>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], 2.0f * x[i] + 1.0f) << i;
  // (9, 128) over (5, 128): larger than the array and not a multiple of 8.
  try {
    scale_kernel(core, in, out, 5, 128, 9, 128, 2);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("input 'x' of shape (5, 128) has block shape (9, 128): the "
                        "second-to-last block dim 9 is larger than the array dim 5"),
              std::string::npos)
        << what;
  }
  // A multiple of 8 that no VMEM can hold is over budget, and one whose bytes overflow is
  // rejected, both before any copy.
  EXPECT_THROW(scale_kernel(core, in, out, 5, 128, int64_t{1} << 40, 128, 1),
               ScratchExhaustedError);
  try {
    scale_kernel(core, in, out, 5, 128, int64_t{1} << 60, 128, 1);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
  }
  EXPECT_EQ(core.dma().copies_completed(), 2u);  // only the legal run's fetch and writeback
}

// Worked by hand: VMEM tiles are (8, 128) for 32-bit, (16, 128) for 16-bit and (32, 128) for
// 8-bit elements, so a (5, 7) block takes one tile: f32 8*128*4 = 4096 bytes, bf16 16*128*2 =
// 4096, s8 32*128*1 = 4096; (9, 130) f32 takes 2 x 2 tiles = 16 * 256 * 4 = 16384; a rank-1 (7,)
// f32 block one 1024-element tile = 4096; a leading dim multiplies: (3, 5, 7) f32 = 3 * 4096.
TEST(PallasCallTest, VmemTilePaddedBytesWorkedByHand) {
  EXPECT_EQ(vmem_tile_padded_bytes(ElementType::kF32, std::vector<int64_t>{5, 7}), 4096u);
  EXPECT_EQ(vmem_tile_padded_bytes(ElementType::kBf16, std::vector<int64_t>{5, 7}), 4096u);
  EXPECT_EQ(vmem_tile_padded_bytes(ElementType::kS8, std::vector<int64_t>{5, 7}), 4096u);
  EXPECT_EQ(vmem_tile_padded_bytes(ElementType::kBf16, std::vector<int64_t>{17, 7}), 8192u);
  EXPECT_EQ(vmem_tile_padded_bytes(ElementType::kF32, std::vector<int64_t>{9, 130}), 16384u);
  EXPECT_EQ(vmem_tile_padded_bytes(ElementType::kF32, std::vector<int64_t>{8, 128}), 4096u);
  EXPECT_EQ(vmem_tile_padded_bytes(ElementType::kF32, std::vector<int64_t>{7}), 4096u);
  EXPECT_EQ(vmem_tile_padded_bytes(ElementType::kF32, std::vector<int64_t>{3, 5, 7}), 12288u);
}

// VMEM was charged at the logical block size (5 * 7 * 4 = 140 bytes,
// rounded to 256), not the (8, 128)-tile-padded 4096 bytes a real VMEM buffer takes. An odd
// block spanning a whole small array: input and output, 2 buffers each = 4 x 4096 charged.
TEST(PallasCallTest, OddWholeDimBlockIsChargedItsTilePaddedBytes) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 5, 7);
  DeviceBuffer out = make_matrix(core, 5, 7, -1e6f);
  const PallasCallStats st = scale_kernel(core, in, out, 5, 7, 5, 7, 2);
  EXPECT_EQ(st.vmem_bytes, 4u * 4096u);
  EXPECT_EQ(st.vmem_logical_bytes, 4u * 140u);
  EXPECT_EQ(core.memory(MemorySpace::kVmem).memory_stats().peak_bytes_in_use, 4u * 4096u);
  auto x = in.as<float>();
  auto y = out.as<float>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], 2.0f * x[i] + 1.0f) << i;
  // The budget check counts the padding: 3 x 4096 bytes of VMEM cannot hold the 4 buffers.
  CoreMemoryOptions small;
  small.vmem_bytes = 3 * 4096;
  VirtualCore tight(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{}, small);
  DeviceBuffer in2 = make_matrix(tight, 5, 7);
  DeviceBuffer out2 = make_matrix(tight, 5, 7);
  try {
    scale_kernel(tight, in2, out2, 5, 7, 5, 7, 2);
    FAIL() << "expected ScratchExhaustedError";
  } catch (const ScratchExhaustedError& e) {
    EXPECT_EQ(e.requested_bytes(), 4u * 4096u);
    EXPECT_NE(std::string(e.what()).find("4096 bytes tile-padded (140 logical"), std::string::npos)
        << e.what();
  }
}

// pallas_call takes rank 1, 2, and 3 with a leading batch dim blocked by 1 (docs/KERNELS.md);
// rank 4, or a rank-3 block with a leading dim other than 1, is a clear error naming the operand.
TEST(PallasCallTest, RankFourAndWideBatchBlocksAreClearErrors) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 32, 128);
  DeviceBuffer out = make_matrix(core, 32, 128);
  PallasOperand x = op2("x", in, 16, 128, {}, {});
  x.shape = {2, 2, 8, 128};
  try {
    pallas_call(core, {x}, {op2("y", out, 16, 128, {8, 128}, {})}, PallasCallOptions{},
                [](KernelContext&) {});
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("input 'x' has shape (2, 2, 8, 128): rank 4 is not supported"),
              std::string::npos)
        << what;
  }
  x.shape = {4, 8, 128};
  x.spec.block_shape = {2, 8, 128};
  try {
    pallas_call(core, {x}, {op2("y", out, 16, 128, {8, 128}, {})}, PallasCallOptions{},
                [](KernelContext&) {});
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("input 'x' of shape (4, 8, 128) has block shape (2, 8, 128): the leading "
                        "block dim is 2 (expected 1"),
              std::string::npos)
        << what;
  }
}

// Regressions: sizes that wrapped, and buffers freed while copies still ran.

// A grid whose extents multiply past int64 wrapped to 0 steps and "succeeded".
TEST(PallasCallAdversarialTest, GridProductOverflowIsRejected) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 8, 128);
  DeviceBuffer out = make_matrix(core, 8, 128);
  PallasCallOptions o;
  o.grid = {int64_t{1} << 32, int64_t{1} << 32};
  try {
    pallas_call(core, {op2("x", in, 8, 128, {}, {})}, {op2("y", out, 8, 128, {}, {})}, o,
                [](KernelContext&) {});
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 2^40 grid points"), std::string::npos)
        << e.what();
  }
}

// Block index 2^61 + g times 8 rows wrapped to 8g and read block g instead.
TEST(PallasCallAdversarialTest, HugeBlockIndexIsRejectedNotWrapped) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 16, 128);
  DeviceBuffer out = make_matrix(core, 16, 128);
  PallasCallOptions o;
  o.grid = {2};
  auto huge = [](std::span<const int64_t> g) {
    return std::vector<int64_t>{(int64_t{1} << 61) + g[0], 0};
  };
  auto rows = [](std::span<const int64_t> g) { return std::vector<int64_t>{g[0], 0}; };
  EXPECT_THROW(pallas_call(core, {op2("x", in, 16, 128, {8, 128}, huge)},
                           {op2("y", out, 16, 128, {8, 128}, rows)}, o, [](KernelContext&) {}),
               InvalidArgumentError);
  EXPECT_EQ(core.dma().copies_completed(), 0u);
}

// Byte sizes of shapes, blocks, offsets and scratch wrapped (segfaults, out-of-bounds reads).
TEST(PallasCallAdversarialTest, ByteSizeOverflowsAreRejected) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 8, 128);
  DeviceBuffer out = make_matrix(core, 8, 128);
  const int64_t big = int64_t{1} << 31;
  PallasOperand y = op2("y", out, 8, 128, {}, {});
  y.spec.memory_space = MemorySpace::kHbm;
  auto run = [&](const PallasOperand& x, const PallasCallOptions& o) {
    pallas_call(core, {x}, {y}, o, [](KernelContext&) {});
  };
  PallasOperand shape = op2("x", in, big, big, {8, 128}, {});  // 2^64 bytes
  EXPECT_THROW(run(shape, {}), InvalidArgumentError);
  EXPECT_THROW(simulate_pallas_call({shape}, {y}, {}, 2, HardwareProfile::get("v5e")),
               InvalidArgumentError);
  EXPECT_THROW(run(op2("x", in, 8, 128, {big * 8, big * 128}, {}), {}), InvalidArgumentError);
  PallasOperand offset = op2("x", in, 8, 128, {8, 128}, {});
  offset.offset_bytes = UINT64_MAX - 100;  // + 4096 wraps to 3995 < buffer size
  try {
    run(offset, {});
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("at offset"), std::string::npos) << e.what();
  }
  PallasCallOptions scratch;
  scratch.scratch = {ScratchSpec{"big", MemorySpace::kVmem, ElementType::kF32, {big, big}}};
  EXPECT_THROW(run(op2("x", in, 8, 128, {8, 128}, {}), scratch), InvalidArgumentError);
  EXPECT_EQ(core.dma().copies_completed(), 0u);
}

// (row0 + rows) * cols * 4 wrapped and a remote copy read the buffer before the source.
TEST(PallasCallAdversarialTest, RemoteCopyWithAHugeRowIsRejected) {
  RuntimeOptions ro;
  ro.num_cores = 2;
  ro.hbm_bytes_per_core = 16 << 20;
  Runtime rt(ro);
  DeviceBuffer remote = rt.allocate(1, 32 * 128 * 4, "remote");
  DeviceBuffer out = rt.allocate(0, 8 * 128 * 4, "out");
  rt.run_spmd({0}, [&](CoreContext& cc) {
    PallasCallOptions o;
    o.num_dma_semaphores = 1;
    EXPECT_THROW(pallas_call(cc.core(), {}, {op2("y", out, 8, 128, {}, {})}, o,
                             [&](KernelContext& ctx) {
                               ctx.async_remote_copy(remote, 128, (int64_t{1} << 55) - 8,
                                                     ctx.output(0), ctx.semaphore(0));
                             }),
                 InvalidArgumentError);
    // The last 8 rows are fine; one row further is not.
    EXPECT_THROW(pallas_call(cc.core(), {}, {op2("y", out, 8, 128, {}, {})}, o,
                             [&](KernelContext& ctx) {
                               ctx.async_remote_copy(remote, 128, 25, ctx.output(0),
                                                     ctx.semaphore(0));
                             }),
                 InvalidArgumentError);
    pallas_call(cc.core(), {}, {op2("y", out, 8, 128, {}, {})}, o, [&](KernelContext& ctx) {
      ctx.async_remote_copy(remote, 128, 24, ctx.output(0), ctx.semaphore(0)).wait();
    });
  });
}

// After a fetch wait timed out, the pipeline freed its semaphores and VMEM while copies were
// still queued, and the engine later signalled freed (reused) memory. Now nothing is in flight
// when pallas_call throws, and semaphores created afterwards are never signalled.
TEST(PallasCallAdversarialTest, TimedOutFetchLeavesNoCopyBehind) {
  CoreMemoryOptions m;
  m.dma.latency = 400ms;
  m.dma.wait_timeout = 50ms;
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{}, m);
  DeviceBuffer in = make_matrix(core, 32, 128);
  DeviceBuffer out = make_matrix(core, 32, 128);
  EXPECT_THROW(scale_kernel(core, in, out, 32, 128, 8, 128, 3), DeadlineExceededError);
  EXPECT_EQ(core.dma().in_flight(), 0);
  EXPECT_EQ(core.memory(MemorySpace::kVmem).memory_stats().bytes_in_use, 0u);
  std::vector<DmaSemaphore> fresh(64);
  std::this_thread::sleep_for(600ms);  // longer than any copy's latency
  for (const DmaSemaphore& s : fresh) EXPECT_EQ(s.value(), 0u);
  EXPECT_EQ(core.dma().in_flight(), 0);
}

// An output overlapping an input in the same buffer gave results depending on num_buffers.
TEST(PallasCallAdversarialTest, AliasedInputAndOutputAreRejected) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer buf = make_matrix(core, 64, 128);
  PallasCallOptions o;
  o.grid = {7};
  auto x_map = [](std::span<const int64_t> g) { return std::vector<int64_t>{g[0], 0}; };
  auto y_map = [](std::span<const int64_t> g) { return std::vector<int64_t>{g[0] + 1, 0}; };
  try {
    pallas_call(core, {op2("x", buf, 64, 128, {8, 128}, x_map)},
                {op2("y", buf, 64, 128, {8, 128}, y_map)}, o, [](KernelContext&) {});
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("overlap in the same buffer"), std::string::npos)
        << e.what();
  }
  // Disjoint halves of one buffer are fine.
  DeviceBuffer two = make_matrix(core, 16, 128);
  PallasOperand lo = op2("x", two, 8, 128, {}, {});
  PallasOperand hi = op2("y", two, 8, 128, {}, {});
  hi.offset_bytes = 8 * 128 * 4;
  EXPECT_NO_THROW(pallas_call(core, {lo}, {hi}, PallasCallOptions{}, [](KernelContext&) {}));
}

// A kernel needing exactly the VMEM limit passed the budget check, then failed allocating
// (the bfc arena kept a 4 KiB remainder as internal fragmentation).
TEST(PallasCallAdversarialTest, KernelNeedingExactlyTheVmemLimitRuns) {
  CoreMemoryOptions m;
  m.vmem_bytes = 1 << 20;
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{}, m);
  DeviceBuffer in = make_matrix(core, 2040, 128);
  DeviceBuffer out = make_matrix(core, 8, 128);
  PallasCallOptions o;
  o.num_buffers = 1;
  o.scratch = {ScratchSpec{"tmp", MemorySpace::kVmem, ElementType::kF32, {8, 128}}};
  PallasOperand y = op2("y", out, 8, 128, {}, {});
  y.spec.memory_space = MemorySpace::kHbm;
  // (2040, 128) f32 = 1044480 bytes (whole tiles) + 4096 = 1 MiB. The bfc default kept the
  // 4096-byte remainder inside the first buffer (below capacity / 128 = 8 KiB), so the scratch
  // found 0 bytes free.
  const PallasCallStats st =
      pallas_call(core, {op2("x", in, 2040, 128, {}, {})}, {y}, o, [](KernelContext&) {});
  EXPECT_EQ(st.vmem_bytes, 1u << 20);
}

// Planning once took time quadratic in output blocks; the faster check still refuses a revisit.
TEST(PallasCallAdversarialTest, OutputRevisitIsStillRejected) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 8, 128);
  DeviceBuffer out = make_matrix(core, 16, 128);
  PallasCallOptions o;
  o.grid = {3};
  auto back = [](std::span<const int64_t> g) { return std::vector<int64_t>{g[0] % 2, 0}; };
  try {
    pallas_call(core, {op2("x", in, 8, 128, {}, {})}, {op2("y", out, 16, 128, {8, 128}, back)}, o,
                [](KernelContext&) {});
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("revisits block (0, 0) at grid point (2,)"),
              std::string::npos)
        << e.what();
  }
}

// A copy on a semaphore that is not the kernel's (a local in the body) outlived the kernel
// unreported, and the engine signalled a dead stack object.
TEST(PallasCallAdversarialTest, CopyOnAForeignSemaphoreIsRejected) {
  VirtualCore core(0, 16 << 20, ArenaLimit::fraction(1.0), ArenaOptions{});
  DeviceBuffer in = make_matrix(core, 8, 128);
  DeviceBuffer out = make_matrix(core, 8, 128);
  PallasCallOptions o;
  o.num_dma_semaphores = 1;
  o.scratch = {ScratchSpec{"tmp", MemorySpace::kVmem, ElementType::kF32, {8, 128}}};
  PallasOperand x = op2("x", in, 8, 128, {}, {});
  x.spec.memory_space = MemorySpace::kHbm;
  try {
    pallas_call(core, {x}, {op2("y", out, 8, 128, {}, {})}, o, [](KernelContext& ctx) {
      DmaSemaphore local;
      ctx.async_copy(ctx.input(0).region(), ctx.scratch(0).region(), local);
    });
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("its own DMA semaphores"), std::string::npos) << e.what();
  }
  EXPECT_EQ(core.dma().copies_completed(), 0u);
}

}  // namespace
}  // namespace vtpu
