#include "vtpu/runtime/virtual_core.h"

#include <pthread.h>
#include <sched.h>

#include "vtpu/common/units.h"
#include "vtpu/runtime/device_buffer.h"

namespace vtpu {

namespace {

std::shared_ptr<HbmArena> make_scratch_arena(MemorySpace space, uint64_t bytes, int core_id) {
  ArenaOptions o;
  o.capacity_bytes = bytes;
  o.policy = "bfc";
  o.backing = true;
  o.auto_defragment = false;  // kernels hold raw pointers into VMEM for the whole kernel
  // Always split a free chunk (remainders are whole 256-byte granules): the arena only holds
  // kernel buffers, and pallas_call's budget check sums the granule-rounded sizes, so a kernel
  // that needs exactly the limit must fit (the default threshold wasted 4 KiB).
  o.policy_options.max_internal_fragmentation_bytes = 256;
  o.core_id = core_id;
  o.name = std::string(memory_space_name(space));
  return std::make_shared<HbmArena>(o);
}

}  // namespace

VirtualCore::VirtualCore(int core_id, uint64_t hbm_total_bytes,
                         const ArenaLimit& default_arena_limit, const ArenaOptions& arena_options,
                         const CoreMemoryOptions& memory)
    : core_id_(core_id),
      device_(hbm_total_bytes, core_id),
      hbm_(device_.create_arena(default_arena_limit, arena_options)),
      vmem_(make_scratch_arena(MemorySpace::kVmem, memory.vmem_bytes, core_id)),
      smem_(make_scratch_arena(MemorySpace::kSmem, memory.smem_bytes, core_id)),
      accumulator_(
          make_scratch_arena(MemorySpace::kAccumulator, memory.accumulator_bytes, core_id)),
      dma_(core_id, memory.dma),
      io_(1),
      work_(boost::asio::make_work_guard(io_)),
      thread_([this] { io_.run(); }) {}

VirtualCore::~VirtualCore() {
  work_.reset();  // drain: run() returns once the queue is empty
  if (thread_.joinable()) thread_.join();
  comm_executor_.reset();  // then the communication worker (programs may have started work)
}

const std::shared_ptr<HbmArena>& VirtualCore::memory_shared(MemorySpace space) const {
  switch (space) {
    case MemorySpace::kHbm:
      return hbm_;
    case MemorySpace::kVmem:
      return vmem_;
    case MemorySpace::kSmem:
      return smem_;
    case MemorySpace::kAccumulator:
      return accumulator_;
  }
  throw InvalidArgumentError("unknown memory space");
}

HbmArena& VirtualCore::memory(MemorySpace space) const { return *memory_shared(space); }

DeviceBuffer VirtualCore::allocate(MemorySpace space, uint64_t size_bytes,
                                   std::string label) const {
  const std::shared_ptr<HbmArena>& arena = memory_shared(space);
  if (space == MemorySpace::kHbm) return DeviceBuffer(arena, size_bytes, std::move(label));
  try {
    return DeviceBuffer(arena, size_bytes, label);
  } catch (const OutOfMemoryError& e) {
    const OomReport& r = e.report();
    const uint64_t available = r.largest_free_block_bytes;
    const std::string name(memory_space_name(space));
    throw ScratchExhaustedError(
        space, r.rounded_bytes, available,
        "ran out of " + name + " on core " + std::to_string(core_id_) + ": requested " +
            std::to_string(r.rounded_bytes) + " bytes (" + format_bytes(r.rounded_bytes) +
            ") for '" + label + "', available " + std::to_string(available) + " bytes (" +
            format_bytes(available) + ") of the " + name + " limit of " +
            std::to_string(r.bytes_limit) + " bytes (" + format_bytes(r.bytes_limit) + "), " +
            std::to_string(r.bytes_in_use) + " bytes in use" +
            (space == MemorySpace::kVmem ? " (raise vmem_limit_bytes or use smaller blocks)" : ""));
  }
}

std::map<std::string, MemoryStats> VirtualCore::memory_stats_by_space() const {
  std::map<std::string, MemoryStats> m;
  for (MemorySpace s :
       {MemorySpace::kHbm, MemorySpace::kVmem, MemorySpace::kSmem, MemorySpace::kAccumulator}) {
    m[std::string(memory_space_name(s))] = memory(s).memory_stats();
  }
  return m;
}

SerialExecutor& VirtualCore::comm_executor() {
  std::lock_guard lock(comm_mu_);
  if (!comm_executor_) comm_executor_ = std::make_unique<SerialExecutor>();
  return *comm_executor_;
}

bool VirtualCore::pin_to_cpu(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(thread_.native_handle(), sizeof(set), &set) == 0;
}

}  // namespace vtpu
