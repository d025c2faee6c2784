#include "collectives/algorithm_context.h"

#include <cstring>
#include <string>

#include "common/error.h"

namespace vtpu {

void AlgorithmContext::sendrecv(int to_rank, const void* src, uint64_t send_bytes, int from_rank,
                                void* dst, uint64_t recv_bytes) const {
  Link* to = to_rank < 0 ? nullptr : &link(rank, to_rank);
  Link* from = from_rank < 0 ? nullptr : &link(from_rank, rank);
  auto pieces = [](Link* l, uint64_t bytes) -> uint64_t {
    if (!l) return 0;
    return std::max<uint64_t>(1, (bytes + l->slot_bytes() - 1) / l->slot_bytes());
  };
  const uint64_t ps = pieces(to, send_bytes);
  const uint64_t pr = pieces(from, recv_bytes);
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  for (uint64_t i = 0; i < std::max(ps, pr); ++i) {
    if (i < ps) {
      const uint64_t off = i * to->slot_bytes();
      const uint64_t len = std::min(to->slot_bytes(), send_bytes - std::min(off, send_bytes));
      std::byte* slot = to->acquire_send_slot(std::chrono::steady_clock::now() + timeout);
      if (len) std::memcpy(slot, s + off, len);
      to->commit_send(fp, len);
    }
    if (i < pr) {
      const uint64_t off = i * from->slot_bytes();
      const uint64_t len = std::min(from->slot_bytes(), recv_bytes - std::min(off, recv_bytes));
      ReceivedSlot r = from->acquire_recv_slot(std::chrono::steady_clock::now() + timeout);
      if (on_mismatch && !(r.fingerprint == fp)) on_mismatch(*from, r.fingerprint);
      if (r.payload_bytes != len) {
        throw InternalError("exchange expected " + std::to_string(len) +
                            " payload bytes from core " + std::to_string(from->src_core()) +
                            ", got " + std::to_string(r.payload_bytes) + " (" + fp.to_string() +
                            ")");
      }
      if (len) std::memcpy(d + off, r.data, len);
      from->release_recv();
    }
  }
}

}  // namespace vtpu
