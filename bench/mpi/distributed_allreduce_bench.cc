// vtpu's all_reduce across the processes of an MPI job, measured as mpi_allreduce_bench.cc
// measures MPI_Allreduce (and nccl-tests all_reduce_perf NCCL), so that bench/mpi/compare.sh can
// put the two side by side:
//
//   mpirun --oversubscribe --bind-to none -np 2 build/bench/vtpu_distributed_allreduce_bench
//       --cores-per-process 4 --min-bytes 64K --max-bytes 32M [--iters 20] [--warmup 5]
//       [--algorithm auto] [--slot-bytes 1M] [--num-slots 4] [--json FILE]
//
// One runtime of np x K global cores (distributed::make_runtime) and one Communicator over all of
// them, so every all_reduce crosses the processes. For each size S (f32, sum, out of place):
// every core runs `--warmup` untimed calls, then `--iters` timed calls back to back; each core
// reads steady_clock around every call, a call's time is the maximum over the cores of every
// process (host all_gather), and a row reports the median over the calls; busbw = S / time *
// 2(n-1)/n for n = np x K ranks. Every core's output is then compared with the exact sum of the
// inputs (small integers); #wrong counts differing elements over all cores.
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "bench/mpi/allreduce_bench_table.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/common/error.h"
#include "vtpu/distributed/distributed.h"

namespace ab = vtpu::allreduce_bench;

namespace vtpu {
namespace {

struct Options {
  int cores_per_process = 1;
  Algorithm algorithm = Algorithm::kAuto;
  uint64_t slot_bytes = 0;  // 0: RuntimeOptions' default
  int num_slots = 0;        // 0: RuntimeOptions' default
};

// One row: warmup and timed calls of `count` floats on every local core.
ab::Row measure(Runtime& rt, Communicator& comm, const Options& o, const ab::Args& a,
                uint64_t count) {
  const int local = rt.local_num_cores();
  // times[core][call], per local core.
  std::vector<std::vector<double>> times(static_cast<size_t>(local),
                                         std::vector<double>(static_cast<size_t>(a.iters)));
  std::atomic<uint64_t> wrong{0};
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> send(count), recv(count, 0.0f);
    for (uint64_t i = 0; i < count; ++i) send[i] = ab::input_value(ctx.core_id(), i);
    CollectiveOptions co;
    co.algorithm = o.algorithm;
    const auto call = [&] {
      comm.all_reduce<float>(ctx, std::span<const float>(send), std::span<float>(recv),
                             ReduceOp::kSum, co);
    };
    for (int w = 0; w < a.warmup; ++w) call();
    std::fill(recv.begin(), recv.end(), 0.0f);
    auto& t = times[static_cast<size_t>(ctx.core_id() - rt.first_local_core())];
    for (int k = 0; k < a.iters; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      call();
      t[static_cast<size_t>(k)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    uint64_t w = 0;
    for (uint64_t i = 0; i < count; ++i) w += recv[i] != ab::expected_sum(rt.num_cores(), i);
    wrong += w;
  });
  std::vector<double> slowest(static_cast<size_t>(a.iters), 0.0);
  for (const auto& t : times) {
    for (size_t k = 0; k < t.size(); ++k) slowest[k] = std::max(slowest[k], t[k]);
  }
  // One host all_gather: this process's slowest time per call, then its #wrong; the call times
  // are maxima over the processes and the counts a sum.
  slowest.push_back(static_cast<double>(wrong.load()));
  const auto all = rt.process_group().all_gather(std::as_bytes(std::span<const double>(slowest)));
  std::vector<double> call_time(static_cast<size_t>(a.iters), 0.0);
  double total_wrong = 0.0;
  for (const auto& bytes : all) {
    std::vector<double> theirs(slowest.size());
    std::memcpy(theirs.data(), bytes.data(), theirs.size() * sizeof(double));
    for (size_t k = 0; k < call_time.size(); ++k) call_time[k] = std::max(call_time[k], theirs[k]);
    total_wrong += theirs.back();
  }
  return ab::make_row(count, ab::median(call_time), rt.num_cores(),
                      static_cast<uint64_t>(total_wrong));
}

int run(int argc, char** argv) {
  distributed::initialize();
  const int rank = distributed::process_index();
  ab::Args args;
  Options o;
  const auto extra = [&](const std::string& k, const char* v) -> std::string {
    if (k == "--cores-per-process") {
      o.cores_per_process = std::atoi(v);
      if (o.cores_per_process < 1) return k + " " + v + " (expected >= 1)";
    } else if (k == "--algorithm") {
      try {
        o.algorithm = parse_algorithm(v);
      } catch (const Error& e) {
        return e.message();
      }
    } else if (k == "--slot-bytes") {
      o.slot_bytes = ab::parse_size(v);
      if (o.slot_bytes == 0) return k + " " + v + " (expected a size such as 1M)";
    } else if (k == "--num-slots") {
      o.num_slots = std::atoi(v);
      if (o.num_slots < 2) return k + " " + v + " (expected >= 2)";
    } else {
      return "unknown";
    }
    return "";
  };
  if (!ab::parse_args(argc, argv, &args, rank, "distributed_allreduce_bench",
                      " [--cores-per-process 1] [--algorithm auto] [--slot-bytes 1M] "
                      "[--num-slots 4]",
                      extra)) {
    return 2;
  }
  RuntimeOptions ro;
  ro.num_cores = o.cores_per_process * distributed::process_count();
  ro.hbm_bytes_per_core = uint64_t{1} << 28;
  if (o.slot_bytes) ro.link_slot_bytes = o.slot_bytes;
  if (o.num_slots) ro.link_num_slots = o.num_slots;
  auto rt = distributed::make_runtime(ro);
  std::vector<int> all_cores(static_cast<size_t>(rt->num_cores()));
  std::iota(all_cores.begin(), all_cores.end(), 0);
  Communicator comm(*rt, all_cores);
  const int n = rt->num_cores();
  if (rank == 0) {
    ab::print_header("vtpu all_reduce (" + std::string(algorithm_name(o.algorithm)) + ") over " +
                         std::to_string(rt->process_count()) + " processes x " +
                         std::to_string(rt->local_num_cores()) + " cores, slots " +
                         std::to_string(ro.link_num_slots) + " x " +
                         std::to_string(ro.link_slot_bytes) + " B",
                     n, args);
  }
  std::vector<ab::Row> rows;
  for (uint64_t bytes : ab::sweep_bytes(args)) {
    rows.push_back(measure(*rt, comm, o, args, bytes / sizeof(float)));
    if (rank == 0) ab::print_row(rows.back());
  }
  int status = 0;
  for (const ab::Row& r : rows)
    if (r.wrong) status = 1;
  if (rank == 0 && !args.json_path.empty() &&
      !ab::write_json(
          args.json_path,
          "\"implementation\": \"vtpu\", \"processes\": " + std::to_string(rt->process_count()) +
              ", \"cores_per_process\": " + std::to_string(rt->local_num_cores()) +
              ", \"algorithm\": \"" + std::string(algorithm_name(o.algorithm)) + "\"",
          args, n, rows)) {
    status = 1;
  }
  return status;
}

}  // namespace
}  // namespace vtpu

int main(int argc, char** argv) {
  int status = 0;
  try {
    status = vtpu::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distributed_allreduce_bench: %s\n", e.what());
    vtpu::distributed::abort_job(1);
  }
  vtpu::distributed::shutdown();
  return status;
}
