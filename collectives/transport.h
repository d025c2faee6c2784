// A Transport creates Links between cores. InProcessTransport makes RingBufferLinks in this
// process; an MPI transport can later make links that cross processes and hosts, and the
// algorithms above stay unchanged.
#pragma once

#include <memory>
#include <string_view>

#include "vtpu/collectives/link.h"

namespace vtpu {

/// Thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  /// A new directed link src_core -> dst_core. Throws InvalidArgumentError for bad options.
  virtual std::unique_ptr<Link> connect(int src_core, int dst_core, const LinkOptions& options) = 0;
};

/// Links are in-process circular buffers (RingBufferLink). Thread-safe.
class InProcessTransport final : public Transport {
 public:
  std::string_view name() const override { return "in_process"; }
  std::unique_ptr<Link> connect(int src_core, int dst_core, const LinkOptions& options) override;
};

}  // namespace vtpu
