// Seeded buffer contents and their checksum, so a harness can tell whether a buffer still holds
// what was written to it after the arena moved it (defragmentation) or another core read it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vtpu {

/// splitmix64's finaliser (Vigna): a well-mixed 64-bit value from a counter. Pure function.
uint64_t mix64(uint64_t z);

/// 64-bit checksum of `n` bytes at `p`: words folded with a rotate and an odd multiplier, then the
/// tail. Any single changed byte changes it. Pure function.
uint64_t checksum_bytes(const std::byte* p, uint64_t n);

/// Fills `n` bytes at `p` with the sequence of `seed` (mix64 of seed + offset, word by word).
/// Thread-compatible.
void fill_seeded(std::byte* p, uint64_t n, uint64_t seed);

}  // namespace vtpu
