// Tests for memory/hbm_device.h: arena limits in bytes and as fractions of the device total.
#include "vtpu/memory/hbm_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/hbm_arena.h"

namespace vtpu {
namespace {

ArenaOptions metadata_only() {
  ArenaOptions o;
  o.backing = false;
  return o;
}

// The example: a 10000 MiB device, six arenas of fraction 0.15 get 1500 MiB each, a
// seventh fails at creation, and a 1600 MiB allocation fails against one arena's limit.
TEST(HbmDeviceTest, FractionOfTotalExample) {
  HbmDevice device(10000 * kMiB, /*core_id=*/2);
  std::vector<std::shared_ptr<HbmArena>> arenas;
  for (int i = 0; i < 6; ++i) {
    ArenaOptions o = metadata_only();
    o.name = "pool" + std::to_string(i);
    arenas.push_back(device.create_arena(ArenaLimit::fraction(0.15), o));
    EXPECT_EQ(arenas.back()->capacity_bytes(), 1500 * kMiB);
    EXPECT_EQ(arenas.back()->core_id(), 2);
  }
  EXPECT_EQ(device.reserved_bytes(), 9000 * kMiB);
  EXPECT_EQ(device.num_arenas(), 6);
  try {
    ArenaOptions o = metadata_only();
    o.name = "pool6";
    device.create_arena(ArenaLimit::fraction(0.15), o);
    FAIL() << "a seventh 15% arena was created";
  } catch (const ResourceExhaustedError& e) {
    const std::string what = e.what();
    for (const char* needle : {"'pool6'", "1.46 GiB", "fraction 0.15", "core 2", "9.77 GiB",
                               "6 live arena(s)", "8.79 GiB", "never of what is free"}) {
      EXPECT_NE(what.find(needle), std::string::npos) << "missing '" << needle << "' in " << what;
    }
  }
  try {
    arenas[0]->allocate(1600 * kMiB, "too big");
    FAIL() << "1600 MiB fit in a 1500 MiB arena";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().bytes_limit, 1500 * kMiB);
    EXPECT_NE(std::string(e.what()).find("exceeds the arena's limit"), std::string::npos)
        << e.what();
  }
  // Releasing an arena returns its share; the fraction is still of the total, so a new 15%
  // arena gets 1500 MiB again even though only 1500 MiB are free.
  arenas.pop_back();
  EXPECT_EQ(device.reserved_bytes(), 7500 * kMiB);
  auto again = device.create_arena(ArenaLimit::fraction(0.15), metadata_only());
  EXPECT_EQ(again->capacity_bytes(), 1500 * kMiB);
  EXPECT_EQ(device.num_arenas(), 6);
}

TEST(HbmDeviceTest, AbsoluteLimitsAndMixing) {
  HbmDevice device(1 * kGiB, 0);
  auto a = device.create_arena(ArenaLimit::bytes(256 * kMiB), metadata_only());
  auto b = device.create_arena(ArenaLimit::fraction(0.75), metadata_only());
  EXPECT_EQ(a->capacity_bytes(), 256 * kMiB);
  EXPECT_EQ(b->capacity_bytes(), 768 * kMiB);
  EXPECT_THROW(device.create_arena(ArenaLimit::bytes(1), metadata_only()), ResourceExhaustedError);
  b.reset();
  EXPECT_EQ(device.reserved_bytes(), 256 * kMiB);
  // An arena may outlive its device object and still release cleanly.
  std::shared_ptr<HbmArena> survivor;
  {
    HbmDevice scoped(1 * kMiB, 1);
    survivor = scoped.create_arena(ArenaLimit::bytes(4096), metadata_only());
  }
  EXPECT_EQ(survivor->allocate(100), 1u);
}

TEST(HbmDeviceTest, InvalidLimits) {
  EXPECT_THROW(ArenaLimit::fraction(0.0), InvalidArgumentError);
  EXPECT_THROW(ArenaLimit::fraction(-0.5), InvalidArgumentError);
  EXPECT_THROW(ArenaLimit::fraction(1.5), InvalidArgumentError);
  EXPECT_THROW(ArenaLimit::fraction(std::nan("")), InvalidArgumentError);
  EXPECT_THROW(ArenaLimit::bytes(0), InvalidArgumentError);
  EXPECT_THROW(HbmDevice(0, 0), InvalidArgumentError);
  HbmDevice device(1 * kMiB, 0);
  try {
    device.create_arena(ArenaLimit::bytes(2 * kMiB), metadata_only());
    FAIL();
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("between 1 byte and the device's 1.00 MiB"),
              std::string::npos)
        << e.what();
  }
  // A failed arena constructor (a capacity below BFC's 256 B chunk) releases its reservation.
  EXPECT_THROW(device.create_arena(ArenaLimit::bytes(100), metadata_only()), InvalidArgumentError);
  EXPECT_EQ(device.reserved_bytes(), 0u);
  EXPECT_EQ(device.num_arenas(), 0);
}

