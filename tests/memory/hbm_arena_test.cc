// Tests for memory/hbm_arena.h: stats with JAX's keys, data access with and without backing, lazy
// backing of large arenas, out-of-memory reports, and randomized operations against an independent
// model with check_consistency() after every step.
#include "vtpu/memory/hbm_arena.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/expect_error.h"
#include "tests/memory/bfc_reference_model.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/backing_store.h"
#include "vtpu/memory/bfc_policy.h"
#include "vtpu/memory/memory_profile.h"

namespace vtpu {
namespace {

using testing::BfcReferenceModel;

ArenaOptions metadata_only(uint64_t capacity_bytes) {
  ArenaOptions o;
  o.capacity_bytes = capacity_bytes;
  o.backing = false;
  return o;
}

ArenaOptions backed(uint64_t capacity_bytes) {
  ArenaOptions o;
  o.capacity_bytes = capacity_bytes;
  o.backing = true;
  return o;
}

// Expects `fn` to throw InvalidArgumentError whose what() contains `needle`.
template <typename Fn>
void expect_invalid_argument(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no exception (expected InvalidArgumentError with '" << needle << "')";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HbmArenaTest, DefaultOptions) {
  const ArenaOptions o;
  EXPECT_EQ(o.capacity_bytes, 16 * kGiB);
  EXPECT_EQ(o.policy, "bfc");
  EXPECT_TRUE(o.backing);
  EXPECT_FALSE(o.poison_freed);
  EXPECT_EQ(o.core_id, 0);
}

TEST(HbmArenaTest, FreshArenaStats) {
  ArenaOptions o = metadata_only(kMiB + 100);  // rounded down to the 256-byte granule
  o.core_id = 5;
  HbmArena arena(o);
  EXPECT_EQ(arena.core_id(), 5);
  EXPECT_EQ(arena.capacity_bytes(), kMiB);
  EXPECT_EQ(arena.policy_name(), "bfc");
  EXPECT_FALSE(arena.has_backing());
  const MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.peak_bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_limit, kMiB);
  EXPECT_EQ(s.largest_alloc_size, 0u);
  EXPECT_EQ(s.largest_free_block_bytes, kMiB);
  EXPECT_EQ(s.num_allocs, 0u);
  EXPECT_EQ(s.num_frees, 0u);
  EXPECT_EQ(s.num_live_buffers, 0u);
  EXPECT_EQ(s.padded_bytes_in_use, 0u);
  EXPECT_EQ(s.total_free_bytes, kMiB);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
  arena.check_consistency();
}

TEST(HbmArenaTest, ConstructorErrors) {
  expect_invalid_argument([] { HbmArena a(metadata_only(100)); }, "100");
  ArenaOptions o = metadata_only(kMiB);
  o.policy = "no-such-policy";
  expect_invalid_argument([&] { HbmArena a(o); }, "'no-such-policy'");
}

TEST(HbmArenaTest, StatsAfterAllocationsAndFrees) {
  HbmArena arena(metadata_only(kMiB));
  // 1000 B rounds to 1024; 1 MiB >= 2 KiB so the chunk is split.
  const BufferId a = arena.allocate(1000, "a");
  MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.bytes_in_use, 1024u);
  EXPECT_EQ(s.peak_bytes_in_use, 1024u);
  EXPECT_EQ(s.bytes_limit, kMiB);
  EXPECT_EQ(s.largest_alloc_size, 1024u);
  EXPECT_EQ(s.largest_free_block_bytes, kMiB - 1024);
  EXPECT_EQ(s.num_allocs, 1u);
  EXPECT_EQ(s.padded_bytes_in_use, 1000u);
  EXPECT_EQ(s.num_live_buffers, 1u);
  EXPECT_EQ(arena.size_bytes(a), 1000u);
  EXPECT_EQ(arena.offset(a), 0u);
  arena.check_consistency();

  const BufferId b = arena.allocate(3000, "b");  // rounds to 3072, at offset 1024
  EXPECT_NE(a, b);
  EXPECT_EQ(arena.offset(b), 1024u);
  s = arena.memory_stats();
  EXPECT_EQ(s.bytes_in_use, 4096u);
  EXPECT_EQ(s.peak_bytes_in_use, 4096u);
  EXPECT_EQ(s.largest_alloc_size, 3072u);
  EXPECT_EQ(s.largest_free_block_bytes, kMiB - 4096);
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_EQ(s.padded_bytes_in_use, 4000u);
  arena.check_consistency();

  arena.free(a);  // leaves a 1 KiB hole before b
  s = arena.memory_stats();
  EXPECT_EQ(s.bytes_in_use, 3072u);
  EXPECT_EQ(s.peak_bytes_in_use, 4096u);
  EXPECT_EQ(s.largest_alloc_size, 3072u);
  EXPECT_EQ(s.largest_free_block_bytes, kMiB - 4096);
  EXPECT_EQ(s.total_free_bytes, kMiB - 3072);
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_EQ(s.num_frees, 1u);
  EXPECT_EQ(s.num_live_buffers, 1u);
  EXPECT_EQ(s.padded_bytes_in_use, 3000u);
  // fragmentation = 1 - 1044480 / 1045504 = 1024 / 1045504
  EXPECT_NEAR(s.fragmentation(), 1024.0 / 1045504.0, 1e-15);
  arena.check_consistency();

  arena.free(b);
  s = arena.memory_stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.peak_bytes_in_use, 4096u);
  EXPECT_EQ(s.largest_free_block_bytes, kMiB);
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_EQ(s.num_frees, 2u);
  EXPECT_EQ(s.num_live_buffers, 0u);
  EXPECT_EQ(s.padded_bytes_in_use, 0u);
  arena.check_consistency();

  // Ids are never reused.
  const BufferId c = arena.allocate(1);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
}

