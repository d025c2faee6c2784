// What the two all-reduce benchmarks of bench/mpi/ share, so that their tables compare line by
// line (bench/mpi/compare.sh joins them): the command line, the inputs and their exact sum, the
// median of the per-call times, and the table and JSON rows. No MPI and no vtpu here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace vtpu::allreduce_bench {

struct Args {
  uint64_t min_bytes = 8;
  uint64_t max_bytes = uint64_t{32} << 20;
  int iters = 20;
  int warmup = 5;
  std::string json_path;  // empty: no JSON
};

/// "64K", "32M", "1G" (powers of 1024) or a plain number of bytes; 0 on a malformed value.
inline uint64_t parse_size(const char* s) {
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

/// Takes a program-specific option `key` with value `value`; returns "" when taken, an error
/// message when the value is bad, and "unknown" when the key is not the program's.
using ExtraOption = std::function<std::string(const std::string& key, const char* value)>;

/// Parses argv into `a` (and `extra`'s options); prints the problem (on rank 0) and returns false
/// on bad input or --help.
inline bool parse_args(int argc, char** argv, Args* a, int rank, const char* program,
                       const char* usage_extra = "", const ExtraOption& extra = nullptr) {
  auto fail = [&](const std::string& msg) {
    if (rank == 0) std::fprintf(stderr, "%s: %s\n", program, msg.c_str());
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      return fail(std::string("usage: ") + program +
                  " [--min-bytes 8] [--max-bytes 32M] [--iters 20] [--warmup 5] [--json FILE]" +
                  usage_extra);
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
      const std::string err = extra ? extra(k, v) : "unknown";
      if (err == "unknown") return fail("unknown option " + k);
      if (!err.empty()) return fail(err);
    }
  }
  if (a->min_bytes > a->max_bytes) return fail("--min-bytes is larger than --max-bytes");
  return true;
}

/// Input of rank r at element i: a small integer, so that sums are exact in any order.
inline float input_value(int r, uint64_t i) {
  return static_cast<float>(((r + 1) * 7 + i) % 13) - 6.0f;
}

/// The sum over `ranks` ranks of input_value at element i.
inline float expected_sum(int ranks, uint64_t i) {
  float ref = 0.0f;
  for (int r = 0; r < ranks; ++r) ref += input_value(r, i);
  return ref;
}

/// The sizes of a sweep: doubling from min_bytes to max_bytes.
inline std::vector<uint64_t> sweep_bytes(const Args& a) {
  std::vector<uint64_t> out;
  for (uint64_t b = a.min_bytes; b <= a.max_bytes; b *= 2) {
    out.push_back(b);
    if (b > a.max_bytes / 2) break;  // no overflow past the largest size
  }
  return out;
}

/// Median of the per-call times (each the slowest rank's), in seconds.
inline double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const size_t m = t.size();
  return m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2]);
}

struct Row {
  uint64_t bytes, count;
  double time_us, algbw, busbw;
  uint64_t wrong;
};

/// A row from the median call time of `count` floats among `ranks` ranks (nccl-tests' busbw).
inline Row make_row(uint64_t count, double median_seconds, int ranks, uint64_t wrong) {
  const double algbw = static_cast<double>(count * sizeof(float)) / median_seconds * 1e-9;
  return {count * sizeof(float),
          count,
          median_seconds * 1e6,
          algbw,
          algbw * 2.0 * (ranks - 1) / ranks,
          wrong};
}

inline void print_header(const std::string& what, int ranks, const Args& a) {
  std::printf(
      "# %s, %d ranks, f32 sum, out of place; time: median over %d calls of the slowest rank's "
      "time, after %d warmup calls; busbw = algbw * 2(n-1)/n\n",
      what.c_str(), ranks, a.iters, a.warmup);
  std::printf("%12s %12s %6s %6s %12s %10s %10s %8s\n", "size(B)", "count", "type", "redop",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

inline void print_row(const Row& r) {
  std::printf("%12llu %12llu %6s %6s %12.2f %10.3f %10.3f %8llu\n",
              static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.count),
              "float", "sum", r.time_us, r.algbw, r.busbw,
              static_cast<unsigned long long>(r.wrong));
  std::fflush(stdout);
}

/// Writes the rows as JSON to `path` ("-": stdout) with `fields` (a JSON object's members,
/// without braces) first. Returns false (after a message) when the file cannot be written.
inline bool write_json(const std::string& path, const std::string& fields, const Args& a, int ranks,
                       const std::vector<Row>& rows) {
  FILE* f = path == "-" ? stdout : std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  std::fprintf(f,
               "{%s, \"ranks\": %d, \"op\": \"all_reduce\", \"dtype\": \"f32\", \"reduce\": "
               "\"sum\", \"iters\": %d, \"warmup\": %d, \"time_statistic\": \"median over calls "
               "of the slowest rank\", \"busbw_factor\": %.17g, \"rows\": [",
               fields.c_str(), ranks, a.iters, a.warmup, 2.0 * (ranks - 1) / ranks);
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
  return true;
}

}  // namespace vtpu::allreduce_bench
