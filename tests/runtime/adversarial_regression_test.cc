// Regression tests from adversarial testing of the runtime over the HBM subsystem: host threads
// and core programs sharing arenas (run under TSan), buffers outliving the runtime, an OOM on one
// core, and malformed runtime option files.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "vtpu/common/error.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/runtime/runtime_options.h"
#include "tests/temp_path.h"

namespace vtpu {
namespace {

TEST(AdversarialRuntimeTest, ConcurrentHostAndCoresOnArenas) {
  RuntimeOptions o;
  o.num_cores = 4;
  o.hbm_bytes_per_core = 4 << 20;
  o.hbm_memory_fraction = 0.75;
  Runtime rt(o);
  std::atomic<bool> stop{false};
  std::atomic<int> corrupt{0};
  std::thread host([&] {
    std::mt19937 rng(3);
    int n = 0;
    while (!stop) {
      const int c = rng() % 4;
      try {
        DeviceBuffer b = rt.allocate(c, 1 + rng() % 50000, "host");
        {
          BufferPin pin = b.pin();
          std::memset(b.data(), 0x5A, b.size_bytes());
        }
        (void)rt.memory_chunk_records();
        (void)rt.core(c).hbm().memory_stats();
        (void)rt.core(c).hbm().occupancy_map();
        if (++n % 16 == 0) rt.core(c).hbm().defragment();
        if (n % 64 == 0) rt.save_device_memory_profile(test_temp_path("adversarial_rt.prof"));
        BufferPin pin = b.pin();
        for (uint64_t i = 0; i < b.size_bytes(); ++i)
          if (static_cast<uint8_t>(b.data()[i]) != 0x5A) {
            ++corrupt;
            break;
          }
      } catch (const OutOfMemoryError&) {
      }
    }
  });
  for (int round = 0; round < 20; ++round) {
    rt.run_spmd([&](CoreContext& ctx) {
      std::mt19937 rng(ctx.core_id() * 100 + round);
      std::vector<std::pair<DeviceBuffer, uint8_t>> bufs;
      for (int i = 0; i < 200; ++i) {
        if (rng() % 3 != 0 || bufs.empty()) {
          try {
            DeviceBuffer b = ctx.allocate(1 + rng() % 30000, "core");
            const uint8_t v = static_cast<uint8_t>(rng());
            {
              BufferPin pin = b.pin();
              std::memset(b.data(), v, b.size_bytes());
            }
            bufs.emplace_back(std::move(b), v);
          } catch (const OutOfMemoryError&) {
          }
        } else {
          const size_t k = rng() % bufs.size();
          BufferPin pin = bufs[k].first.pin();
          const std::byte* d = bufs[k].first.data();
          for (uint64_t j = 0; j < bufs[k].first.size_bytes(); ++j)
            if (static_cast<uint8_t>(d[j]) != bufs[k].second) {
              ++corrupt;
              break;
            }
          pin.reset();
          bufs.erase(bufs.begin() + static_cast<std::ptrdiff_t>(k));
        }
        if (i % 50 == 0) ctx.hbm().defragment();
      }
    });
  }
  stop = true;
  host.join();
  EXPECT_EQ(corrupt.load(), 0);
  for (int c = 0; c < 4; ++c) {
    rt.core(c).hbm().check_consistency();
    EXPECT_EQ(rt.core(c).hbm().memory_stats().bytes_in_use, 0u);
  }
}

TEST(AdversarialRuntimeTest, BuffersOutliveRuntimeAndDevice) {
  DeviceBuffer keep;
  BufferPin pin;
  {
    RuntimeOptions o;
    o.num_cores = 2;
    o.hbm_bytes_per_core = 1 << 20;
    o.hbm_memory_fraction = 0.5;
    Runtime rt(o);
    keep = rt.allocate(1, 1000, "survivor");
    pin = keep.pin();
  }
  std::memset(keep.data(), 1, 1000);
  EXPECT_EQ(keep.arena()->capacity_bytes(), 512u * 1024u);
  pin.reset();
  keep.reset();
}

TEST(AdversarialRuntimeTest, OomOnOneCoreDoesNotPoisonOthers) {
  RuntimeOptions o;
  o.num_cores = 8;
  o.hbm_bytes_per_core = 64 << 10;
  Runtime rt(o);
  for (int round = 0; round < 3; ++round) {
    try {
      rt.run_spmd([](CoreContext& ctx) {
        DeviceBuffer b = ctx.allocate(ctx.core_id() == 3 ? (1 << 20) : 1024, "x");
      });
      ADD_FAILURE() << "expected OOM";
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.report().core_id, 3);
    }
  }
  for (int c = 0; c < 8; ++c) EXPECT_EQ(rt.core(c).hbm().memory_stats().bytes_in_use, 0u);
}

// A config whose value nests deeper than any option used to crash `vtpu train mlp --config` with a
// stack overflow when the error message quoted the value.
TEST(AdversarialRuntimeTest, DeeplyNestedOptionsFileIsAnInvalidArgument) {
  const std::string path = test_temp_path("adversarial_deep_options.json");
  {
    std::ofstream out(path);
    out << "{\"hbm_memory_fraction\": " << std::string(200000, '[') << std::string(200000, ']')
        << "}";
  }
  EXPECT_THROW(RuntimeOptions::load_json_file(path), InvalidArgumentError);
  {
    std::ofstream out(path);
    out << "{\"hbm_memory_fraction\": 1e400}";
  }
  EXPECT_THROW(RuntimeOptions::load_json_file(path), InvalidArgumentError);
  {
    std::ofstream out(path);
    out << "{\"hbm_memory_fraction\": 0.5, \"auto_defragment\": false, \"allocator\": \"tlsf\"}";
  }
  const RuntimeOptions o = RuntimeOptions::load_json_file(path);
  EXPECT_EQ(o.hbm_memory_fraction, 0.5);
  EXPECT_FALSE(o.auto_defragment);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace vtpu