TEST(HbmArenaTest, UnsplitChunkCountsWholeInBytesInUse) {
  ArenaOptions o = metadata_only(kMiB);
  o.policy_options.max_internal_fragmentation_bytes = 128 * kMiB;  // TensorFlow's value
  HbmArena arena(o);
  // 600 KiB < 1 MiB < 2 * 600 KiB and the 424 KiB remainder < 128 MiB: the whole 1 MiB goes.
  const BufferId id = arena.allocate(600 * kKiB);
  MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.bytes_in_use, kMiB);
  EXPECT_EQ(s.largest_alloc_size, kMiB);
  EXPECT_EQ(s.padded_bytes_in_use, 600 * kKiB);
  EXPECT_EQ(s.largest_free_block_bytes, 0u);
  EXPECT_EQ(s.total_free_bytes, 0u);
  EXPECT_THROW(arena.allocate(1), OutOfMemoryError);
  s = arena.memory_stats();
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.num_allocs, 1u);
  arena.check_consistency();
  arena.free(id);
  EXPECT_EQ(arena.memory_stats().bytes_in_use, 0u);
}

TEST(HbmArenaTest, MemoryStatsJsonHasJaxKeys) {
  HbmArena arena(metadata_only(kMiB));
  const BufferId a = arena.allocate(1000);
  arena.allocate(3000);
  arena.free(a);
  nlohmann::json j = arena.memory_stats();
  EXPECT_EQ(j.at("bytes_in_use").get<uint64_t>(), 3072u);
  EXPECT_EQ(j.at("peak_bytes_in_use").get<uint64_t>(), 4096u);
  EXPECT_EQ(j.at("bytes_limit").get<uint64_t>(), kMiB);
  EXPECT_EQ(j.at("largest_alloc_size").get<uint64_t>(), 3072u);
  EXPECT_EQ(j.at("largest_free_block_bytes").get<uint64_t>(), kMiB - 4096);
  EXPECT_EQ(j.at("num_allocs").get<uint64_t>(), 2u);
  EXPECT_EQ(j.at("num_frees").get<uint64_t>(), 1u);
  EXPECT_EQ(j.at("num_live_buffers").get<uint64_t>(), 1u);
  EXPECT_EQ(j.at("padded_bytes_in_use").get<uint64_t>(), 3000u);
  EXPECT_EQ(j.at("total_free_bytes").get<uint64_t>(), kMiB - 3072);
  EXPECT_EQ(j.at("num_ooms").get<uint64_t>(), 0u);
  EXPECT_NEAR(j.at("fragmentation").get<double>(), 1024.0 / 1045504.0, 1e-15);
  EXPECT_EQ(j.at("logical_bytes_in_use").get<uint64_t>(), 3000u);
  // PJRT's reservation and pool keys: nothing is reserved, and the pool is the whole capacity.
  EXPECT_EQ(j.at("bytes_reserved").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("peak_bytes_reserved").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("bytes_reservable_limit").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("pool_bytes").get<uint64_t>(), kMiB);
  EXPECT_EQ(j.at("peak_pool_bytes").get<uint64_t>(), kMiB);
  EXPECT_EQ(j.at("num_fragmentation_ooms").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("num_defragmentations").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("defrag_buffers_moved").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("defrag_bytes_moved").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("defrag_time_ns").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("pending_free_buffers").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("pending_free_bytes").get<uint64_t>(), 0u);
  EXPECT_EQ(j.size(), 25u);
}

TEST(HbmArenaTest, TryAllocateReportsPlacementAndNeverThrowsForSpace) {
  ArenaOptions o = metadata_only(1 * kMiB);
  o.auto_defragment = false;
  HbmArena arena(o);
  ArenaFreeSpace after;
  const auto a = arena.try_allocate(300 * kKiB, "a", &after);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(a->chunk_bytes, 300 * kKiB);  // a multiple of 256 B: no rounding
  EXPECT_EQ(after.bytes_in_use, 300 * kKiB);
  EXPECT_EQ(after.total_free_bytes, 724 * kKiB);
  EXPECT_EQ(after.largest_free_block_bytes, 724 * kKiB);
  const auto b = arena.try_allocate(300 * kKiB, "b");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->offset, 300 * kKiB);
  arena.free(a->id, &after);  // a 300 KiB hole below b, 424 KiB above it
  EXPECT_EQ(after.total_free_bytes, 724 * kKiB);
  EXPECT_EQ(after.largest_free_block_bytes, 424 * kKiB);
  EXPECT_FALSE(arena.try_allocate(500 * kKiB).has_value());  // fits in total free only
  EXPECT_FALSE(arena.try_allocate(2 * kMiB).has_value());
  const MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.num_ooms, 2u);
  EXPECT_EQ(s.num_fragmentation_ooms, 1u);
  const ArenaFreeSpace fs = arena.free_space();
  EXPECT_EQ(fs.bytes_in_use, 300 * kKiB);
  EXPECT_EQ(fs.num_defragmentations, 0u);
  EXPECT_THROW(arena.try_allocate(0), InvalidArgumentError);
}

TEST(HbmArenaTest, FragmentationRatio) {
  EXPECT_DOUBLE_EQ(fragmentation_ratio(0, 0), 0.0);
  EXPECT_DOUBLE_EQ(fragmentation_ratio(250, 1000), 0.75);
  EXPECT_DOUBLE_EQ(fragmentation_ratio(1000, 1000), 0.0);
}

TEST(HbmArenaTest, AllocateZeroAndUnknownIdsThrow) {
  HbmArena arena(metadata_only(kMiB));
  expect_invalid_argument([&] { arena.allocate(0, "empty"); }, "0 bytes");
  expect_invalid_argument([&] { arena.free(42); }, "42");
  expect_invalid_argument([&] { arena.data(42); }, "42");
  expect_invalid_argument([&] { arena.size_bytes(42); }, "42");
  expect_invalid_argument([&] { arena.offset(42); }, "42");
  const BufferId id = arena.allocate(100);
  arena.free(id);
  expect_invalid_argument([&] { arena.free(id); }, std::to_string(id));  // double free
  expect_invalid_argument([&] { arena.data(id); }, std::to_string(id));
  const MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.num_allocs, 1u);
  EXPECT_EQ(s.num_frees, 1u);
  EXPECT_EQ(s.num_ooms, 0u);
  arena.check_consistency();
}

