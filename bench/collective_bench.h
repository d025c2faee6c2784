// The collectives benchmark behind `vtpu bench collectives`: an nccl-tests-style sweep
// (all_reduce_perf and friends) over sizes doubling from min_bytes to max_bytes, on N virtual
// cores, every row checked against a sequential reference.
//
// Method. One Runtime of N cores and one Communicator over all of them. For each size every core
// runs `warmup` untimed calls, then `iters` timed calls back to back, out of place (send != recv,
// nccl-tests' default), with no barrier between calls (the collective itself synchronises the
// cores). Each core reads std::chrono::steady_clock around every call; a call's time is the
// maximum over cores, and a row reports the median over the timed calls (also min and max in
// JSON). algbw = bytes / time and busbw = algbw * factor, with nccl-tests' factors (all_reduce
// 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce 1). After the timed
// calls every core's output is compared element by element with a reference computed on the host
// in core order 0..N-1 from the inputs; the inputs are small integers, so every order of addition
// gives the exact reference, and any difference is a wrong result.
//
// The ops and their nccl-tests shapes (1-D arrays; counts rounded down to a multiple of N where
// the op needs it, and sizes that leave a core no whole element skipped): all_reduce (every
// algorithm Communicator::all_reduce accepts; "auto" is resolved per size with
// Communicator::select_algorithm and each row names what ran), all_gather (tiled on axis 0, size =
// the whole output), reduce_scatter (tiled on dimension 0, size = the whole input), all_to_all
// (split and concat axis 0), broadcast and reduce (root 0; for reduce only the root's output is
// checked). The others have one algorithm each (ring, pairwise, pairwise, chain, chain); on one
// core every op runs "local".
//
// The DRAM bound of a row is traffic_bytes / memcpy bandwidth, where traffic_bytes
// reads every core's input once and writes every core's output once (2*N*S for all_reduce,
// (N+1)*S for broadcast and reduce, whose input or output is the root's alone) and
// the memcpy bandwidth (bytes read + bytes written per second, STREAM's convention) is measured
// in the same run with one memcpy thread per CPU over 64 MiB buffers, beyond the caches: a size
// whose buffers fit the caches can run below it (time / dram_bound < 1, so it is
// a reference, not a bound).
//
// The benchmark's Runtime is built from options.runtime (the --config file's RuntimeOptions)
// with num_cores and the links set by the benchmark; its thread pinning (runtime/thread_pinning.h)
// is part of what a row measures, so thread_pinning() reports it for the header and the JSON.
//
// Across processes (options.processes, runtime/process_group.h; `mpirun -np H vtpu bench
// collectives`): every process runs the same sweep on its own cores of the one group, a call's
// time is still the maximum over every core of every process (the processes exchange their
// cores' times after each size), the wrong elements are summed over the processes, and each row
// also gives each process's median. The memcpy bandwidth is measured by process 0 alone, while
// the others wait, and shared.
//
// Adding an op (the plug-in point): once Communicator offers it, write one make_<op>_bench_op()
// in collective_bench.cc (buffer sizes, nccl-tests factor, the call, the reference; optionally how
// auto resolves, the traffic and which rank's output is checked) and list it in
// collective_bench_ops(). The runner, the table, the JSON and the command line pick it up.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/collectives/types.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {

/// Buffer sizes of one row, per core.
struct CollectiveBenchShape {
  uint64_t count = 0;          // the element count printed (nccl-tests' "count")
  uint64_t send_elements = 0;  // elements of each core's send buffer
  uint64_t recv_elements = 0;  // elements of each core's recv buffer
  uint64_t bytes = 0;          // the row's size S (nccl-tests' "size"): algbw = S / time
};

/// One call of a collective on one core.
struct CollectiveBenchCall {
  DataType dtype = DataType::kF32;
  ReduceOp reduce = ReduceOp::kSum;
  std::string algorithm;  // resolved name (algorithm_name()), never "auto"
  const void* send = nullptr;
  void* recv = nullptr;
  CollectiveBenchShape shape;
};

