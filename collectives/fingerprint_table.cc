#include "vtpu/collectives/fingerprint_table.h"

namespace vtpu {

uint64_t FingerprintTable::hash_of(const Fingerprint& fp) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields, word by word
  const auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(static_cast<uint64_t>(fp.kind) | static_cast<uint64_t>(fp.dtype) << 8 |
      static_cast<uint64_t>(fp.reduce_op) << 16 | static_cast<uint64_t>(fp.algorithm) << 24 |
      static_cast<uint64_t>(fp.tiled) << 32);
  mix(static_cast<uint64_t>(fp.num_dims));
  mix(fp.num_elements);
  for (int i = 0; i < fp.num_dims && i < Shape::kMaxDims; ++i) {
    mix(static_cast<uint64_t>(fp.dims[static_cast<size_t>(i)]));
  }
  mix(static_cast<uint64_t>(static_cast<uint32_t>(fp.axis)) |
      static_cast<uint64_t>(static_cast<uint32_t>(fp.concat_axis)) << 32);
  mix(static_cast<uint64_t>(static_cast<uint32_t>(fp.root)));
  mix(fp.pairs_hash);
  return h;
}

FingerprintTable::Result FingerprintTable::publish(int core, const Fingerprint& fingerprint) {
  const uint64_t key = fingerprint.sequence + 1;
  const uint64_t hash = hash_of(fingerprint);
  Entry& e = entries_[fingerprint.sequence % kEntries];
  std::lock_guard lock(e.mu);
  Result r;
  if (e.sequence_plus_one < key) {
    e.sequence_plus_one = key;
    e.hash = hash;
    e.core = core;
    e.fingerprint = fingerprint;
  } else if (e.sequence_plus_one > key) {
    r.outcome = Outcome::kPassed;
  } else if (e.hash == hash) {
    r.outcome = Outcome::kSame;
  } else {
    r = {Outcome::kDifferent, e.core, e.fingerprint};
  }
  return r;
}

void FingerprintTable::clear() {
  for (Entry& e : entries_) {
    std::lock_guard lock(e.mu);
    e.sequence_plus_one = 0;
    e.core = -1;
  }
}

}  // namespace vtpu