// The live-buffer table reuses the slot of a freed buffer: the id of the freed buffer must not
// name the new one (the unordered_map it replaced never reused ids, and callers rely on that).
TEST(HbmArenaTest, StaleIdsOfReusedSlotsAreRejected) {
  HbmArena arena(metadata_only(4 * kMiB));
  const BufferId a = arena.allocate(100, "a");
  const BufferId b = arena.allocate(200, "b");
  EXPECT_EQ(a, 1u);  // before any free, ids are the allocation sequence numbers
  EXPECT_EQ(b, 2u);
  arena.pin(a);
  arena.free(a);                                // pinned: held until the unpin below
  arena.unpin(a);                               // releases a
  const auto c = arena.try_allocate(300, "c");  // takes a's slot
  ASSERT_TRUE(c.has_value());
  EXPECT_NE(c->id, a);
  EXPECT_EQ(c->seq, 3u);
  EXPECT_EQ(arena.size_bytes(c->id), 300u);
  expect_invalid_argument([&] { arena.free(a); }, std::to_string(a));
  expect_invalid_argument([&] { arena.size_bytes(a); }, std::to_string(a));
  arena.unpin(a);  // already released: a no-op, and it must not unpin c
  EXPECT_FALSE(arena.is_pinned(c->id));
  arena.pin(c->id);
  arena.unpin(a);
  EXPECT_TRUE(arena.is_pinned(c->id));
  // An id with c's slot and a later generation was never handed out.
  const BufferId future = c->id + (uint64_t{1} << 32);
  expect_invalid_argument([&] { arena.unpin(future); }, "never allocated");
  expect_invalid_argument([&] { arena.free(future); }, std::to_string(future));
  arena.unpin(c->id);
  arena.free(c->id);
  arena.free(b);
  // Many reuses of few slots: no id repeats, and the chunk records' alloc_seq count on.
  std::set<BufferId> seen = {a, b, c->id};
  for (int i = 0; i < 20000; ++i) {
    const auto p = arena.try_allocate(64 + i % 7);
    ASSERT_TRUE(p.has_value());
    ASSERT_TRUE(seen.insert(p->id).second) << "id " << p->id << " reused at " << i;
    ASSERT_EQ(p->seq, 4u + static_cast<uint64_t>(i));
    if (i % 3 != 2) arena.free(p->id);
  }
  const MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.num_live_buffers, 6666u);  // i = 2, 5, ..., 19997
  uint64_t max_seq = 0;
  for (const MemoryChunkRecord& r : arena.chunk_records()) max_seq = std::max(max_seq, r.alloc_seq);
  EXPECT_EQ(max_seq, 4u + 19997u);  // the last live one, i = 19997
  arena.check_consistency();
}

TEST(HbmArenaTest, MetadataOnlyArenaReturnsNullData) {
  HbmArena arena(metadata_only(kMiB));
  const BufferId id = arena.allocate(4096);
  EXPECT_EQ(arena.data(id), nullptr);
}

TEST(HbmArenaTest, BackedDataWritesAndReads) {
  HbmArena arena(backed(kMiB));
  ASSERT_TRUE(arena.has_backing());
  const BufferId a = arena.allocate(1000);
  const BufferId b = arena.allocate(5000);
  const BufferId c = arena.allocate(300);
  std::byte* pa = arena.data(a);
  std::byte* pb = arena.data(b);
  std::byte* pc = arena.data(c);
  ASSERT_NE(pa, nullptr);
  // Addresses follow offsets within one contiguous range, 256-byte aligned.
  EXPECT_EQ(pb - pa, static_cast<std::ptrdiff_t>(arena.offset(b) - arena.offset(a)));
  EXPECT_EQ(pc - pa, static_cast<std::ptrdiff_t>(arena.offset(c) - arena.offset(a)));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pa) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pb) % 256, 0u);
  for (size_t i = 0; i < 1000; ++i) pa[i] = std::byte(i % 251);
  for (size_t i = 0; i < 5000; ++i) pb[i] = std::byte((i * 7) % 253);
  for (size_t i = 0; i < 300; ++i) pc[i] = std::byte(0xC3);
  arena.free(b);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(pa[i], std::byte(i % 251)) << i;
  for (size_t i = 0; i < 300; ++i) ASSERT_EQ(pc[i], std::byte(0xC3)) << i;
  // A new buffer in b's old place is writable without disturbing its neighbours.
  const BufferId d = arena.allocate(5000);
  EXPECT_EQ(arena.offset(d), arena.offset(a) + 1024);
  std::byte* pd = arena.data(d);
  for (size_t i = 0; i < 5000; ++i) pd[i] = std::byte(0x5A);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(pa[i], std::byte(i % 251)) << i;
  for (size_t i = 0; i < 300; ++i) ASSERT_EQ(pc[i], std::byte(0xC3)) << i;
  arena.check_consistency();
}

TEST(HbmArenaTest, PoisonFreedFillsTheFreedBytesWith0xDB) {
  ArenaOptions o = backed(64 * kKiB);
  o.poison_freed = true;
  HbmArena arena(o);
  const BufferId a = arena.allocate(1000);  // chunk [0, 1024)
  std::byte* p = arena.data(a);
  std::fill(p, p + 1000, std::byte(0x11));
  arena.free(a);
  const BufferId b = arena.allocate(1024);  // best fit, lowest offset: the same bytes
  ASSERT_EQ(arena.offset(b), 0u);
  std::byte* q = arena.data(b);
  // The requested 1000 bytes rounded to the 256-byte granule are poisoned.
  for (size_t i = 0; i < 1024; ++i) ASSERT_EQ(q[i], std::byte(0xDB)) << i;
}

TEST(HbmArenaTest, PoisonSkipsTheUnsplitRemainderOfAChunk) {
  ArenaOptions o = backed(64 * kKiB);
  o.poison_freed = true;
  o.policy_options.max_internal_fragmentation_bytes = 128 * kMiB;  // TensorFlow's value
  HbmArena arena(o);
  // 40 KiB of a 64 KiB chunk: 64 < 2 * 40 and the remainder is small, so the whole chunk is
  // handed out; only the 40 KiB asked for are poisoned on free, the never-used 24 KiB stay zero
  // (and uncommitted).
  const BufferId a = arena.allocate(40 * kKiB);
  ASSERT_EQ(arena.memory_stats().bytes_in_use, 64 * kKiB);
  std::fill(arena.data(a), arena.data(a) + 40 * kKiB, std::byte(0x11));
  arena.free(a);
  const BufferId b = arena.allocate(64 * kKiB);
  const std::byte* q = arena.data(b);
  for (size_t i = 0; i < 40 * kKiB; ++i) ASSERT_EQ(q[i], std::byte(0xDB)) << i;
  for (size_t i = 40 * kKiB; i < 64 * kKiB; ++i) ASSERT_EQ(q[i], std::byte{0}) << i;
}

