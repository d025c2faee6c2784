#include "runtime/virtual_core.h"

namespace vtpu {

VirtualCore::VirtualCore(int core_id, uint64_t hbm_total_bytes,
                         const ArenaLimit& default_arena_limit, const ArenaOptions& arena_options)
    : core_id_(core_id),
      device_(hbm_total_bytes, core_id),
      hbm_(device_.create_arena(default_arena_limit, arena_options)),
      io_(1),
      work_(boost::asio::make_work_guard(io_)),
      thread_([this] { io_.run(); }) {}

VirtualCore::~VirtualCore() {
  work_.reset();  // drain: run() returns once the queue is empty
  if (thread_.joinable()) thread_.join();
  comm_executor_.reset();  // then the communication worker (programs may have started work)
}

SerialExecutor& VirtualCore::comm_executor() {
  std::lock_guard lock(comm_mu_);
  if (!comm_executor_) comm_executor_ = std::make_unique<SerialExecutor>();
  return *comm_executor_;
}

}  // namespace vtpu