TEST(HbmDeviceTest, FractionOneTakesTheWholeDevice) {
  HbmDevice device(16 * kGiB, 0);
  auto all = device.create_arena(ArenaLimit::fraction(1.0), metadata_only());
  EXPECT_EQ(all->capacity_bytes(), 16 * kGiB);
  EXPECT_EQ(ArenaLimit::fraction(0.15).to_string(), "fraction 0.15");
  EXPECT_EQ(ArenaLimit::bytes(1500 * kMiB).to_string(), "1.46 GiB");
}

// Regression: ArenaLimit::resolve rounded through llroundl, whose long long cannot hold totals
// >= 2^63, so every fraction of such a device resolved to 2^63.
TEST(HbmDeviceTest, FractionsOfTotalsAbove2To63ResolveExactly) {
  constexpr uint64_t kMax = ~uint64_t{0};
  EXPECT_EQ(ArenaLimit::fraction(1.0).resolve(kMax), kMax);
  EXPECT_EQ(ArenaLimit::fraction(1.0).resolve(uint64_t{1} << 63), uint64_t{1} << 63);
  EXPECT_EQ(ArenaLimit::fraction(0.75).resolve(uint64_t{1} << 63), uint64_t{3} << 61);
  EXPECT_EQ(ArenaLimit::fraction(0.5).resolve(kMax - 1), kMax / 2);
  EXPECT_EQ(ArenaLimit::fraction(0.9999999).resolve(1000), 1000u);
  EXPECT_EQ(ArenaLimit::fraction(1e-300).resolve(kMax), 0u);
  HbmDevice device(kMax, 0);
  ArenaOptions o;
  o.backing = false;
  auto arena = device.create_arena(ArenaLimit::fraction(1.0), o);
  EXPECT_EQ(device.reserved_bytes(), kMax);
  EXPECT_EQ(arena->capacity_bytes(), kMax / 256 * 256);
  EXPECT_THROW(device.create_arena(ArenaLimit::bytes(1), o), ResourceExhaustedError);
}

// Fractions outside (0, 1] and limits that resolve below one 256-byte chunk reserve nothing; an
// arena keeps working after its device is gone.
TEST(HbmDeviceTest, BadFractionsAreRejectedAndArenasOutliveTheDevice) {
  for (double f :
       {std::nan(""), 0.0, -0.0, -1e-9, 1.0000001, std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(ArenaLimit::fraction(f), InvalidArgumentError) << f;
  }
  HbmDevice device(1000, 2);
  ArenaOptions o;
  o.backing = false;
  EXPECT_THROW(device.create_arena(ArenaLimit::fraction(1e-300), o), InvalidArgumentError);
  EXPECT_THROW(device.create_arena(ArenaLimit::bytes(100), o), InvalidArgumentError);  // < 256 B
  EXPECT_EQ(device.reserved_bytes(), 0u);
  EXPECT_EQ(device.num_arenas(), 0);
  std::shared_ptr<HbmArena> survivor;
  {
    HbmDevice d(1 << 20, 3);
    survivor = d.create_arena(ArenaLimit::fraction(0.5));
  }
  const BufferId id = survivor->allocate(1000);
  std::memset(survivor->data(id), 7, 1000);
  survivor->free(id);
}

// Eight threads create and drop arenas of 20% of one device: reservations never leak.
TEST(HbmDeviceTest, ManyThreadsCreateAndDropArenas) {
  HbmDevice device(64 << 20, 0);
  std::vector<std::thread> threads;
  std::atomic<int> created{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      ArenaOptions o;
      o.backing = false;
      for (int i = 0; i < 200; ++i) {
        try {
          auto arena = device.create_arena(ArenaLimit::fraction(0.2), o);
          ++created;
          arena->free(arena->allocate(1000));
        } catch (const ResourceExhaustedError&) {
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_GT(created.load(), 0);
  EXPECT_EQ(device.reserved_bytes(), 0u);
  EXPECT_EQ(device.num_arenas(), 0);
}

}  // namespace
}  // namespace vtpu
