#include "vtpu/common/host.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace vtpu {

std::vector<int> usable_cpu_ids() {
  std::vector<int> ids;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &allowed)) ids.push_back(cpu);
  }
  if (ids.empty()) {
    const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    for (int cpu = 0; cpu < n; ++cpu) ids.push_back(cpu);
  }
  return ids;
}

int usable_cpus() { return static_cast<int>(usable_cpu_ids().size()); }

}  // namespace vtpu
