// OpenMPI's MPI_Allreduce measured the way nccl-tests' all_reduce_perf measures NCCL, so that
// `vtpu bench collectives` (bench/collectives/compare.sh) and vtpu across processes
// (distributed_allreduce_bench.cc, bench/mpi/compare.sh) have a reference on the same machine.
//
//   mpirun --oversubscribe -np 4 build/bench/vtpu_mpi_allreduce_bench --min-bytes 64K
//       --max-bytes 32M [--iters 20] [--warmup 5] [--json FILE]
//
// For each size S (doubling from --min-bytes to --max-bytes, rounded down to whole f32
// elements): S / 4 floats, MPI_SUM, out of place (sendbuf != recvbuf, nccl-tests' default).
// Method, the same as `vtpu bench collectives`: `--warmup` untimed calls, then `--iters` timed
// calls back to back (no barrier between them; the collective itself synchronises the ranks).
// Each rank reads std::chrono::steady_clock around every call; a call's time is the maximum over
// ranks, and a row reports the median over the timed calls. algbw = S / time and busbw = algbw *
// 2(n-1)/n (nccl-tests' all-reduce factor). After the timed calls every rank compares its output
// with the sequential sum of the inputs (small integers, so every order of addition is exact);
// #wrong is the count of differing elements over all ranks.
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "bench/mpi/allreduce_bench_table.h"

namespace ab = vtpu::allreduce_bench;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  ab::Args args;
  if (!ab::parse_args(argc, argv, &args, rank, "mpi_allreduce_bench")) {
    MPI_Finalize();
    return 2;
  }
  const uint64_t max_count = args.max_bytes / sizeof(float);
  std::vector<float> send(std::max<uint64_t>(max_count, 1)), recv(send.size());
  for (uint64_t i = 0; i < send.size(); ++i) send[i] = ab::input_value(rank, i);
  if (rank == 0) ab::print_header("OpenMPI MPI_Allreduce", n, args);
  std::vector<ab::Row> rows;
  std::vector<double> t(static_cast<size_t>(args.iters)), tmax(t.size());
  for (uint64_t bytes : ab::sweep_bytes(args)) {
    const uint64_t count = bytes / sizeof(float);
    const int c = static_cast<int>(count);
    for (int w = 0; w < args.warmup; ++w) {
      MPI_Allreduce(send.data(), recv.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    std::fill(recv.begin(), recv.begin() + static_cast<int64_t>(count), 0.0f);
    for (int k = 0; k < args.iters; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      MPI_Allreduce(send.data(), recv.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      t[static_cast<size_t>(k)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    MPI_Reduce(t.data(), tmax.data(), args.iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    unsigned long long wrong = 0;
    for (uint64_t i = 0; i < count; ++i) {
      if (recv[i] != ab::expected_sum(n, i)) ++wrong;
    }
    unsigned long long total_wrong = 0;
    MPI_Reduce(&wrong, &total_wrong, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      rows.push_back(ab::make_row(count, ab::median(tmax), n, total_wrong));
      ab::print_row(rows.back());
    }
  }
  int status = 0;
  if (rank == 0) {
    for (const ab::Row& r : rows)
      if (r.wrong) status = 1;
    if (!args.json_path.empty() &&
        !ab::write_json(args.json_path, "\"implementation\": \"openmpi\"", args, n, rows)) {
      status = 1;
    }
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