TEST(HbmArenaTest, WalkReportsChunksInAddressOrder) {
  HbmArena arena(metadata_only(8 * kKiB));
  const BufferId a = arena.allocate(1024);
  arena.allocate(2048);
  arena.free(a);
  std::vector<ChunkInfo> chunks;
  arena.walk([&](const ChunkInfo& c) { chunks.push_back(c); });
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].offset, 0u);
  EXPECT_EQ(chunks[0].size_bytes, 1024u);
  EXPECT_FALSE(chunks[0].in_use);
  EXPECT_EQ(chunks[1].offset, 1024u);
  EXPECT_EQ(chunks[1].size_bytes, 2048u);
  EXPECT_TRUE(chunks[1].in_use);
  EXPECT_EQ(chunks[2].offset, 3072u);
  EXPECT_EQ(chunks[2].size_bytes, 8 * kKiB - 3072);
  EXPECT_FALSE(chunks[2].in_use);
}

// ---- Lazy backing of large arenas ----

uint64_t page_bytes() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }

// Resident set size of this process, from /proc/self/statm (pages -> bytes).
uint64_t process_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return resident_pages * page_bytes();
}

TEST(HbmArenaTest, SixteenGiBBackingIsNotResidentUntilTouched) {
  BackingStore store(16 * kGiB);
  ASSERT_NE(store.data(), nullptr);
  EXPECT_EQ(store.size_bytes(), 16 * kGiB);
  EXPECT_EQ(store.resident_bytes(), 0u);
  // Touch one byte in the middle and one at the end: two pages become resident (a transparent
  // huge page could make it up to 2 MiB each, never the range).
  store.data()[5 * kGiB + 123] = std::byte{1};
  store.data()[16 * kGiB - 1] = std::byte{2};
  const uint64_t resident = store.resident_bytes();
  EXPECT_GE(resident, 2 * page_bytes());
  EXPECT_LE(resident, 4 * kMiB);
  EXPECT_EQ(store.data()[5 * kGiB + 123], std::byte{1});
  EXPECT_EQ(store.data()[16 * kGiB - 1], std::byte{2});
  // Untouched bytes read as zero.
  EXPECT_EQ(store.data()[9 * kGiB], std::byte{0});
}

TEST(HbmArenaTest, EightSixteenGiBArenasAtOnce) {
  const uint64_t rss_before = process_rss_bytes();
  std::vector<std::unique_ptr<HbmArena>> arenas;
  for (int core = 0; core < 8; ++core) {
    ArenaOptions o = backed(16 * kGiB);
    o.core_id = core;
    arenas.push_back(std::make_unique<HbmArena>(o));
  }
  // Each core gets a 4 GiB buffer and writes its first and last byte.
  std::vector<BufferId> ids;
  for (int core = 0; core < 8; ++core) {
    HbmArena& arena = *arenas[core];
    EXPECT_EQ(arena.capacity_bytes(), 16 * kGiB);
    EXPECT_EQ(arena.core_id(), core);
    const BufferId id = arena.allocate(4 * kGiB, "activations");
    std::byte* p = arena.data(id);
    ASSERT_NE(p, nullptr);
    p[0] = std::byte(core + 1);
    p[4 * kGiB - 1] = std::byte(core + 101);
    ids.push_back(id);
  }
  for (int core = 0; core < 8; ++core) {
    std::byte* p = arenas[core]->data(ids[core]);
    EXPECT_EQ(p[0], std::byte(core + 1));
    EXPECT_EQ(p[4 * kGiB - 1], std::byte(core + 101));
    EXPECT_EQ(arenas[core]->memory_stats().bytes_in_use, 4 * kGiB);
  }
  // 128 GiB of HBM reserved and 32 GiB allocated, but only 16 bytes touched: the resident set
  // grew by a few pages, far less than even one buffer.
  const uint64_t rss_after = process_rss_bytes();
  EXPECT_LT(rss_after > rss_before ? rss_after - rss_before : 0, 256 * kMiB);
}

// ---- The fragmentation case from the spec ----

// 1200 MiB; 250, 50, 250, 50, 250, 50, 250, 50 MiB back to back, with the default options. The
// default split threshold for 1200 MiB is 9.375 MiB, so the 50 MiB remainder of the last 300 MiB
// chunk is split off; under TensorFlow's fixed 128 MiB it would not be (see
// TensorFlowThresholdKeepsTheLastRemainder).
ArenaOptions spec_arena_options() {
  ArenaOptions o = metadata_only(1200 * kMiB);
  o.core_id = 3;
  o.auto_defragment = false;  // defragment_test.cc runs the same case with it
  return o;
}

