#include "collectives/communicator.h"

#include <cstring>
#include <set>

#include "collectives/ring_all_reduce.h"
#include "collectives/ring_primitives.h"

namespace vtpu {

CommunicatorOptions CommunicatorOptions::from_runtime(const RuntimeOptions& options) {
  CommunicatorOptions o;
  o.link.slot_bytes = options.link_slot_bytes;
  o.link.num_slots = options.link_num_slots;
  o.timeout = options.collective_timeout;
  return o;
}

Communicator::Communicator(Runtime& runtime, std::vector<int> group)
    : Communicator(runtime, std::move(group),
                   CommunicatorOptions::from_runtime(runtime.options())) {}

Communicator::Communicator(Runtime& runtime, std::vector<int> group, CommunicatorOptions options)
    : runtime_(runtime), group_(std::move(group)), options_(std::move(options)) {
  if (group_.empty())
    throw InvalidArgumentError("communicator group is empty (expected >= 1 core)");
  rank_of_core_.assign(static_cast<size_t>(runtime_.num_cores()), -1);
  for (size_t i = 0; i < group_.size(); ++i) {
    const int c = group_[i];
    if (c < 0 || c >= runtime_.num_cores()) {
      throw InvalidArgumentError("communicator group " + group_string() + " names core " +
                                 std::to_string(c) + " (expected 0.." +
                                 std::to_string(runtime_.num_cores() - 1) + ")");
    }
    if (rank_of_core_[static_cast<size_t>(c)] != -1) {
      throw InvalidArgumentError("communicator group " + group_string() + " lists core " +
                                 std::to_string(c) + " twice");
    }
    rank_of_core_[static_cast<size_t>(c)] = static_cast<int>(i);
  }
  if (options_.timeout.count() <= 0 || options_.timeout > RuntimeOptions::kMaxCollectiveTimeout) {
    throw InvalidArgumentError("collective timeout is " + std::to_string(options_.timeout.count()) +
                               " ms (expected 1.." +
                               std::to_string(RuntimeOptions::kMaxCollectiveTimeout.count()) + ")");
  }
  if (group_.size() > 1 && options_.link.num_slots < 2) {
    throw InvalidArgumentError("link num_slots is " + std::to_string(options_.link.num_slots) +
                               " (expected >= 2: ring steps hold a received slot while they wait "
                               "for a send slot, so a link needs double buffering)");
  }
  if (!options_.transport) options_.transport = std::make_shared<InProcessTransport>();
  const size_t n = group_.size();
  if (n > 1) {
    for (size_t i = 0; i < n; ++i) {
      links_.push_back(options_.transport->connect(group_[i], group_[(i + 1) % n], options_.link));
    }
  }
  sequence_.assign(n, 0);
  entered_ = std::make_unique<std::atomic<uint64_t>[]>(n);
  stats_.assign(n, CollectiveStats{});
  abort_handler_id_ = runtime_.add_abort_handler([this](int core, const std::exception_ptr& e) {
    if (core < 0 || core >= static_cast<int>(rank_of_core_.size()) ||
        rank_of_core_[static_cast<size_t>(core)] < 0) {
      return;
    }
    std::string what = "unknown error";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    abort("core " + std::to_string(core) + " failed: " + what);
  });
}

Communicator::~Communicator() { runtime_.remove_abort_handler(abort_handler_id_); }

std::string Communicator::group_string() const {
  std::string s = "{";
  for (size_t i = 0; i < group_.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(group_[i]);
  }
  s += '}';
  return s;
}

int Communicator::rank_of(int core_id) const {
  if (core_id < 0 || core_id >= static_cast<int>(rank_of_core_.size()) ||
      rank_of_core_[static_cast<size_t>(core_id)] < 0) {
    throw InvalidArgumentError("core " + std::to_string(core_id) +
                               " is not in communicator group " + group_string());
  }
  return rank_of_core_[static_cast<size_t>(core_id)];
}

void Communicator::abort(const std::string& reason) {
  {
    std::lock_guard lock(abort_mu_);
    if (aborted_.load(std::memory_order_relaxed)) return;
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  for (auto& link : links_) link->abort(reason);
}

void Communicator::reset() {
  std::lock_guard lock(abort_mu_);
  for (auto& link : links_) link->reset();
  std::fill(sequence_.begin(), sequence_.end(), 0);
  for (size_t i = 0; i < group_.size(); ++i) entered_[i].store(0);
  abort_reason_.clear();
  aborted_.store(false, std::memory_order_release);
}

CollectiveStats Communicator::stats(int core_id) const {
  return stats_[static_cast<size_t>(rank_of(core_id))];
}

void Communicator::reset_stats() { std::fill(stats_.begin(), stats_.end(), CollectiveStats{}); }

std::string Communicator::missing_cores(uint64_t sequence) const {
  std::string s;
  for (size_t i = 0; i < group_.size(); ++i) {
    if (entered_[i].load(std::memory_order_acquire) <= sequence) {
      if (!s.empty()) s += ',';
      s += std::to_string(group_[i]);
    }
  }
  if (s.empty()) return "none (all cores entered; a core is slow or stuck inside)";
  return "{" + s + "}";
}

void Communicator::rethrow_with_context(int rank, const Fingerprint& fp) {
  const int core = group_[static_cast<size_t>(rank)];
  try {
    throw;
  } catch (const DeadlineExceededError& e) {
    const std::string msg = fp.to_string() + " in group " + group_string() + " on core " +
                            std::to_string(core) + " timed out after " +
                            std::to_string(options_.timeout.count()) + " ms (" + e.message() +
                            "); cores that have not reached sequence " +
                            std::to_string(fp.sequence) + ": " + missing_cores(fp.sequence);
    abort(msg);
    throw DeadlineExceededError(msg);
  } catch (const AbortedError&) {
    throw;
  } catch (const Error& e) {
    abort("core " + std::to_string(core) + " failed in " + fp.to_string() + ": " + e.what());
    throw;
  }
}

namespace {

template <typename T>
void run_all_reduce(Link& prev, Link& next, const Fingerprint& fp,
                    std::chrono::milliseconds timeout,
                    const std::function<void(const Fingerprint&)>& on_mismatch, int rank,
                    int nranks, const void* send, void* recv, uint64_t count) {
  RingPrimitives<T> prims(prev, next, fp, timeout, on_mismatch);
  if (count == 0) {
    // Nothing to reduce, but the fingerprints must still meet: one empty message round the ring,
    // so that a core calling with 0 elements while its peers pass N fails at once.
    prims.send(nullptr, 0);
    prims.recv(nullptr, 0);
    return;
  }
  ring_all_reduce<T>(prims, rank, nranks, static_cast<const T*>(send), static_cast<T*>(recv),
                     count);
}

}  // namespace

void Communicator::all_reduce_bytes(CoreContext& ctx, DataType dtype, const void* send, void* recv,
                                    uint64_t count, ReduceOp op) {
  const int rank = rank_of(ctx.core_id());
  const auto start = std::chrono::steady_clock::now();
  const uint64_t elem = data_type_bytes(dtype);
  const uint64_t nbytes = count * elem;
  if (send != recv && nbytes > 0) {
    const auto* s = static_cast<const std::byte*>(send);
    const auto* r = static_cast<const std::byte*>(recv);
    if (s < r + nbytes && r < s + nbytes) {
      throw InvalidArgumentError(
          "all_reduce send and recv buffers partially overlap (expected "
          "the same buffer for in place, or disjoint buffers)");
    }
  }
  const size_t ri = static_cast<size_t>(rank);
  Fingerprint fp{CollectiveKind::kAllReduce, dtype, op, count, sequence_[ri]++};
  entered_[ri].store(fp.sequence + 1, std::memory_order_release);
  if (aborted()) {
    std::lock_guard lock(abort_mu_);
    throw AbortedError(fp.to_string() + " on core " + std::to_string(ctx.core_id()) +
                       ": communicator " + group_string() + " was aborted (" + abort_reason_ +
                       "); call reset() before reusing it");
  }
  const int n = size();
  if (n == 1) {
    if (send != recv && nbytes > 0) std::memcpy(recv, send, nbytes);
  } else {
    Link& prev = *links_[static_cast<size_t>((rank + n - 1) % n)];
    Link& next = *links_[ri];
    auto on_mismatch = [&](const Fingerprint& theirs) {
      throw InvalidArgumentError(
          "collective mismatch in group " + group_string() + ": core " +
          std::to_string(ctx.core_id()) + " called " + fp.to_string() + " but core " +
          std::to_string(prev.src_core()) + " called " + theirs.to_string() +
          " (every core in the group must call the same collectives with the same type, "
          "shape and op, in the same order)");
    };
    try {
      visit_data_type(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        run_all_reduce<T>(prev, next, fp, options_.timeout, on_mismatch, rank, n, send, recv,
                          count);
      });
    } catch (...) {
      rethrow_with_context(rank, fp);
    }
  }
  CollectiveStats& st = stats_[ri];
  ++st.num_collectives;
  st.bytes += nbytes;
  st.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace vtpu
