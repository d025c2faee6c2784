// The collectives benchmark runner (examples/collective_bench.h): its rows, its reference check
// (which must catch a wrong result, or it proves nothing) and its option checks. Timings are
// never asserted.
#include "examples/collective_bench.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"

namespace vtpu::examples {
namespace {

CollectiveBenchOptions tiny(int cores) {
  CollectiveBenchOptions o;
  o.cores = cores;
  o.min_bytes = 8;
  o.max_bytes = 4096;
  o.iters = 2;
  o.warmup = 1;
  o.link_slot_bytes = 256;  // several ring loops at the larger sizes
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

TEST(CollectiveBenchTest, InputsKeepEveryReductionExact) {
  // Sums of up to 1024 values in -6..6 and products of values in {1, 2} are exact in f32.
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    for (int r = 0; r < 16; ++r) {
      for (uint64_t i = 0; i < 64; ++i) {
        const double v = bench_input_value(op, r, i);
        EXPECT_EQ(v, std::round(v));
        EXPECT_LE(std::abs(v), 6.0);
        if (op == ReduceOp::kProd) {
          EXPECT_TRUE(v == 1.0 || v == 2.0);
        }
      }
    }
  }
}

TEST(CollectiveBenchTest, OptionChecksNameTheValue) {
  CollectiveBenchOptions o = tiny(2);
  o.op = "all_scatter";
  EXPECT_NE(check_collective_bench_options(o).find("--op all_scatter"), std::string::npos);
  EXPECT_THROW(CollectiveBenchmark{o}, InvalidArgumentError);
  o = tiny(2);
  o.algorithm = "tree";
  EXPECT_NE(check_collective_bench_options(o).find("--algorithm tree"), std::string::npos);
  o = tiny(2);
  o.dtype = DataType::kS64;
  o.min_bytes = 7;
  EXPECT_NE(check_collective_bench_options(o).find("--min-bytes 7"), std::string::npos);
  o = tiny(2);
  EXPECT_EQ(check_collective_bench_options(o), "");
  EXPECT_EQ(CollectiveBenchmark(o).resolved_algorithm(), "ring");
}

}  // namespace
}  // namespace vtpu::examples