TEST(HbmArenaTest, SpecFragmentationCase) {
  HbmArena arena(spec_arena_options());
  std::vector<BufferId> big, small;
  for (int i = 0; i < 4; ++i) {
    big.push_back(arena.allocate(250 * kMiB, "big" + std::to_string(i)));
    small.push_back(arena.allocate(50 * kMiB, "small" + std::to_string(i)));
    EXPECT_EQ(arena.offset(big.back()), i * 300 * kMiB);
    EXPECT_EQ(arena.offset(small.back()), i * 300 * kMiB + 250 * kMiB);
  }
  MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.bytes_in_use, 1200 * kMiB);
  EXPECT_EQ(s.total_free_bytes, 0u);
  for (BufferId id : big) arena.free(id);
  arena.check_consistency();
  s = arena.memory_stats();
  EXPECT_EQ(s.total_free_bytes, 1000 * kMiB);
  EXPECT_EQ(s.largest_free_block_bytes, 250 * kMiB);
  EXPECT_EQ(s.bytes_in_use, 200 * kMiB);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.75);

  try {
    arena.allocate(300 * kMiB, "grads");
    FAIL() << "300 MiB fit in 250 MiB holes";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    const OomReport& r = e.report();
    EXPECT_EQ(r.core_id, 3);
    EXPECT_EQ(r.policy, "bfc");
    EXPECT_EQ(r.label, "grads");
    EXPECT_EQ(r.requested_bytes, 300 * kMiB);
    EXPECT_EQ(r.rounded_bytes, 300 * kMiB);
    EXPECT_EQ(r.bytes_in_use, 200 * kMiB);
    EXPECT_EQ(r.bytes_limit, 1200 * kMiB);
    EXPECT_EQ(r.total_free_bytes, 1000 * kMiB);
    EXPECT_EQ(r.largest_free_block_bytes, 250 * kMiB);
    EXPECT_DOUBLE_EQ(r.fragmentation, 0.75);
    ASSERT_EQ(r.largest_live_buffers.size(), 4u);
    for (int i = 0; i < 4; ++i) {  // equal sizes: lowest offset first
      EXPECT_EQ(r.largest_live_buffers[i].label, "small" + std::to_string(i));
      EXPECT_EQ(r.largest_live_buffers[i].offset, i * 300 * kMiB + 250 * kMiB);
      EXPECT_EQ(r.largest_live_buffers[i].size_bytes, 50 * kMiB);
      EXPECT_EQ(r.largest_live_buffers[i].chunk_bytes, 50 * kMiB);
    }
    const std::string what = e.what();
    for (const char* needle :
         {"ResourceExhausted: ", "core 3", "'grads'", "314572800 bytes (300.00 MiB)",
          "1048576000 bytes (1000.00 MiB)", "262144000 bytes (250.00 MiB)", "0.750",
          "due to fragmentation", "small0", "small3"}) {
      EXPECT_NE(what.find(needle), std::string::npos) << "missing '" << needle << "' in\n" << what;
    }
    EXPECT_EQ(what, "ResourceExhausted: " + r.to_string());
  }
  EXPECT_EQ(arena.memory_stats().num_ooms, 1u);
  arena.check_consistency();

  // Free the 50 MiB block after the first 250 MiB hole: [0, 550 MiB) is one free chunk.
  arena.free(small[0]);
  arena.check_consistency();
  s = arena.memory_stats();
  EXPECT_EQ(s.largest_free_block_bytes, 550 * kMiB);
  EXPECT_EQ(s.total_free_bytes, 1050 * kMiB);
  const BufferId grads = arena.allocate(300 * kMiB, "grads");
  EXPECT_EQ(arena.offset(grads), 0u);
  s = arena.memory_stats();
  EXPECT_EQ(s.bytes_in_use, 450 * kMiB);
  EXPECT_EQ(s.largest_free_block_bytes, 250 * kMiB);
  EXPECT_EQ(s.total_free_bytes, 750 * kMiB);
  arena.check_consistency();
}

TEST(HbmArenaTest, TensorFlowThresholdKeepsTheLastRemainder) {
  // The same sequence under TensorFlow's fixed 128 MiB threshold: after 900 MiB, one 300 MiB
  // chunk is left; 300 < 2 * 250 and its 50 MiB remainder < 128 MiB, so the fourth 250 MiB buffer
  // gets all 300 MiB and the last 50 MiB request finds nothing free.
  ArenaOptions tf = metadata_only(1200 * kMiB);
  tf.policy_options.max_internal_fragmentation_bytes = 128 * kMiB;
  HbmArena arena(tf);
  for (int i = 0; i < 3; ++i) {
    arena.allocate(250 * kMiB);
    arena.allocate(50 * kMiB);
  }
  arena.allocate(250 * kMiB);
  MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.bytes_in_use, 1200 * kMiB);
  EXPECT_EQ(s.padded_bytes_in_use, 1150 * kMiB);
  EXPECT_EQ(s.largest_alloc_size, 300 * kMiB);
  EXPECT_EQ(s.total_free_bytes, 0u);
  try {
    arena.allocate(50 * kMiB);
    FAIL() << "50 MiB fit in a full arena";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().total_free_bytes, 0u);
    EXPECT_EQ(e.report().largest_free_block_bytes, 0u);
    EXPECT_DOUBLE_EQ(e.report().fragmentation, 0.0);
    EXPECT_EQ(std::string(e.what()).find("due to fragmentation"), std::string::npos);
  }
  arena.check_consistency();
}

