// Shared by the distributed tests: runtimes of 8 global cores (2 x 4 on np 2, 4 x 2 on np 4),
// replica groups that span processes, deterministic inputs, and a runner that runs a list of
// collective cases on a runtime. A test runs the same cases on the distributed runtime and on a
// one-process runtime of the same 8 cores inside the same process and compares the bytes of every
// local core: the one-process run is the reference the distributed one must match bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "tests/collectives/test_util.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/distributed/distributed.h"

namespace vtpu::distributed_test {

/// Global cores of every distributed test: a multiple of 2 and 4 processes.
constexpr int kCores = 8;
/// `cores` cores of 64 MiB HBM, a 20 s collective timeout, the default links.
inline RuntimeOptions default_link_options(int cores) {
  RuntimeOptions o;
  o.num_cores = cores;
  o.hbm_bytes_per_core = uint64_t{1} << 26;
  o.collective_timeout = std::chrono::milliseconds(20000);
  return o;
}

/// Small slots, so that the larger counts below cross many slots (and the MPI back-pressure).
constexpr uint64_t kSlotBytes = 4096;

inline RuntimeOptions options(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  RuntimeOptions o;
  o.num_cores = kCores;
  o.hbm_bytes_per_core = uint64_t{1} << 26;
  o.link_slot_bytes = kSlotBytes;
  o.collective_timeout = timeout;
  // Several processes share the CPUs: pinned threads of every process would pile onto CPU 0.
  o.pin_threads = "off";
  return o;
}

/// A partition of the 8 cores into replica groups; every core calls its group's collectives.
struct Partition {
  std::string name;
  std::vector<std::vector<int>> groups;
};
inline void PrintTo(const Partition& p, std::ostream* os) { *os << p.name; }

/// Groups that span processes on np 2 (cores 0-3 | 4-7) and np 4 (0-1 | 2-3 | 4-5 | 6-7): the
/// whole mesh, one core per process (np 2: {0,4}; np 4: {0,2,4,6}), ranks interleaved across
/// processes and out of core order, and halves (inside one process on np 2, so the distributed
/// runtime's in-process links and direct access are covered too).
inline std::vector<Partition> partitions() {
  return {
      {"all", {{0, 1, 2, 3, 4, 5, 6, 7}}},       {"pairs", {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {"strided", {{0, 2, 4, 6}, {1, 3, 5, 7}}}, {"interleaved", {{5, 0, 6, 1}, {7, 2, 4, 3}}},
      {"halves", {{0, 1, 2, 3}, {4, 5, 6, 7}}},
  };
}

constexpr std::array<DataType, 6> kDtypes = {ElementType::kF32,  ElementType::kF64,
                                             ElementType::kBf16, ElementType::kF16,
                                             ElementType::kS32,  ElementType::kS64};
constexpr std::array<ReduceOp, 4> kOps = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin,
                                          ReduceOp::kProd};
/// Element counts: none, one, odd, and (as 8-byte elements) about 2 and 10 slots of 4 KiB.
constexpr std::array<int64_t, 5> kCounts = {0, 1, 7, 1001, 5003};

/// `count` elements of `dtype` from `seed`: values that differ in every low bit, so that a fold
/// in another order changes float sums; near 1 for kProd, so that products stay finite.
inline std::vector<std::byte> make_input(DataType dtype, uint64_t count, uint64_t seed,
                                         ReduceOp op = ReduceOp::kSum) {
  std::vector<std::byte> out(count * data_type_bytes(dtype));
  visit_data_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = reinterpret_cast<T*>(out.data());
    uint64_t h = seed * 0x9e3779b97f4a7c15ull + 1;
    for (uint64_t i = 0; i < count; ++i) {
      h ^= h >> 29;
      h *= 0xbf58476d1ce4e5b9ull;
      h ^= h >> 32;
      const double r = static_cast<double>(static_cast<int64_t>(h % 2001) - 1000);
      if constexpr (std::is_integral_v<T>) {
        p[i] = static_cast<T>(op == ReduceOp::kProd ? static_cast<int64_t>(h % 5) - 2 : r);
      } else {
        p[i] =
            testing_util::from_double<T>(op == ReduceOp::kProd ? 1.0 + r / 4096.0 : r / 3.0 + 1e-3);
      }
    }
  });
  return out;
}

/// One collective of a core in its communicator: returns the bytes the core ends up with.
struct Case {
  std::string name;
  std::function<std::vector<std::byte>(Communicator&, CoreContext&)> run;
};

/// outputs[case][core]; cores of other processes stay empty.
using Outputs = std::vector<std::vector<std::vector<std::byte>>>;

/// Runs every case in order on every local core of `runtime`, each core in its group of `p`, in
/// one run_spmd (the communicators are made anew for the call).
inline Outputs run_cases(Runtime& runtime, const Partition& p, const std::vector<Case>& cases) {
  auto comms = Communicator::for_groups(runtime, p.groups);
  Outputs out(cases.size(), std::vector<std::vector<std::byte>>(kCores));
  runtime.run_spmd([&](CoreContext& ctx) {
    Communicator* comm = nullptr;
    for (auto& c : comms) {
      for (int core : c->group()) {
        if (core == ctx.core_id()) comm = c.get();
      }
    }
    if (!comm) return;
    for (size_t i = 0; i < cases.size(); ++i) {
      out[i][static_cast<size_t>(ctx.core_id())] = cases[i].run(*comm, ctx);
    }
  });
  return out;
}

/// Runs `cases` on the distributed runtime and on a one-process runtime of the same cores and
/// expects the same bytes on every local core. Never stops early (EXPECT, not ASSERT): every
/// process must make the same collectives whatever it finds.
inline void expect_same_as_one_process(Runtime& dist, Runtime& one, const Partition& p,
                                       const std::vector<Case>& cases) {
  const Outputs got = run_cases(dist, p, cases);
  const Outputs want = run_cases(one, p, cases);
  int mismatches = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    for (int c : dist.local_core_ids()) {
      const auto& g = got[i][static_cast<size_t>(c)];
      const auto& w = want[i][static_cast<size_t>(c)];
      const bool same =
          g.size() == w.size() && (g.empty() || std::memcmp(g.data(), w.data(), g.size()) == 0);
      if (!same && ++mismatches <= 10) {
        ADD_FAILURE() << p.name << " " << cases[i].name << " core " << c << ": " << g.size()
                      << " bytes differ from the one-process run's " << w.size();
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << p.name << ": cases whose bytes differ from one process";
}

inline std::string case_name(std::string_view what, DataType dtype, int64_t count) {
  return std::string(what) + " " + std::string(data_type_name(dtype)) + "[" +
         std::to_string(count) + "]";
}

/// Every process's value of `mine` (host all_gather), indexed by process.
inline std::vector<int64_t> gather(Runtime& rt, int64_t mine) {
  const auto all = rt.process_group().all_gather(std::as_bytes(std::span<const int64_t>(&mine, 1)));
  std::vector<int64_t> out;
  for (const auto& b : all) {
    int64_t v = 0;
    std::memcpy(&v, b.data(), sizeof v);
    out.push_back(v);
  }
  return out;
}

}  // namespace vtpu::distributed_test
