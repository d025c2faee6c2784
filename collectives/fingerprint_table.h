// Where the cores of one communicator publish the fingerprint of each collective they enter, so
// that any two cores that call different collectives are compared at once, whatever links the
// algorithm uses: a message's fingerprint is compared only by its receiver, so two cores that no
// link joins (two cores of a ring that are not neighbours, or two cores that both wait to
// receive) were never compared, and the group waited for its timeout with no culprit named.
//
// Model: one entry per sequence number modulo kEntries. The first core to enter collective s
// claims the entry with its fingerprint (the reference), and every later core compares its own
// with it: a difference is a desync between that core and the reference's core. So each core
// makes one compare per collective, whatever the group size, and a mismatch is found by the
// second of the two cores to arrive, before it moves any data. Another process's fingerprints
// (sent by the Transport, see transport.h) are offered to the table the same way. A core that
// arrives after its entry was taken by a sequence kEntries later is not compared (its links
// still are).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "vtpu/collectives/types.h"

namespace vtpu {

/// Thread-safe.
class FingerprintTable {
 public:
  /// Sequences held at once: far more than cores of a group drift apart, since every collective
  /// but a broadcast's root needs data from its peers.
  static constexpr uint64_t kEntries = 64;

  enum class Outcome : uint8_t {
    kFirst,      // no core had published this sequence: `fingerprint` is now the reference
    kSame,       // equal to the reference
    kDifferent,  // differs from the reference (a desync): see Result::reference_core
    kPassed,     // the entry holds a later sequence: not compared
  };
  struct Result {
    Outcome outcome = Outcome::kFirst;
    int reference_core = -1;  // kDifferent: the core that published the reference
    Fingerprint reference;    // kDifferent: its fingerprint
  };

  /// Publishes core `core`'s fingerprint (its sequence set) and compares it with the reference
  /// of that sequence.
  Result publish(int core, const Fingerprint& fingerprint);
  /// Forgets every sequence (Communicator::reset: sequences restart at 0).
  void clear();

 private:
  // What every core reads shares one cache line (the mutex, the sequence, a hash of the
  // fingerprint, the core); the full fingerprint, on the next lines, is read only on a mismatch.
  struct alignas(64) Entry {
    std::mutex mu;
    uint64_t sequence_plus_one = 0;       // GUARDED_BY(mu); 0: never claimed
    uint64_t hash = 0;                    // GUARDED_BY(mu): hash_of(fingerprint)
    int core = -1;                        // GUARDED_BY(mu)
    alignas(64) Fingerprint fingerprint;  // GUARDED_BY(mu)
  };
  /// A hash of every field but the sequence. Equal hashes are taken for equal fingerprints (a
  /// collision, odds 2^-64, leaves that desync to the links' compare).
  static uint64_t hash_of(const Fingerprint& fp);
  std::array<Entry, kEntries> entries_;
};

}  // namespace vtpu
