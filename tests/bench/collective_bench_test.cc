// The collectives benchmark runner (bench/collective_bench.h): its rows, its reference check
// (which must catch a wrong result, or it proves nothing) and its option checks. Timings are
// never asserted.
#include "vtpu/bench/collective_bench.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/test_data.h"
#include "vtpu/common/error.h"

namespace vtpu {
namespace {

CollectiveBenchOptions tiny(int cores) {
  CollectiveBenchOptions o;
  o.cores = cores;
  o.min_bytes = 8;
  o.max_bytes = 4096;
  o.iters = 2;
  o.warmup = 1;
  o.link_slot_bytes = 256;  // several ring loops at the larger sizes
  // The memcpy bound (64 MiB per CPU, five passes) took most of these tests' time, and under load
  // pushed EveryOpChecksOkOnOneThreeAndFourCores past its timeout; one test below measures it.
  o.measure_bound = false;
  return o;
}

std::vector<CollectiveBenchRow> run_rows(CollectiveBenchmark& bench) {
  std::vector<CollectiveBenchRow> rows;
  bench.run([&](const CollectiveBenchRow& r) { rows.push_back(r); });
  return rows;
}

TEST(CollectiveBenchTest, AllReduceRowsAreCheckedAndUseTheNcclTestsFactor) {
  for (int cores : {1, 2, 3, 4}) {
    CollectiveBenchmark bench(tiny(cores));
    const std::vector<CollectiveBenchRow> rows = run_rows(bench);
    ASSERT_EQ(rows.size(), 10u);  // 8 B .. 4 KiB
    for (const CollectiveBenchRow& r : rows) {
      EXPECT_EQ(r.wrong, 0u) << cores << " cores, " << r.shape.bytes << " B";
      EXPECT_EQ(r.shape.count * 4, r.shape.bytes);
      EXPECT_DOUBLE_EQ(r.busbw_gbps, r.algbw_gbps * 2.0 * (cores - 1) / cores);
      EXPECT_DOUBLE_EQ(r.traffic_bytes, 2.0 * cores * static_cast<double>(r.shape.bytes));
      EXPECT_LE(r.min_time_us, r.time_us);
      EXPECT_LE(r.time_us, r.max_time_us);
    }
  }
}

// The bound: traffic over the measured memcpy bandwidth when measured (the default), 0 and a null
// time_over_dram_bound in the JSON when not.
TEST(CollectiveBenchTest, TheBoundIsTrafficOverMemcpyBandwidthOrAbsent) {
  CollectiveBenchOptions o = tiny(2);
  o.max_bytes = 64;
  o.measure_bound = true;
  CollectiveBenchmark measured(o);
  const std::vector<CollectiveBenchRow> rows = run_rows(measured);
  ASSERT_FALSE(rows.empty());
  const double bw = measured.memcpy_bandwidth().bytes_per_second;
  ASSERT_GT(bw, 0.0);
  for (const CollectiveBenchRow& r : rows) {
    EXPECT_DOUBLE_EQ(r.dram_bound_us, r.traffic_bytes / bw * 1e6);
    EXPECT_DOUBLE_EQ(collective_bench_row_json(measured, r)["time_over_dram_bound"].get<double>(),
                     r.time_us / r.dram_bound_us);
  }
  CollectiveBenchmark unmeasured(tiny(2));
  for (const CollectiveBenchRow& r : run_rows(unmeasured)) {
    EXPECT_EQ(r.dram_bound_us, 0.0);
    EXPECT_TRUE(collective_bench_row_json(unmeasured, r)["time_over_dram_bound"].is_null());
  }
}

// An all_reduce that corrupts one element on the last core: the check must count exactly it.
TEST(CollectiveBenchTest, ReferenceCheckCatchesAWrongElement) {
  CollectiveBenchOp broken = *find_collective_bench_op("all_reduce");
  const auto run = broken.run;
  broken.run = [run](Communicator& comm, CoreContext& ctx, const CollectiveBenchCall& call) {
    run(comm, ctx, call);
    if (ctx.core_id() == comm.size() - 1) static_cast<float*>(call.recv)[call.shape.count / 2] += 1;
  };
  CollectiveBenchmark bench(tiny(3), broken);
  for (const CollectiveBenchRow& r : run_rows(bench)) EXPECT_EQ(r.wrong, 1u) << r.shape.bytes;
}

// Every op, a tiny sweep on 1, 3 and 4 cores: every row checked ok, nccl-tests' shape and factor.
TEST(CollectiveBenchTest, EveryOpChecksOkOnOneThreeAndFourCores) {
  for (const CollectiveBenchOp& op : collective_bench_ops()) {
    for (int cores : {1, 3, 4}) {
      for (ReduceOp reduce : {ReduceOp::kSum, ReduceOp::kProd}) {
        if (reduce != ReduceOp::kSum && !op.uses_reduce_op) continue;
        CollectiveBenchOptions o = tiny(cores);
        o.op = op.name;
        o.reduce = reduce;
        CollectiveBenchmark bench(o);
        const std::vector<CollectiveBenchRow> rows = run_rows(bench);
        const std::string what = op.name + " on " + std::to_string(cores) + " cores";
        ASSERT_FALSE(rows.empty()) << what;
        const uint64_t n = static_cast<uint64_t>(cores);
        const bool per_rank =
            op.name == "all_gather" || op.name == "reduce_scatter" || op.name == "all_to_all";
        // Rows start at the first size that gives every core an element: 8 B holds 2 f32.
        EXPECT_EQ(rows.size(), per_rank && cores > 2 ? 9u : 10u) << what;
        uint64_t previous_bytes = 0;
        for (const CollectiveBenchRow& r : rows) {
          EXPECT_EQ(r.wrong, 0u) << what << ", " << r.shape.bytes << " B";
          EXPECT_GT(r.shape.count, 0u);
          EXPECT_GT(r.shape.bytes, previous_bytes);
          previous_bytes = r.shape.bytes;
          double factor = 1.0;
          if (op.name == "all_reduce") {
            factor = 2.0 * (cores - 1) / cores;
            EXPECT_EQ(r.shape.bytes, r.shape.count * 4);
            EXPECT_EQ(r.algorithm, cores == 1 ? "local"
                                   : r.shape.bytes <= Communicator::kSmallMessageBytes
                                       ? "recursive_doubling"
                                       : "ring");
          } else if (per_rank) {
            factor = (cores - 1.0) / cores;
            EXPECT_EQ(r.shape.bytes, r.shape.count * n * 4);  // nccl-tests: the whole buffer
            EXPECT_EQ(r.shape.send_elements,
                      op.name == "all_gather" ? r.shape.count : r.shape.count * n);
            EXPECT_EQ(r.shape.recv_elements,
                      op.name == "reduce_scatter" ? r.shape.count : r.shape.count * n);
            EXPECT_EQ(r.algorithm, cores == 1                ? "local"
                                   : op.name == "all_to_all" ? "pairwise"
                                                             : "direct");
          } else {
            EXPECT_EQ(r.shape.bytes, r.shape.count * 4);
            EXPECT_EQ(r.algorithm, cores == 1 ? "local" : op.name == "reduce" ? "direct" : "chain");
            EXPECT_DOUBLE_EQ(r.traffic_bytes, (cores + 1.0) * static_cast<double>(r.shape.bytes));
          }
          EXPECT_DOUBLE_EQ(r.busbw_gbps, r.algbw_gbps * factor) << what;
        }
      }
    }
  }
}

// --algorithm: every all_reduce algorithm runs and is named in its rows.
TEST(CollectiveBenchTest, EveryAllReduceAlgorithmRuns) {
  const CollectiveBenchOp& op = *find_collective_bench_op("all_reduce");
  EXPECT_EQ(op.algorithms, (std::vector<std::string>{
                               "ring", "bidirectional_ring", "recursive_doubling", "torus_2d",
                               "ring_reduce_scatter", "direct", "hierarchical"}));
  for (const std::string& algorithm : op.algorithms) {
    for (int cores : {3, 4}) {
      CollectiveBenchOptions o = tiny(cores);
      o.algorithm = algorithm;
      CollectiveBenchmark bench(o);
      for (const CollectiveBenchRow& r : run_rows(bench)) {
        EXPECT_EQ(r.wrong, 0u) << algorithm << " on " << cores << " cores, " << r.shape.bytes;
        EXPECT_EQ(r.algorithm, algorithm);
      }
    }
  }
}

// New ops with a reference off by one element: the check must catch it on every core it compares
// (all three); and a reduce whose non-root output is garbage (never written, so not checked) and
// whose root output has one wrong element: exactly that one counts.
TEST(CollectiveBenchTest, ReferenceCheckCatchesAWrongElementOfTheNewOps) {
  for (const char* name : {"reduce_scatter", "all_to_all", "all_gather"}) {
    CollectiveBenchOp broken = *find_collective_bench_op(name);
    const auto reference = broken.reference;
    broken.reference = [reference](int rank, int n, ReduceOp reduce,
                                   const CollectiveBenchShape& shape, std::span<double> expected) {
      reference(rank, n, reduce, shape, expected);
      expected[shape.recv_elements / 2] += 1;
    };
    CollectiveBenchmark bench(tiny(3), broken);
    const std::vector<CollectiveBenchRow> rows = run_rows(bench);
    ASSERT_FALSE(rows.empty());
    for (const CollectiveBenchRow& r : rows) EXPECT_EQ(r.wrong, 3u) << name << " " << r.shape.bytes;
  }
  // reduce: garbage on a non-root core is fine; one wrong element on the root is caught.
  CollectiveBenchOp reduce = *find_collective_bench_op("reduce");
  const auto run = reduce.run;
  reduce.run = [run](Communicator& comm, CoreContext& ctx, const CollectiveBenchCall& call) {
    run(comm, ctx, call);
    if (ctx.core_id() == 1) static_cast<float*>(call.recv)[0] = 1e9f;
    if (ctx.core_id() == 0) static_cast<float*>(call.recv)[call.shape.count - 1] += 1;
  };
  CollectiveBenchmark bench(tiny(3), reduce);
  for (const CollectiveBenchRow& r : run_rows(bench)) EXPECT_EQ(r.wrong, 1u) << r.shape.bytes;
}

TEST(CollectiveBenchTest, InputsKeepEveryReductionExact) {
  // Sums of up to 1024 values in -6..6 and products of values in {1, 2} are exact in f32.
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    for (int r = 0; r < 16; ++r) {
      for (uint64_t i = 0; i < 64; ++i) {
        const double v = bench_input_value(op, r, i);
        EXPECT_EQ(v, std::round(v));
        EXPECT_LE(std::abs(v), 6.0);
        if (op == ReduceOp::kProd) {
          EXPECT_TRUE(v == 1.0 || v == 2.0 || v == -1.0);
        }
      }
    }
  }
}

// Regression: prod inputs had a 2 on every fifth rank, so on 256 cores a product reached 2^51,
// which wraps in s32 (and 2^205 on 1024 cores overflowed f32 and s64): the row was WRONG. Every
// product over up to 1024 ranks must stay exact in s32, and 256 cores must check ok.
TEST(CollectiveBenchTest, ProdInputsStayExactOnManyCores) {
  for (uint64_t i = 0; i < 200; ++i) {
    double p = 1.0;
    for (int r = 0; r < 1024; ++r) p *= bench_input_value(ReduceOp::kProd, r, i);
    EXPECT_LE(std::abs(p), 64.0) << i;
  }
#if defined(__SANITIZE_THREAD__)
  // 256 cores reserve 256 x 16 GiB of address space for their HBM arenas, more than TSan's
  // application range holds ("could not reserve 17179869184 bytes").
  GTEST_SKIP() << "256 cores' HBM reservations do not fit ThreadSanitizer's address range";
#endif
  CollectiveBenchOptions o = tiny(256);
  o.dtype = DataType::kS32;
  o.reduce = ReduceOp::kProd;
  o.min_bytes = 64;
  o.max_bytes = 64;
  o.iters = 1;
  o.warmup = 0;
  CollectiveBenchmark bench(o);
  for (const CollectiveBenchRow& r : run_rows(bench)) EXPECT_EQ(r.wrong, 0u) << r.shape.bytes;
}

// Regression: `--cores 1024 --max-bytes 1G` passed the option checks and would have written
// 2 TiB of buffers (an out-of-memory kill); it must be a usage error naming the bytes needed.
TEST(CollectiveBenchTest, BuffersBeyondTheMachinesMemoryAreAUsageError) {
  CollectiveBenchOptions o = tiny(1024);
  o.max_bytes = uint64_t{1} << 30;
  const std::string msg = check_collective_bench_options(o);
  // 1024 cores x (send + recv) x 1 GiB = 2 TiB, against 3/4 of the host's memory.
  EXPECT_TRUE(testing::names_all(msg, {"2.00 TiB", "all_reduce", "3/4"}));
}

// Regression: the default 1 MiB slots made a 64-byte sweep on 1024 cores commit 22 GiB of links
// (2 MiB huge pages per link); the default is capped at n x the largest per-core buffer (rounded
// up to 64 B), which no message exceeds, and stays 1 MiB for large sizes.
TEST(CollectiveBenchTest, DefaultSlotSizeIsCappedBySweep) {
  CollectiveBenchOptions o = tiny(1024);
  o.link_slot_bytes = 0;
  o.min_bytes = 8;
  o.max_bytes = 64;
  EXPECT_EQ(CollectiveBenchmark(o).link_slot_bytes(), 1024u * 64u);  // 16 f32 x 4 B x 1024
  o.cores = 3;
  o.max_bytes = 20;  // 5 f32 = 20 B per core, x 3 = 60, rounded up to 64
  EXPECT_EQ(CollectiveBenchmark(o).link_slot_bytes(), 64u);
  o.max_bytes = 64 << 20;
  EXPECT_EQ(CollectiveBenchmark(o).link_slot_bytes(), uint64_t{1} << 20);
  o.link_slot_bytes = 4096;
  EXPECT_EQ(CollectiveBenchmark(o).link_slot_bytes(), 4096u);
}

TEST(CollectiveBenchTest, OptionChecksNameTheValue) {
  CollectiveBenchOptions o = tiny(2);
  o.op = "all_scatter";
  EXPECT_NE(check_collective_bench_options(o).find("--op all_scatter"), std::string::npos);
  EXPECT_THROW(CollectiveBenchmark{o}, InvalidArgumentError);
  o = tiny(2);
  o.algorithm = "tree";
  EXPECT_NE(check_collective_bench_options(o).find("--algorithm tree"), std::string::npos);
  // A --min-bytes below one element is skipped like every too-small size
  // (nccl-tests takes any -b): s64 from 1 byte sweeps 1, 2, 4 (skipped), then 8 .. 4096.
  o = tiny(2);
  o.dtype = DataType::kS64;
  o.min_bytes = 1;
  EXPECT_EQ(check_collective_bench_options(o), "");
  {
    const std::vector<CollectiveBenchShape> shapes = CollectiveBenchmark(o).sweep_shapes();
    ASSERT_EQ(shapes.size(), 10u);  // 8, 16, ..., 4096
    EXPECT_EQ(shapes.front().count, 1u);
    EXPECT_EQ(shapes.back().count, 512u);
  }
  o = tiny(2);
  EXPECT_EQ(check_collective_bench_options(o), "");
  EXPECT_EQ(CollectiveBenchmark(o).requested_algorithm(), "auto");
  o.op = "reduce";
  o.algorithm = "ring";
  EXPECT_TRUE(
      testing::names_all(check_collective_bench_options(o), {"--algorithm ring", "reduce"}));
  o.algorithm = "direct";
  EXPECT_EQ(check_collective_bench_options(o), "");
  // all_gather on 4 cores needs 4 elements: 8 bytes of f32 is no row, 16 bytes the first.
  o = tiny(4);
  o.op = "all_gather";
  o.max_bytes = 8;
  EXPECT_NE(check_collective_bench_options(o).find("--max-bytes 8 gives no all_gather"),
            std::string::npos);
  o.max_bytes = 16;
  EXPECT_EQ(check_collective_bench_options(o), "");
}

}  // namespace
}  // namespace vtpu
