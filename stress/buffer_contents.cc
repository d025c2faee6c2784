#include "vtpu/stress/buffer_contents.h"

#include <bit>
#include <cstring>

namespace vtpu {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t checksum_bytes(const std::byte* p, uint64_t n) {
  uint64_t h = 0x84222325CBF29CE4ULL ^ n;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = std::rotl(h ^ w, 29) * 0x100000001B3ULL;
  }
  for (; i < n; ++i) h = (h ^ static_cast<uint64_t>(p[i])) * 0x100000001B3ULL;
  return h;
}

void fill_seeded(std::byte* p, uint64_t n, uint64_t seed) {
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = mix64(seed + i);
    std::memcpy(p + i, &w, 8);
  }
  const uint64_t w = mix64(seed + i);
  std::memcpy(p + i, &w, n - i);
}

}  // namespace vtpu
