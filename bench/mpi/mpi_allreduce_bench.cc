// OpenMPI's MPI_Allreduce measured the way nccl-tests' all_reduce_perf measures NCCL, so that
// `vtpu bench collectives` has a reference on the same machine (bench/collectives/compare.sh runs
// both side by side).
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

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Args {
  uint64_t min_bytes = 8;
  uint64_t max_bytes = uint64_t{32} << 20;
  int iters = 20;
  int warmup = 5;
  std::string json_path;  // empty: no JSON
};

// "64K", "32M", "1G" (powers of 1024) or a plain number of bytes; 0 on a malformed value.
uint64_t parse_size(const char* s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s) return 0;
  uint64_t mult = 1;
  switch (*end) {
    case 'K':
    case 'k':
      mult = uint64_t{1} << 10;
      ++end;
      break;
    case 'M':
    case 'm':
      mult = uint64_t{1} << 20;
      ++end;
      break;
    case 'G':
    case 'g':
      mult = uint64_t{1} << 30;
      ++end;
      break;
    default:
      break;
  }
  if (*end == 'i' && end[1] == 'B')
    end += 2;
  else if (*end == 'B')
    ++end;
  if (*end != '\0') return 0;
  return static_cast<uint64_t>(v) * mult;
}

// Parses argv; prints a message and returns false on bad input.
bool parse_args(int argc, char** argv, Args* a, int rank) {
  auto fail = [&](const std::string& msg) {
    if (rank == 0) std::fprintf(stderr, "mpi_allreduce_bench: %s\n", msg.c_str());
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      return fail(
          "usage: mpi_allreduce_bench [--min-bytes 8] [--max-bytes 32M] [--iters 20] "
          "[--warmup 5] [--json FILE]");
    }
    if (i + 1 >= argc) return fail("option " + k + " needs a value");
    const char* v = argv[++i];
    if (k == "--min-bytes" || k == "-b") {
      a->min_bytes = parse_size(v);
      if (a->min_bytes < 4) return fail(std::string("--min-bytes ") + v + " (expected >= 4)");
    } else if (k == "--max-bytes" || k == "-e") {
      a->max_bytes = parse_size(v);
      if (a->max_bytes < 4) return fail(std::string("--max-bytes ") + v + " (expected >= 4)");
    } else if (k == "--iters" || k == "-n") {
      a->iters = std::atoi(v);
      if (a->iters < 1) return fail(std::string("--iters ") + v + " (expected >= 1)");
    } else if (k == "--warmup" || k == "-w") {
      a->warmup = std::atoi(v);
      if (a->warmup < 0) return fail(std::string("--warmup ") + v + " (expected >= 0)");
    } else if (k == "--json") {
      a->json_path = v;
    } else {
      return fail("unknown option " + k);
    }
  }
  if (a->min_bytes > a->max_bytes) return fail("--min-bytes is larger than --max-bytes");
  return true;
}

// Input of rank r at element i: a small integer, so that sums are exact in any order.
float input_value(int r, uint64_t i) { return static_cast<float>(((r + 1) * 7 + i) % 13) - 6.0f; }

struct Row {
  uint64_t bytes, count;
  double time_us, algbw, busbw;
  uint64_t wrong;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  Args args;
  if (!parse_args(argc, argv, &args, rank)) {
    MPI_Finalize();
    return 2;
  }
  const double factor = 2.0 * (n - 1) / n;
  const uint64_t max_count = args.max_bytes / sizeof(float);
  std::vector<float> send(std::max<uint64_t>(max_count, 1)), recv(send.size());
  for (uint64_t i = 0; i < send.size(); ++i) send[i] = input_value(rank, i);
  if (rank == 0) {
    std::printf(
        "# OpenMPI MPI_Allreduce, %d ranks, f32 sum, out of place; time: median over %d calls "
        "of the slowest rank's time, after %d warmup calls; busbw = algbw * 2(n-1)/n\n",
        n, args.iters, args.warmup);
    std::printf("%12s %12s %6s %6s %12s %10s %10s %8s\n", "size(B)", "count", "type", "redop",
                "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  std::vector<Row> rows;
  std::vector<double> t(static_cast<size_t>(args.iters)), tmax(t.size());
  for (uint64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 2) {
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
      float ref = 0.0f;
      for (int r = 0; r < n; ++r) ref += input_value(r, i);
      if (recv[i] != ref) ++wrong;
    }
    unsigned long long total_wrong = 0;
    MPI_Reduce(&wrong, &total_wrong, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::sort(tmax.begin(), tmax.end());
      const size_t m = tmax.size();
      const double median = m % 2 ? tmax[m / 2] : 0.5 * (tmax[m / 2 - 1] + tmax[m / 2]);
      const double algbw = static_cast<double>(count * sizeof(float)) / median * 1e-9;
      Row row{count * sizeof(float), count, median * 1e6, algbw, algbw * factor, total_wrong};
      rows.push_back(row);
      std::printf("%12llu %12llu %6s %6s %12.2f %10.3f %10.3f %8llu\n",
                  static_cast<unsigned long long>(row.bytes),
                  static_cast<unsigned long long>(row.count), "float", "sum", row.time_us,
                  row.algbw, row.busbw, static_cast<unsigned long long>(row.wrong));
      std::fflush(stdout);
    }
    if (bytes > args.max_bytes / 2) break;  // no overflow past the largest size
  }
  int status = 0;
  if (rank == 0) {
    for (const Row& r : rows)
      if (r.wrong) status = 1;
    if (!args.json_path.empty()) {
      FILE* f = args.json_path == "-" ? stdout : std::fopen(args.json_path.c_str(), "w");
      if (f == nullptr) {
        std::fprintf(stderr, "mpi_allreduce_bench: cannot write %s\n", args.json_path.c_str());
        status = 1;
      } else {
        std::fprintf(f,
                     "{\"implementation\": \"openmpi\", \"ranks\": %d, \"op\": \"all_reduce\", "
                     "\"dtype\": \"f32\", \"reduce\": \"sum\", \"iters\": %d, \"warmup\": %d, "
                     "\"time_statistic\": \"median over calls of the slowest rank\", "
                     "\"busbw_factor\": %.17g, \"rows\": [",
                     n, args.iters, args.warmup, factor);
        for (size_t i = 0; i < rows.size(); ++i) {
          const Row& r = rows[i];
          std::fprintf(f,
                       "%s\n  {\"bytes\": %llu, \"count\": %llu, \"time_us\": %.3f, "
                       "\"algbw_GBps\": %.6f, \"busbw_GBps\": %.6f, \"wrong\": %llu}",
                       i ? "," : "", static_cast<unsigned long long>(r.bytes),
                       static_cast<unsigned long long>(r.count), r.time_us, r.algbw, r.busbw,
                       static_cast<unsigned long long>(r.wrong));
        }
        std::fprintf(f, "\n]}\n");
        if (f != stdout) std::fclose(f);
      }
    }
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
