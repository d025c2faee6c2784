// An allocator experiment: the same seeded workload replayed on two allocator policies, and the
// fragmentation each leaves compared. A policy only does offset bookkeeping
// (memory/allocator_policy.h), so a 1 GiB range costs no memory.
//
// The workload mixes a few buffers that live to the end with many short-lived ones of log-normal
// sizes, the pattern that splits free space into holes. Which policy keeps more of its free bytes
// in one block depends on the workload: change the seed, the sizes or the policies and compare.
#include <vtpu/memory/allocator_policy.h>
#include <vtpu/memory/memory_stats.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kCapacityBytes = uint64_t{1} << 30;  // 1 GiB
constexpr int kEvents = 20000;
constexpr uint64_t kSeed = 42;

/// One workload event: allocate `size_bytes` as buffer `id`, or free buffer `id`.
struct Event {
  bool alloc;
  int id;
  uint64_t size_bytes;
};

/// A seeded workload: one buffer in 32 lives to the end, the rest are freed at random.
std::vector<Event> make_workload(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> size(std::log(256.0 * 1024), 1.5);  // median 256 KiB
  std::vector<int> live;
  std::vector<Event> events;
  int next_id = 0;
  while (static_cast<int>(events.size()) < kEvents) {
    if (live.empty() || rng() % 2 == 0) {
      const auto bytes = static_cast<uint64_t>(std::clamp(size(rng), 256.0, 64.0 * (1 << 20)));
      events.push_back({true, next_id, bytes});
      if (rng() % 32 != 0) live.push_back(next_id);  // the others are never freed
      ++next_id;
    } else {
      const size_t pick = rng() % live.size();
      events.push_back({false, live[pick], 0});
      live[pick] = live.back();
      live.pop_back();
    }
  }
  return events;
}

struct Outcome {
  int ooms = 0;
  uint64_t free_bytes = 0;
  uint64_t largest_free_bytes = 0;
};

/// Replays `events` on a fresh policy; checks its invariants every 1000 events.
Outcome replay(const std::string& policy_name, const std::vector<Event>& events) {
  auto policy = vtpu::make_allocator_policy(policy_name, kCapacityBytes);
  std::vector<int64_t> offset_of;  // by buffer id; -1: not allocated (or out of memory)
  Outcome out;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.alloc) {
      offset_of.resize(e.id + 1, -1);
      if (auto a = policy->allocate(e.size_bytes)) {
        offset_of[e.id] = static_cast<int64_t>(a->offset);
      } else {
        ++out.ooms;
      }
    } else if (offset_of[e.id] >= 0) {
      policy->free(static_cast<uint64_t>(offset_of[e.id]));
      offset_of[e.id] = -1;
    }
    if (i % 1000 == 0) policy->check_consistency();  // throws on a broken invariant
  }
  policy->check_consistency();
  out.free_bytes = policy->total_free_bytes();
  out.largest_free_bytes = policy->largest_free_block_bytes();
  return out;
}

}  // namespace

int main() {
  const std::vector<Event> events = make_workload(kSeed);
  std::printf("%d events, seed %llu, %llu MiB range\n", kEvents,
              static_cast<unsigned long long>(kSeed),
              static_cast<unsigned long long>(kCapacityBytes >> 20));
  std::printf("%-10s %6s %14s %18s %14s\n", "policy", "ooms", "free MiB", "largest free MiB",
              "fragmentation");
  for (const char* name : {"bfc", "first_fit"}) {
    const Outcome o = replay(name, events);
    // 1 - largest free block / total free: the share of free bytes no single request can use.
    const double frag = vtpu::fragmentation_ratio(o.largest_free_bytes, o.free_bytes);
    std::printf("%-10s %6d %14.1f %18.1f %14.3f\n", name, o.ooms, o.free_bytes / 1048576.0,
                o.largest_free_bytes / 1048576.0, frag);
    if (frag < 0.0 || frag > 1.0) return 1;
  }
  return 0;
}