TEST(HbmArenaTest, OomReportListsTenLargestLiveBuffersWithLabels) {
  HbmArena arena(metadata_only(kMiB));
  // Buffer i is (i + 1) * 10 KiB at offset 10 KiB * i(i+1)/2; 780 KiB in all, every chunk split.
  std::vector<BufferId> ids;
  for (int i = 0; i < 12; ++i)
    ids.push_back(arena.allocate((i + 1) * 10 * kKiB, "w" + std::to_string(i)));
  const BufferId unlabelled = arena.allocate(kKiB);  // 781 KiB in use
  try {
    arena.allocate(kMiB, "too-big");
    FAIL() << "1 MiB fit";
  } catch (const OutOfMemoryError& e) {
    const OomReport& r = e.report();
    EXPECT_EQ(r.label, "too-big");
    EXPECT_EQ(r.requested_bytes, kMiB);
    EXPECT_EQ(r.rounded_bytes, kMiB);
    EXPECT_EQ(r.bytes_in_use, 781 * kKiB);
    EXPECT_EQ(r.total_free_bytes, 243 * kKiB);
    EXPECT_EQ(r.largest_free_block_bytes, 243 * kKiB);
    EXPECT_DOUBLE_EQ(r.fragmentation, 0.0);
    ASSERT_EQ(r.largest_live_buffers.size(), 10u);
    for (int k = 0; k < 10; ++k) {
      const int i = 11 - k;  // largest first: w11, w10, ..., w2
      SCOPED_TRACE("entry " + std::to_string(k));
      EXPECT_EQ(r.largest_live_buffers[k].label, "w" + std::to_string(i));
      EXPECT_EQ(r.largest_live_buffers[k].size_bytes, (i + 1) * 10 * kKiB);
      EXPECT_EQ(r.largest_live_buffers[k].chunk_bytes, (i + 1) * 10 * kKiB);
      EXPECT_EQ(r.largest_live_buffers[k].offset, 10 * kKiB * i * (i + 1) / 2);
      EXPECT_EQ(r.largest_live_buffers[k].offset, arena.offset(ids[i]));
    }
    const std::string what = e.what();
    EXPECT_NE(what.find("for 'too-big'"), std::string::npos) << what;
    EXPECT_NE(what.find("120.00 KiB  at offset 675840  w11"), std::string::npos) << what;
    EXPECT_NE(what.find("30.00 KiB  at offset 30720  w2"), std::string::npos) << what;
    EXPECT_EQ(what.find("w1\n"), std::string::npos) << what;  // 11th largest: not listed
    EXPECT_EQ(what.find("(unlabelled)"), std::string::npos) << what;
    EXPECT_EQ(what.find("due to fragmentation"), std::string::npos) << what;

    nlohmann::json j = r;
    EXPECT_EQ(j.at("core_id").get<int>(), 0);
    EXPECT_EQ(j.at("policy").get<std::string>(), "bfc");
    EXPECT_EQ(j.at("label").get<std::string>(), "too-big");
    EXPECT_EQ(j.at("requested_bytes").get<uint64_t>(), kMiB);
    EXPECT_EQ(j.at("rounded_bytes").get<uint64_t>(), kMiB);
    EXPECT_EQ(j.at("bytes_in_use").get<uint64_t>(), 781 * kKiB);
    EXPECT_EQ(j.at("bytes_limit").get<uint64_t>(), kMiB);
    EXPECT_EQ(j.at("total_free_bytes").get<uint64_t>(), 243 * kKiB);
    EXPECT_EQ(j.at("largest_free_block_bytes").get<uint64_t>(), 243 * kKiB);
    EXPECT_DOUBLE_EQ(j.at("fragmentation").get<double>(), 0.0);
    ASSERT_EQ(j.at("largest_live_buffers").size(), 10u);
    EXPECT_EQ(j.at("largest_live_buffers")[0].at("label").get<std::string>(), "w11");
    EXPECT_EQ(j.at("largest_live_buffers")[0].at("size_bytes").get<uint64_t>(), 120 * kKiB);
    EXPECT_EQ(j.at("largest_live_buffers")[0].at("offset").get<uint64_t>(), 675840u);
    EXPECT_EQ(j.at("largest_live_buffers")[0].at("chunk_bytes").get<uint64_t>(), 120 * kKiB);
  }
  // With few buffers, unlabelled ones are listed as such.
  for (BufferId id : ids) arena.free(id);
  try {
    arena.allocate(kMiB);
    FAIL() << "1 MiB fit next to a live buffer";
  } catch (const OutOfMemoryError& e) {
    ASSERT_EQ(e.report().largest_live_buffers.size(), 1u);
    EXPECT_EQ(e.report().largest_live_buffers[0].label, "");
    EXPECT_EQ(e.report().largest_live_buffers[0].offset, arena.offset(unlabelled));
    EXPECT_NE(std::string(e.what()).find("(unlabelled)"), std::string::npos) << e.what();
    // 1023 KiB free in two pieces (780 KiB before the buffer, 243 KiB after).
    EXPECT_EQ(e.report().total_free_bytes, 1023 * kKiB);
    EXPECT_EQ(e.report().largest_free_block_bytes, 780 * kKiB);
  }
  arena.check_consistency();
}

TEST(HbmArenaTest, OomReportForRequestLargerThanTheArena) {
  HbmArena arena(metadata_only(kMiB));
  try {
    arena.allocate(2 * kMiB + 1);
    FAIL();
  } catch (const OutOfMemoryError& e) {
    // The report gives the true rounding (256 B granularity) even when the request can never fit.
    EXPECT_EQ(e.report().requested_bytes, 2 * kMiB + 1);
    EXPECT_EQ(e.report().rounded_bytes, 2 * kMiB + 256);
    EXPECT_EQ(e.report().total_free_bytes, kMiB);
    EXPECT_EQ(e.report().largest_free_block_bytes, kMiB);
    EXPECT_TRUE(e.report().largest_live_buffers.empty());
  }
  try {
    arena.allocate(UINT64_MAX);
    FAIL();
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().requested_bytes, UINT64_MAX);
    EXPECT_EQ(e.report().rounded_bytes, UINT64_MAX - 255);  // saturates at the last granule
  }
  // A request that rounds up reports the rounded size.
  arena.allocate(kMiB / 2);
  try {
    arena.allocate(kMiB / 2 + 1);
    FAIL();
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().rounded_bytes, kMiB / 2 + 256);
  }
  EXPECT_EQ(arena.memory_stats().num_ooms, 3u);
}

// ---- Randomized ----

// Parameter: the seed. Even seeds use a backed arena and check buffer contents, odd seeds are
// metadata-only. Stats are checked against counters kept here, the layout against the model.
class HbmArenaRandomTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(HbmArenaRandomTest, MatchesReferenceModel) {
  const uint32_t seed = GetParam();
  std::mt19937_64 rng(seed * 7919 + 1);
  auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  const bool with_backing = seed % 2 == 0;
  ArenaOptions options = with_backing ? backed(uniform(64 * kKiB, 512 * kKiB))
                                      : metadata_only(uniform(64 * kKiB, 4 * kMiB));
  options.core_id = static_cast<int>(seed);
  options.auto_defragment = false;  // the model predicts plain BFC placement
  options.policy_options.max_internal_fragmentation_bytes =
      (seed / 2) % 2 == 0 ? 4 * kKiB : 128 * kMiB;
  HbmArena arena(options);
  BfcReferenceModel model(options.capacity_bytes,
                          *options.policy_options.max_internal_fragmentation_bytes);
  ASSERT_EQ(arena.capacity_bytes(), model.capacity_bytes());

  struct Live {
    uint64_t offset, size_bytes, chunk_bytes;
    std::byte fill;
  };
  std::map<BufferId, Live> live;
  uint64_t bytes_in_use = 0, peak = 0, largest_alloc = 0, requested = 0;
  uint64_t num_allocs = 0, num_frees = 0, num_ooms = 0;

  auto check_contents = [&](BufferId id, const Live& b) {
    if (!with_backing) return;
    const std::byte* p = arena.data(id);
    for (uint64_t i = 0; i < b.size_bytes; ++i) {
      ASSERT_EQ(p[i], b.fill) << "buffer " << id << " byte " << i << " was overwritten";
    }
  };

