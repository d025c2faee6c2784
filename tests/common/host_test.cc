// common/host.h: the usable CPUs are the affinity mask's, not every online CPU.
#include "vtpu/common/host.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>
#include <vector>

namespace vtpu {
namespace {

// The mask as the kernel reports it to this thread, independently of usable_cpu_ids.
std::vector<int> mask_of_this_thread() {
  cpu_set_t s;
  CPU_ZERO(&s);
  EXPECT_EQ(sched_getaffinity(0, sizeof(s), &s), 0);
  std::vector<int> ids;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &s)) ids.push_back(cpu);
  return ids;
}

TEST(HostTest, UsableCpusAreTheAffinityMasks) {
  const std::vector<int> all = mask_of_this_thread();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(usable_cpu_ids(), all);
  EXPECT_EQ(usable_cpus(), static_cast<int>(all.size()));
  // A thread pinned to its last allowed CPU (as `taskset -c N` pins a process) sees that one CPU,
  // whatever the machine has online.
  std::vector<int> pinned;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(all.back(), &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    pinned = usable_cpu_ids();
  });
  t.join();
  EXPECT_EQ(pinned, std::vector<int>{all.back()});
}

}  // namespace
}  // namespace vtpu
