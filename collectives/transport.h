// A Transport creates Links between cores. InProcessTransport makes RingBufferLinks in this
// process; distributed/'s MpiTransport makes links that cross processes and hosts (and
// RingBufferLinks inside a process), and the algorithms above stay unchanged.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "vtpu/collectives/link.h"

namespace vtpu {

class Runtime;

/// Thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  /// A new directed link src_core -> dst_core. Throws InvalidArgumentError for bad options.
  virtual std::unique_ptr<Link> connect(int src_core, int dst_core, const LinkOptions& options) = 0;
};

/// Implemented by a ProcessGroup (runtime/process_group.h) whose processes need their own
/// transport: a Communicator whose options name no transport asks its runtime's process group for
/// one, once per communicator, in creation order (every process makes the same communicators in
/// the same order, so the n-th transport of every process belongs to the same communicator).
class TransportProvider {
 public:
  virtual ~TransportProvider() = default;
  /// A transport for the communicator over `group` (global core ids of `runtime`, rank order).
  virtual std::shared_ptr<Transport> make_transport(const Runtime& runtime,
                                                    const std::vector<int>& group) = 0;
};

/// Links are in-process circular buffers (RingBufferLink). Thread-safe.
class InProcessTransport final : public Transport {
 public:
  std::string_view name() const override { return "in_process"; }
  std::unique_ptr<Link> connect(int src_core, int dst_core, const LinkOptions& options) override;
};

}  // namespace vtpu
