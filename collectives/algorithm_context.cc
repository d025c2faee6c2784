#include "vtpu/collectives/algorithm_context.h"

#include <array>
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

namespace {

uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// Hash of the fingerprint fields that decide a collective's buffer sizes (see DirectBuffers).
uint64_t layout_hash(const Fingerprint& fp) {
  uint64_t h = 1469598103934665603ull;
  const uint64_t head[] = {static_cast<uint64_t>(fp.kind),      static_cast<uint64_t>(fp.dtype),
                           static_cast<uint64_t>(fp.algorithm), static_cast<uint64_t>(fp.root),
                           static_cast<uint64_t>(fp.num_dims),  fp.num_elements};
  h = fnv1a(h, head, sizeof head);
  return fnv1a(h, fp.dims.data(), sizeof fp.dims);
}

// What agree_on_parameters gathers from every rank.
struct Parameters {
  int32_t root = 0;
  int32_t num_dims = 0;
  std::array<int64_t, Shape::kMaxDims> dims{};
  uint64_t num_elements = 0;
  uint64_t pairs_hash = 0;
  bool operator==(const Parameters&) const = default;
};

}  // namespace

int AlgorithmContext::core_of(int r) const {
  return r == rank ? link(r, mod(r + 1)).src_core() : link(r, rank).src_core();
}

void AlgorithmContext::fail_disagreement(const std::string& what) const {
  if (on_disagreement) on_disagreement(what);
  throw InvalidArgumentError(fp.to_string() + " disagrees: " + what);
}

void AlgorithmContext::agree_on_parameters() const {
  if (nranks == 1) return;
  AlgorithmContext neutral = *this;
  neutral.fp.root = 0;
  neutral.fp.num_dims = 0;
  neutral.fp.dims = {};
  neutral.fp.num_elements = 0;
  neutral.fp.pairs_hash = 0;
  const size_t n = static_cast<size_t>(nranks);
  std::vector<Parameters> held(n);
  held[0] = Parameters{fp.root, fp.num_dims, fp.dims, fp.num_elements, fp.pairs_hash};
  neutral.bruck_all_gather(reinterpret_cast<std::byte*>(held.data()), sizeof(Parameters));
  for (int q = 0; q < nranks; ++q) {  // rank order: every rank names the same first culprit
    const Parameters& p = held[static_cast<size_t>(mod(q - rank))];
    if (p == held[0]) continue;
    Fingerprint theirs = fp;
    theirs.root = p.root;
    theirs.num_dims = p.num_dims;
    theirs.dims = p.dims;
    theirs.num_elements = p.num_elements;
    theirs.pairs_hash = p.pairs_hash;
    fail_disagreement("core " + std::to_string(core_of(q)) + " called " + theirs.to_string());
  }
}

std::vector<DirectBuffers> AlgorithmContext::exchange_direct_buffers(const void* send,
                                                                     uint64_t send_bytes,
                                                                     void* recv,
                                                                     uint64_t recv_bytes,
                                                                     bool compare_recv) const {
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
  held[0] = DirectBuffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv),
                          send_bytes, recv_bytes, layout_hash(fp)};
  bruck_all_gather(reinterpret_cast<std::byte*>(held.data()), sizeof(DirectBuffers));
  std::vector<DirectBuffers> by_rank(n);
  for (int i = 0; i < nranks; ++i) by_rank[static_cast<size_t>(mod(rank + i))] = held[i];
  // Every rank holds every record: each checks them all in rank order, so all fail alike.
  for (int q = 0; q < nranks; ++q) {
    const DirectBuffers& p = by_rank[static_cast<size_t>(q)];
    const std::string who = "core " + std::to_string(core_of(q));
    if (p.send_bytes != send_bytes) {
      fail_disagreement(who + " passed a send buffer of " + std::to_string(p.send_bytes) +
                        " bytes, this core one of " + std::to_string(send_bytes));
    }
    if (compare_recv && p.recv_bytes != recv_bytes) {
      fail_disagreement(who + " passed a recv buffer of " + std::to_string(p.recv_bytes) +
                        " bytes, this core one of " + std::to_string(recv_bytes));
    }
    if (p.layout != held[0].layout) {
      fail_disagreement(who + " called it with another type, shape, algorithm or root");
    }
  }
  return by_rank;
}

}  // namespace vtpu
