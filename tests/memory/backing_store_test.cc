// Tests for memory/backing_store.h: lazy commit, resident_bytes and release.
#include "vtpu/memory/backing_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "vtpu/common/units.h"

namespace vtpu {
namespace {

uint64_t page_bytes() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }

TEST(BackingStoreTest, ZeroBytesHasNoMapping) {
  BackingStore store(0);
  EXPECT_EQ(store.data(), nullptr);
  EXPECT_EQ(store.size_bytes(), 0u);
  EXPECT_EQ(store.resident_bytes(), 0u);
  store.release(0, 4096);  // no-op, no crash
}

TEST(BackingStoreTest, PagesBecomeResidentOnlyWhenTouched) {
  const uint64_t page = page_bytes();
  BackingStore store(64 * page);
  ASSERT_NE(store.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(store.data()) % page, 0u);
  EXPECT_EQ(store.resident_bytes(), 0u);
  store.data()[0] = std::byte{1};
  store.data()[10 * page + 5] = std::byte{2};
  store.data()[63 * page] = std::byte{3};
  // Three pages (or, with transparent huge pages, whatever the kernel chose up to the range).
  EXPECT_GE(store.resident_bytes(), 3 * page);
  EXPECT_LE(store.resident_bytes(), 64 * page);
  EXPECT_EQ(store.data()[10 * page + 5], std::byte{2});
}

TEST(BackingStoreTest, ReleaseDropsWholePagesOnlyAndTheyReadAsZero) {
  const uint64_t page = page_bytes();
  BackingStore store(8 * page);
  for (uint64_t i = 0; i < 8 * page; ++i) store.data()[i] = std::byte{0x7F};
  EXPECT_EQ(store.resident_bytes(), 8 * page);
  // [100, page + 100) contains no whole page: nothing changes.
  store.release(100, page);
  EXPECT_EQ(store.resident_bytes(), 8 * page);
  EXPECT_EQ(store.data()[100], std::byte{0x7F});
  // [page - 1, 4 * page + 1) contains pages 1, 2 and 3.
  store.release(page - 1, 3 * page + 2);
  EXPECT_EQ(store.resident_bytes(), 5 * page);
  EXPECT_EQ(store.data()[page - 1], std::byte{0x7F});
  EXPECT_EQ(store.data()[page], std::byte{0});
  EXPECT_EQ(store.data()[4 * page - 1], std::byte{0});
  EXPECT_EQ(store.data()[4 * page], std::byte{0x7F});
}

}  // namespace
}  // namespace vtpu
