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

/// A core's failure one process sends to the others of a communicator: the communicator's
/// collectives from `from_sequence` on fail, and those before it complete (the core finished
/// them, so their messages are in the links). `desync`: the failure is a desync found in
/// collective `from_sequence`, which then fails with InvalidArgument everywhere. Plain data.
struct PublishedFailure {
  static constexpr size_t kMaxReason = 1024;
  uint32_t epoch = 0;
  int32_t core = -1;
  uint64_t from_sequence = 0;
  bool desync = false;
  char reason[kMaxReason] = {};  // NUL-terminated, cut to fit
};
using FailureListener = std::function<void(const PublishedFailure&)>;

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

  /// True when publish_failure reaches the other processes: a Communicator then learns of another
  /// process's core failures from these messages, which carry how far the core got, rather than
  /// from the runtime's failure notice, which cannot say (and would fail completed collectives).
  virtual bool carries_failures() const { return false; }
  /// Sends `failure` to every other process that hosts a core of the communicator, without
  /// waiting for the receivers, and before it returns. The default does nothing.
  virtual void publish_failure(const PublishedFailure& failure) { (void)failure; }
  /// As set_fingerprint_listener, for the failures other processes publish.
  virtual void set_failure_listener(FailureListener listener) { (void)listener; }
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