  constexpr int kOps = 1000;
  for (int op = 0; op < kOps; ++op) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " op " + std::to_string(op));
    if (live.empty() || (uniform(0, 99) < 55 && live.size() < 100)) {
      const uint64_t kind = uniform(0, 99);
      const uint64_t size = kind < 60   ? uniform(1, 4096)
                            : kind < 95 ? uniform(4096, 32 * kKiB)
                                        : uniform(32 * kKiB, arena.capacity_bytes());
      const std::optional<PolicyAllocation> expected = model.predict_allocate(size);
      if (expected) {
        const BufferId id = arena.allocate(size, "b" + std::to_string(op));
        ASSERT_EQ(arena.offset(id), expected->offset);
        ASSERT_EQ(arena.size_bytes(id), size);
        ASSERT_FALSE(live.contains(id)) << "id reused";
        ASSERT_NO_FATAL_FAILURE(model.take(expected->offset, expected->chunk_bytes));
        const Live b{expected->offset, size, expected->chunk_bytes, std::byte(uniform(0, 255))};
        if (with_backing) {
          std::byte* p = arena.data(id);
          ASSERT_NE(p, nullptr);
          std::fill(p, p + size, b.fill);
        } else {
          ASSERT_EQ(arena.data(id), nullptr);
        }
        live.emplace(id, b);
        bytes_in_use += b.chunk_bytes;
        peak = std::max(peak, bytes_in_use);
        largest_alloc = std::max(largest_alloc, b.chunk_bytes);
        requested += size;
        ++num_allocs;
      } else {
        try {
          arena.allocate(size, "fails");
          FAIL() << "allocate(" << size << ") succeeded; the model has no room";
        } catch (const OutOfMemoryError& e) {
          const OomReport& r = e.report();
          ASSERT_EQ(r.requested_bytes, size);
          ASSERT_EQ(r.rounded_bytes, BfcReferenceModel::round_up(size));
          ASSERT_EQ(r.bytes_in_use, bytes_in_use);
          ASSERT_EQ(r.total_free_bytes, model.total_free_bytes());
          ASSERT_EQ(r.largest_free_block_bytes, model.largest_free_bytes());
          ASSERT_EQ(r.label, "fails");
          ASSERT_EQ(r.largest_live_buffers.size(), std::min<size_t>(10, live.size()));
          for (size_t k = 1; k < r.largest_live_buffers.size(); ++k) {
            ASSERT_GE(r.largest_live_buffers[k - 1].size_bytes,
                      r.largest_live_buffers[k].size_bytes);
          }
        }
        ++num_ooms;
      }
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(uniform(0, live.size() - 1)));
      ASSERT_NO_FATAL_FAILURE(check_contents(it->first, it->second));
      const BufferId freed_id = it->first;
      arena.free(freed_id);
      ASSERT_EQ(model.give_back(it->second.offset), it->second.chunk_bytes);
      bytes_in_use -= it->second.chunk_bytes;
      requested -= it->second.size_bytes;
      ++num_frees;
      live.erase(it);
      if (uniform(0, 9) == 0) {
        ASSERT_THROW(arena.free(freed_id), InvalidArgumentError);  // double free
      }
    }
    ASSERT_NO_THROW(arena.check_consistency());
    const MemoryStats s = arena.memory_stats();
    ASSERT_EQ(s.bytes_in_use, bytes_in_use);
    ASSERT_EQ(s.bytes_in_use, model.used_bytes());
    ASSERT_EQ(s.peak_bytes_in_use, peak);
    ASSERT_EQ(s.bytes_limit, model.capacity_bytes());
    ASSERT_EQ(s.largest_alloc_size, largest_alloc);
    ASSERT_EQ(s.largest_free_block_bytes, model.largest_free_bytes());
    ASSERT_EQ(s.total_free_bytes, model.total_free_bytes());
    ASSERT_EQ(s.num_allocs, num_allocs);
    ASSERT_EQ(s.num_frees, num_frees);
    ASSERT_EQ(s.num_ooms, num_ooms);
    ASSERT_EQ(s.num_live_buffers, live.size());
    ASSERT_EQ(s.padded_bytes_in_use, requested);
  }
  EXPECT_GT(num_allocs, 200u);
  EXPECT_GT(num_frees, 200u);
  for (const auto& [id, b] : live) {
    ASSERT_NO_FATAL_FAILURE(check_contents(id, b));
    arena.free(id);
  }
  arena.check_consistency();
  EXPECT_EQ(arena.memory_stats().largest_free_block_bytes, arena.capacity_bytes());
}

INSTANTIATE_TEST_SUITE_P(Seeds, HbmArenaRandomTest, ::testing::Range<uint32_t>(0, 30));

