#include "vtpu/distributed/mpi_transport.h"

#include <algorithm>

#include "vtpu/collectives/ring_buffer_link.h"
#include "vtpu/common/error.h"
#include "vtpu/distributed/mpi_context.h"
#include "vtpu/distributed/mpi_link.h"

namespace vtpu::distributed {

MpiTransport::MpiTransport(std::shared_ptr<MpiContext> context, int id, std::vector<int> group,
                           int cores_per_process)
    : context_(std::move(context)),
      id_(id),
      group_(std::move(group)),
      cores_per_process_(cores_per_process) {}

std::unique_ptr<Link> MpiTransport::connect(int src_core, int dst_core,
                                            const LinkOptions& options) {
  const int src_process = src_core / cores_per_process_;
  const int dst_process = dst_core / cores_per_process_;
  const int me = context_->rank();
  if (src_process == me && dst_process == me) {
    return std::make_unique<RingBufferLink>(src_core, dst_core, options);
  }
  if (src_process != me && dst_process != me) {
    return std::make_unique<AbsentLink>(src_core, dst_core, options);
  }
  const auto rank = [&](int core) {
    const auto it = std::find(group_.begin(), group_.end(), core);
    if (it == group_.end()) {
      throw InternalError("core " + std::to_string(core) + " is not in the communicator");
    }
    return static_cast<int>(it - group_.begin());
  };
  const int n = static_cast<int>(group_.size());
  const int tag = context_->link_tag(id_, n, rank(src_core), rank(dst_core));
  const bool sending = src_process == me;
  return std::make_unique<MpiLink>(context_, sending ? MpiLink::End::kSender
                                                     : MpiLink::End::kReceiver,
                                   src_core, dst_core, sending ? dst_process : src_process, tag,
                                   options);
}

void MpiTransport::publish_fingerprint(const PublishedFingerprint& published) {
  context_->publish_fingerprint(id_, published);
}

std::vector<int> MpiTransport::other_processes() const {
  std::vector<int> processes;
  for (int core : group_) {
    const int p = core / cores_per_process_;
    if (p != context_->rank() &&
        std::find(processes.begin(), processes.end(), p) == processes.end())
      processes.push_back(p);
  }
  return processes;
}

void MpiTransport::set_fingerprint_listener(FingerprintListener listener) {
  if (!listener) {
    context_->remove_fingerprint_channel(id_);
    return;
  }
  context_->add_fingerprint_channel(id_, other_processes(), std::move(listener));
}

void MpiTransport::publish_failure(const PublishedFailure& failure) {
  context_->send_failure(id_, other_processes(), failure);
}

void MpiTransport::set_failure_listener(FailureListener listener) {
  context_->set_failure_listener(id_, std::move(listener));
}

}  // namespace vtpu::distributed
