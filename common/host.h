// The host CPUs this process may run on: the one count every part of vtpu uses for "CPUs" (the
// planner's oversubscription via a profile's host_cpus, thread pinning, spinner limits, the
// estimate-vs-measured report).
#pragma once

#include <vector>

namespace vtpu {

/// Ids of the CPUs in this process's affinity mask (sched_getaffinity), ascending. A run under
/// `taskset -c 0` or a cpuset-limited container sees only its own CPUs, where sysconf's online
/// count and std::thread::hardware_concurrency() report every CPU of the machine.
/// Falls back to 0..hardware_concurrency()-1 when the mask cannot be read; never
/// empty. CPU quotas (cgroup cpu.max) are not masks and are not seen. Thread-safe.
std::vector<int> usable_cpu_ids();

/// usable_cpu_ids().size(): at least 1. Thread-safe.
int usable_cpus();

}  // namespace vtpu