/// How the benchmark drives one collective. Plain data; see the plug-in note above.
struct CollectiveBenchOp {
  std::string name;                     // "all_reduce", as --op takes it
  bool uses_reduce_op = false;          // whether --reduce applies (else printed as "none")
  std::vector<std::string> algorithms;  // what --algorithm accepts besides "auto"
  /// What "auto" runs for a row (an algorithm_name()); null: algorithms[0]. On one core the row
  /// shows "local" whatever was asked (Communicator runs a local copy there).
  std::function<std::string(const Communicator& comm, const CollectiveBenchShape& shape)>
      auto_algorithm;
  std::function<double(int n)> busbw_factor;  // nccl-tests' factor for n cores
  /// The row shape for a requested size of `bytes` with `element_bytes`-byte elements on n cores
  /// (count rounded down, as nccl-tests does). A count of 0 means the size is too small.
  std::function<CollectiveBenchShape(uint64_t bytes, uint64_t element_bytes, int n)> shape;
  /// Runs the collective once on the calling core (every core of `comm` calls it).
  std::function<void(Communicator& comm, CoreContext& ctx, const CollectiveBenchCall& call)> run;
  /// Bytes every core reads (its input) and writes (its output) once, for the memory-traffic
  /// bound; null: n * (send_elements + recv_elements) * element_bytes.
  std::function<double(const CollectiveBenchShape& shape, uint64_t element_bytes, int n)>
      traffic_bytes;
  /// Whether every core gets the same output (then reference() is computed once, for rank 0).
  bool same_output_on_every_core = false;
  /// -1: every rank's output is checked; else only this rank's (reduce: the root's, as the other
  /// ranks' recv is not written).
  int checked_rank = -1;
  /// The expected output of `rank` (recv_elements values), from the inputs of every rank as
  /// bench_input_value() gives them, combined in rank order 0..n-1: the sequential reference.
  std::function<void(int rank, int n, ReduceOp reduce, const CollectiveBenchShape& shape,
                     std::span<double> expected)>
      reference;
};

/// Element i of rank r's send buffer: a small integer (exact in every dtype, and every sum,
/// product, max or min of N <= 1024 of them is exact in f32 and s32), chosen per reduction: -6..6,
/// or for prod -1, 1 or 2 with at most six 2s per element whatever N (|product| <= 64).
double bench_input_value(ReduceOp reduce, int rank, uint64_t i);

/// Every op the benchmark knows, in the order --help lists them.
const std::vector<CollectiveBenchOp>& collective_bench_ops();
/// The op named `name`, or nullptr.
const CollectiveBenchOp* find_collective_bench_op(const std::string& name);

struct CollectiveBenchOptions {
  int cores = 8;                            // virtual cores in the group
  std::string op = "all_reduce";            // a name from collective_bench_ops()
  DataType dtype = DataType::kF32;          // element type
  ReduceOp reduce = ReduceOp::kSum;         // reduction (ops that reduce)
  std::string algorithm = "auto";           // "auto" or one of the op's algorithms
  uint64_t min_bytes = 8;                   // first size, bytes
  uint64_t max_bytes = uint64_t{64} << 20;  // last size (doubling from min_bytes), bytes
  int iters = 20;                           // timed calls per size
  int warmup = 5;                           // untimed calls per size
  uint64_t link_slot_bytes = 0;             // 0: RuntimeOptions' default, capped (see below)
  int link_num_slots = 0;                   // 0: RuntimeOptions' default
  /// Measure memcpy bandwidth before the sweep (64 MiB per CPU, about 0.1-0.3 s) for each row's
  /// DRAM bound; false leaves dram_bound_us 0 (a caller that needs only the times: the collective
  /// probe).
  bool measure_bound = true;
  /// The Runtime's options (e.g. pin_threads, collective_timeout, collective_algorithm from
  /// --config); num_cores, link_slot_bytes and link_num_slots are replaced by the fields above.
  RuntimeOptions runtime;
  /// The processes the cores are spread over (null: this process hosts them all); `cores` is the
  /// global count, which the process count must divide.
  std::shared_ptr<ProcessGroup> processes;
};

struct MemcpyBandwidth {
  int threads = 0;                // concurrent memcpy threads (one per CPU)
  uint64_t bytes_per_thread = 0;  // each thread copies this many bytes per pass
  double bytes_per_second = 0.0;  // bytes read + bytes written per second, best pass
};

/// Measures memcpy bandwidth: `threads` threads each copy `bytes_per_thread` between two private
/// buffers, `passes` times; the best pass counts.
MemcpyBandwidth measure_memcpy_bandwidth(int threads, uint64_t bytes_per_thread, int passes = 5);

