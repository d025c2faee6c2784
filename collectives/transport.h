// A Transport creates Links between cores. InProcessTransport makes RingBufferLinks in this
// process; distributed/'s MpiTransport makes links that cross processes and hosts (and
// RingBufferLinks inside a process), and the algorithms above stay unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "vtpu/collectives/link.h"

namespace vtpu {

class Runtime;

/// A fingerprint one process publishes to the others of a communicator (FingerprintTable): the
/// communicator's reset count (`epoch`, so that a message sent before a reset is told apart), the
/// core that entered the collective and its fingerprint. Plain data (sent as bytes).
struct PublishedFingerprint {
  uint32_t epoch = 0;
  int32_t core = -1;
  Fingerprint fingerprint;
};
using FingerprintListener = std::function<void(const PublishedFingerprint&)>;

/// Thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  /// A new directed link src_core -> dst_core. Throws InvalidArgumentError for bad options.
  virtual std::unique_ptr<Link> connect(int src_core, int dst_core, const LinkOptions& options) = 0;

  /// For the desync check of cores that no link joins: sends `published` to every other process
  /// that hosts a core of the communicator, whose listener receives it. Does not wait for the
  /// receivers. The default (every core in this process) does nothing.
  virtual void publish_fingerprint(const PublishedFingerprint& published) { (void)published; }
  /// Sets the function that receives the fingerprints other processes publish (on a transport
  /// thread; it must not block); null clears it, and once that returns it no longer runs. The
  /// default does nothing.
  virtual void set_fingerprint_listener(FingerprintListener listener) { (void)listener; }
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
