#include "vtpu/collectives/collective_permute.h"

#include <cstring>

namespace vtpu {

void permute(const AlgorithmContext& ac, std::span<const std::byte> send, std::span<std::byte> recv,
             int to, int from) {
  const uint64_t bytes = send.size();
  ac.agree_on_parameters();
  if (to == ac.rank) {  // a pair (r, r): keep the input
    if (send.data() != recv.data() && bytes) std::memcpy(recv.data(), send.data(), bytes);
  } else if (to >= 0 || from >= 0) {
    ac.sendrecv(to, send.data(), to >= 0 ? bytes : 0, from, recv.data(), from >= 0 ? bytes : 0);
  }
  if (from < 0 && bytes) std::memset(recv.data(), 0, bytes);  // receives nothing: zeros
}

}  // namespace vtpu
