#include "vtpu/collectives/broadcast.h"

#include <cstdint>
#include <cstring>

namespace vtpu {

void chain_broadcast(const AlgorithmContext& ac, std::span<const std::byte> send,
                     std::span<std::byte> recv, int root) {
  const uint64_t bytes = recv.size();
  const int pos = ac.mod(ac.rank - root);  // position along the chain root, root+1, ...
  ac.agree_on_parameters();
  if (pos == 0 && send.data() != recv.data() && bytes) {
    std::memcpy(recv.data(), send.data(), bytes);
  }
  if (ac.nranks == 1) return;
  Primitives<uint8_t> prims = ac.prims<uint8_t>(pos == 0 ? -1 : ac.mod(ac.rank - 1),
                                                pos == ac.nranks - 1 ? -1 : ac.mod(ac.rank + 1));
  const Pieces pieces{prims.slot_elements(), bytes};
  auto* data = reinterpret_cast<uint8_t*>(recv.data());
  for (uint64_t t = 0; t < pieces.size(); ++t) {
    const uint64_t off = pieces[t].offset, len = pieces[t].length;
    if (pos == 0) {
      prims.send(data + off, len);
    } else if (pos < ac.nranks - 1) {
      prims.recv_copy_send(data + off, len);
    } else {
      prims.recv(data + off, len);
    }
  }
}

}  // namespace vtpu
