#include "vtpu/collectives/algorithm_context.h"

#include <cstring>
#include <string>

#include "vtpu/common/error.h"

namespace vtpu {

AlgorithmContext AlgorithmContext::subgroup(int first_rank, int num_ranks) const {
  AlgorithmContext sub = *this;
  sub.rank = rank - first_rank;
  sub.nranks = num_ranks;
  sub.link = [this, first_rank](int s, int d) -> Link& {
    return link(first_rank + s, first_rank + d);
  };
  sub.rank_process = {};
  return sub;
}

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

void AlgorithmContext::bruck_all_gather(std::byte* held, uint64_t block_bytes) const {
  for (int dist = 1; dist < nranks; dist *= 2) {
    const int m = std::min(dist, nranks - dist);  // blocks that travel this step
    const uint64_t bytes = static_cast<uint64_t>(m) * block_bytes;
    sendrecv(mod(rank - dist), held, bytes, mod(rank + dist),
             held + static_cast<uint64_t>(dist) * block_bytes, bytes);
  }
}

void AlgorithmContext::barrier() const {
  for (int dist = 1; dist < nranks; dist *= 2) {
    sendrecv(mod(rank + dist), nullptr, 0, mod(rank - dist), nullptr, 0);
  }
}

bool AlgorithmContext::direct_access_supported() const {
  for (int dist = 1; dist < nranks; dist *= 2) {
    for (const Link* l : {&link(rank, mod(rank - dist)), &link(mod(rank + dist), rank),
                          &link(rank, mod(rank + dist)), &link(mod(rank - dist), rank)}) {
      if (!l->supports_direct_access()) return false;
    }
  }
  return true;
}

std::vector<DirectBuffers> AlgorithmContext::exchange_direct_buffers(const void* send,
                                                                     void* recv) const {
  for (int dist = 1; dist < nranks; dist *= 2) {
    for (const Link* l : {&link(rank, mod(rank - dist)), &link(mod(rank + dist), rank)}) {
      if (!l->supports_direct_access()) {
        throw UnimplementedError("link " + std::to_string(l->src_core()) + "->" +
                                 std::to_string(l->dst_core()) +
                                 " does not support direct access (" + fp.to_string() +
                                 " needs it; use a slot-copy algorithm such as ring)");
      }
    }
  }
  const size_t n = static_cast<size_t>(nranks);
  std::vector<DirectBuffers> held(n);
  held[0] = DirectBuffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv)};
  bruck_all_gather(reinterpret_cast<std::byte*>(held.data()), sizeof(DirectBuffers));
  std::vector<DirectBuffers> by_rank(n);
  for (int i = 0; i < nranks; ++i) by_rank[static_cast<size_t>(mod(rank + i))] = held[i];
  return by_rank;
}

}  // namespace vtpu