struct CollectiveBenchRow {
  CollectiveBenchShape shape;
  std::string algorithm;       // what ran ("auto" resolved for this size; "local" on one core)
  double time_us = 0.0;        // median over calls of the slowest core's time
  double min_time_us = 0.0;    // fastest call
  double max_time_us = 0.0;    // slowest call
  double algbw_gbps = 0.0;     // bytes / time, 1e9 bytes per second
  double busbw_gbps = 0.0;     // algbw * busbw_factor
  double traffic_bytes = 0.0;  // every input read once and every output written once
  double dram_bound_us = 0.0;  // traffic_bytes / memcpy bandwidth (64 MiB buffers: DRAM)
  uint64_t wrong = 0;          // elements that differ from the reference, over all cores
  /// Per process: the median over the timed calls of its slowest core's time (one entry in one
  /// process).
  std::vector<double> process_time_us;
};

/// Usage check of everything CLI11 cannot see (the op, its algorithm, sizes against the dtype,
/// buffers that would not fit in 3/4 of the machine's memory). Returns a message naming the value,
/// empty when fine.
std::string check_collective_bench_options(const CollectiveBenchOptions& options);

/// The slot size used when link_slot_bytes is 0: RuntimeOptions' default (1 MiB), capped at n x
/// the largest per-core buffer of the sweep rounded up to 64 bytes (no message is larger, so the
/// results are the same; link memory is not: 1 MiB slots on 1024 cores committed 22 GiB for a
/// 64-byte sweep).
uint64_t default_link_slot_bytes(const std::vector<CollectiveBenchShape>& shapes,
                                 uint64_t element_bytes, int n);

/// Runs the sweep; calls `on_row` after each size (sizes too small to give every core a whole
/// element, count 0, are skipped) (so a table can print as it goes). Throws
/// vtpu::Error for invalid options or a failed collective. Wrong results are rows with wrong > 0,
/// not errors.
class CollectiveBenchmark {
 public:
  /// The op named options.op from collective_bench_ops().
  explicit CollectiveBenchmark(CollectiveBenchOptions options);
  /// An op given directly (tests, or an op not yet listed); options.op becomes op.name.
  CollectiveBenchmark(CollectiveBenchOptions options, CollectiveBenchOp op);
  const CollectiveBenchOptions& options() const { return options_; }
  const CollectiveBenchOp& op() const { return op_; }
  /// options.algorithm: "auto" or a name; the algorithm that ran is in each row.
  const std::string& requested_algorithm() const { return options_.algorithm; }
  /// The algorithm a row of `shape` runs on `comm`.
  std::string algorithm_for(const Communicator& comm, const CollectiveBenchShape& shape) const;
  double busbw_factor() const { return op_.busbw_factor(options_.cores); }
  /// The sizes of the sweep (count 0 skipped), in order.
  std::vector<CollectiveBenchShape> sweep_shapes() const;
  /// The link slot size the sweep uses: options.link_slot_bytes, or default_link_slot_bytes().
  uint64_t link_slot_bytes() const;
  /// Measures memcpy bandwidth (once per run, before the sweep).
  const MemcpyBandwidth& memcpy_bandwidth();
  /// Where the cores' threads run (starts the benchmark's Runtime if run() has not yet), e.g.
  /// "auto (pinned: cores 0,1 -> CPUs 0,1)".
  const ThreadPinning& thread_pinning();
  /// The options of the benchmark's Runtime (starts it like thread_pinning()).
  const RuntimeOptions& runtime_options() { return runtime().options(); }
  void run(const std::function<void(const CollectiveBenchRow&)>& on_row);

 private:
  /// The benchmark's Runtime, started on first use (one per benchmark, reused by every run()).
  Runtime& runtime();

  CollectiveBenchOptions options_;
  CollectiveBenchOp op_;
  MemcpyBandwidth memcpy_;
  std::unique_ptr<Runtime> runtime_;
};

/// The JSON of a row (bytes, count, dtype, op, reduce, algorithm, time_us, ..., check).
nlohmann::json collective_bench_row_json(const CollectiveBenchmark& bench,
                                         const CollectiveBenchRow& row);

}  // namespace vtpu
