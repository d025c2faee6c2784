// Tests for memory/hbm_device.h: arena limits in bytes and as fractions of the device total.
#include "vtpu/memory/hbm_device.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/units.h"

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

}  // namespace
}  // namespace vtpu