// A free of a pinned buffer (an in-flight DMA reads it) is deferred to the last unpin: until then
// the id is dead to callers, but its bytes stay put and no allocation can take them.
TEST(HbmArenaTest, FreeOfAPinnedBufferIsHeldUntilTheLastUnpin) {
  for (const std::string& policy : known_allocator_policies()) {
    if (policy == "planned") continue;  // needs a plan
    SCOPED_TRACE(policy);
    ArenaOptions o;
    o.capacity_bytes = 1 * kMiB;
    o.policy = policy;
    o.poison_freed = true;
    HbmArena arena(o);
    const BufferId a = arena.allocate(4096, "a");
    const BufferId keep = arena.allocate(4096, "keep");
    std::byte* pa = arena.data(a);
    const uint64_t a_offset = arena.offset(a);
    const uint64_t chunk = arena.memory_stats().bytes_in_use / 2;
    std::memset(pa, 0x5A, 4096);
    arena.pin(a);
    arena.pin(a);  // two copies in flight
    arena.free(a);
    MemoryStats s = arena.memory_stats();
    EXPECT_EQ(s.num_live_buffers, 1u);
    EXPECT_EQ(s.pending_free_buffers, 1u);
    EXPECT_EQ(s.pending_free_bytes, chunk);
    EXPECT_EQ(s.bytes_in_use, 2 * chunk);  // still occupied
    EXPECT_EQ(s.num_frees, 0u);
    expect_invalid_argument([&] { arena.data(a); }, std::to_string(a));
    expect_invalid_argument([&] { arena.free(a); }, "double free");
    expect_invalid_argument([&] { arena.pin(a); }, std::to_string(a));
    // Fill the arena: nothing may land on a's bytes, and they are neither poisoned nor moved.
    std::vector<BufferId> others;
    while (auto p = arena.try_allocate(4096, "other")) {
      EXPECT_TRUE(p->offset + 4096 <= a_offset || p->offset >= a_offset + 4096) << p->offset;
      std::memset(arena.data(p->id), 0x11, 4096);
      others.push_back(p->id);
    }
    arena.free(keep);
    arena.defragment();
    arena.check_consistency();
    for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(pa[i], std::byte{0x5A}) << i;
    arena.unpin(a);  // one copy still in flight
    EXPECT_EQ(arena.memory_stats().pending_free_buffers, 1u);
    arena.unpin(a);  // released now
    s = arena.memory_stats();
    EXPECT_EQ(s.pending_free_buffers, 0u);
    EXPECT_EQ(s.pending_free_bytes, 0u);
    EXPECT_EQ(s.num_frees, 2u);
    EXPECT_EQ(pa[0], std::byte{0xDB});  // poisoned on release
    arena.unpin(a);                     // released: a no-op
    arena.check_consistency();
    EXPECT_TRUE(arena.try_allocate(4096, "reuse").has_value());
    for (BufferId id : others) arena.free(id);
  }
}
// unpin() is a no-op for a buffer freed meanwhile, but an id the arena never handed out is a bug
// in the caller. Regression: such an id used to be accepted silently.
TEST(HbmArenaTest, UnpinOfANeverAllocatedIdThrows) {
  ArenaOptions o;
  o.capacity_bytes = 1 << 20;
  HbmArena arena(o);
  testing::expect_error(ErrorCode::kInvalidArgument, [&] { arena.unpin(12345); }, {"12345"});
  testing::expect_error(ErrorCode::kInvalidArgument, [&] { arena.unpin(0); }, {"id 0"});
  const BufferId id = arena.allocate(1000);
  testing::expect_error(ErrorCode::kInvalidArgument, [&] { arena.unpin(id + 1); },
                        {"id " + std::to_string(id + 1)});
  arena.pin(id);
  arena.free(id);
  EXPECT_NO_THROW(arena.unpin(id));
}

// Every policy behind a metadata-only arena of 2^64 - 1 bytes: requests up to 2^64 - 1 either fit
// or raise an OOM report naming the request, and the arena stays consistent.
class HbmArenaPolicyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HbmArenaPolicyTest, HugeRequestsOnAHugeMetadataOnlyArena) {
  constexpr uint64_t kMax = ~uint64_t{0};
  ArenaOptions o;
  o.capacity_bytes = kMax;
  o.policy = GetParam();
  o.backing = false;
  HbmArena arena(o);
  for (uint64_t size : {kMax, kMax - 255, uint64_t{1} << 63}) {
    try {
      const BufferId id = arena.allocate(size, "huge");
      arena.check_consistency();
      arena.free(id);
    } catch (const OutOfMemoryError& e) {
      const nlohmann::json j = e.report();
      EXPECT_EQ(j.at("requested_bytes").get<uint64_t>(), size);
    }
  }
  arena.check_consistency();
  EXPECT_EQ(arena.occupancy_map().size(), 100u);
  EXPECT_NO_THROW(memory_snapshot_json(arena.chunk_records()));
}

// Eight threads on one arena: allocate (with auto-defragmentation), free, defragment, pin, read
// contents under a pin, and the read-only views. Every buffer keeps its bytes through every
// compaction (run under TSan as much as for the contents check).
TEST_P(HbmArenaPolicyTest, ManyThreadsKeepEveryBuffersBytesThroughCompaction) {
  ArenaOptions o;
  o.capacity_bytes = 4 << 20;
  o.policy = GetParam();
  auto arena = std::make_shared<HbmArena>(o);
  std::atomic<int> corrupt{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t));
      std::vector<std::pair<BufferId, uint8_t>> mine;
      for (int i = 0; i < 400; ++i) {
        const int action = static_cast<int>(rng() % 12);
        try {
          if (action < 5) {
            const uint64_t size = 1 + rng() % 20000;
            const BufferId id = arena->allocate(size, "t" + std::to_string(t));
            const auto v = static_cast<uint8_t>(t * 31 + i);
            BufferPin pin(arena, id);
            std::memset(arena->data(id), v, size);
            mine.emplace_back(id, v);
          } else if (action < 9 && !mine.empty()) {
            const size_t k = rng() % mine.size();
            {
              BufferPin pin(arena, mine[k].first);
              const std::byte* d = arena->data(mine[k].first);
              const uint64_t n = arena->size_bytes(mine[k].first);
              for (uint64_t j = 0; j < n; ++j) {
                if (static_cast<uint8_t>(d[j]) != mine[k].second) {
                  ++corrupt;
                  break;
                }
              }
            }
            arena->free(mine[k].first);
            mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
          } else if (action == 9) {
            arena->defragment();
          } else if (action == 10) {
            (void)arena->occupancy_map();
            (void)arena->chunk_records();
            (void)arena->memory_stats();
          } else {
            arena->check_consistency();
          }
        } catch (const OutOfMemoryError&) {
        }
      }
      for (const auto& [id, v] : mine) arena->free(id);
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0);
  arena->check_consistency();
  EXPECT_EQ(arena->memory_stats().bytes_in_use, 0u);
  EXPECT_EQ(arena->memory_stats().num_live_buffers, 0u);
}

INSTANTIATE_TEST_SUITE_P(Policies, HbmArenaPolicyTest,
                         ::testing::Values("bfc", "tlsf", "first_fit", "buddy"),
                         [](const auto& info) { return info.param; });

// Regression: OomReport's JSON carried the raw label, so dumping it threw nlohmann's
// type_error 316 when a label was not valid UTF-8. Labels are replaced (U+FFFD) in the JSON.
TEST(HbmArenaTest, OomReportJsonReplacesInvalidUtf8InTheLabel) {
  ArenaOptions o;
  o.capacity_bytes = 4096;
  o.backing = false;
  HbmArena arena(o);
  try {
    arena.allocate(1 << 20, "x\xc3");
    FAIL() << "expected an OOM";
  } catch (const OutOfMemoryError& e) {
    const nlohmann::json j = e.report();
    EXPECT_NO_THROW((void)j.dump());
    EXPECT_EQ(j["label"], "x\xef\xbf\xbd");
  }
}

}  // namespace
}  // namespace vtpu
