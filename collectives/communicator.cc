#include "vtpu/collectives/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string_view>
#include <thread>

#include "vtpu/collectives/algorithm_context.h"
#include "vtpu/collectives/all_gather.h"
#include "vtpu/collectives/all_reduce_algorithms.h"
#include "vtpu/collectives/all_to_all.h"
#include "vtpu/collectives/block_exchange.h"
#include "vtpu/collectives/broadcast.h"
#include "vtpu/collectives/collective_permute.h"
#include "vtpu/collectives/desync_error.h"
#include "vtpu/collectives/hierarchical_all_reduce.h"
#include "vtpu/collectives/reduce.h"
#include "vtpu/collectives/reduce_scatter.h"
#include "vtpu/collectives/ring_all_reduce.h"
#include "vtpu/collectives/ring_primitives.h"

namespace vtpu {

namespace {

thread_local bool t_in_comm_worker = false;  // true while a started collective runs

using detail::DesyncError;

uint64_t product(std::span<const int64_t> dims, size_t begin, size_t end) {
  uint64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= static_cast<uint64_t>(dims[i]);
  return p;
}

std::string elems(uint64_t bytes, uint64_t elem) {
  return std::to_string(bytes) + " bytes (" + std::to_string(bytes / elem) + " elements)";
}

/// Throws InvalidArgumentError unless `span_bytes` is exactly `elements` elements.
void check_size(const char* op, const char* which, uint64_t span_bytes, uint64_t elements,
                uint64_t elem, const std::string& shape_text) {
  if (span_bytes != elements * elem) {
    throw InvalidArgumentError(std::string(op) + " " + which + " buffer has " +
                               elems(span_bytes, elem) + " but shape " + shape_text + " needs " +
                               std::to_string(elements) + " elements (" +
                               std::to_string(elements * elem) + " bytes)");
  }
}

std::string dims_text(std::span<const int64_t> d) { return Shape::of(d).to_string(); }

uint64_t hash_pairs(std::span<const PermutePair> pairs) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const auto& [s, d] : pairs) {
    for (int v : {s, d}) {
      h ^= static_cast<uint32_t>(v);
      h *= 1099511628211ull;
    }
  }
  return h;
}

/// Checks an op whose input and output have the same shape: both buffers hold the shape's
/// elements, and they are the same buffer (in place) or disjoint.
void check_same_shape_buffers(const char* op, std::span<const std::byte> send,
                              std::span<std::byte> recv, uint64_t count, uint64_t elem,
                              const Shape& s) {
  check_size(op, "send", send.size(), count, elem, s.to_string());
  check_size(op, "recv", recv.size(), count, elem, s.to_string());
  if (send.data() != recv.data() &&
      bytes_overlap(send.data(), send.size(), recv.data(), recv.size())) {
    throw InvalidArgumentError(std::string(op) +
                               " send and recv buffers partially overlap (expected the same "
                               "buffer for in place, or disjoint buffers)");
  }
}

/// The fingerprint fields that decide the sizes and the pattern of a collective's messages:
/// compared on every received message whatever desync_check says.
bool same_message_layout(const Fingerprint& a, const Fingerprint& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.algorithm == b.algorithm && a.root == b.root &&
         a.num_dims == b.num_dims && a.num_elements == b.num_elements && a.dims == b.dims;
}

Fingerprint make_fingerprint(CollectiveKind kind, DataType dtype, const Shape& s,
                             Algorithm algorithm) {
  Fingerprint fp;
  fp.kind = kind;
  fp.dtype = dtype;
  fp.set_shape(s);
  fp.algorithm = algorithm;
  return fp;
}

/// Validation shared by the rooted operations (broadcast, reduce): the root is a rank, the
/// buffers match the shape (send only where it is read, recv where it is written or given), and
/// the root's buffers are the same or disjoint.
void check_rooted(const char* op, int root, int n, bool is_root, bool send_needed,
                  std::span<const std::byte> send, std::span<std::byte> recv, uint64_t count,
                  uint64_t elem, const Shape& s) {
  if (root < 0 || root >= n) {
    throw InvalidArgumentError(std::string(op) + " root is " + std::to_string(root) +
                               " (expected a rank 0.." + std::to_string(n - 1) + ")");
  }
  if (send_needed) check_size(op, "send", send.size(), count, elem, s.to_string());
  if (!recv.empty() || is_root || std::string_view(op) == "broadcast") {
    check_size(op, "recv", recv.size(), count, elem, s.to_string());
  }
  if (is_root && send.data() != recv.data() &&
      bytes_overlap(send.data(), send.size(), recv.data(), recv.size())) {
    throw InvalidArgumentError(std::string(op) + " send and recv buffers partially overlap");
  }
}

}  // namespace

CommunicatorOptions CommunicatorOptions::from_runtime(const RuntimeOptions& options) {
  CommunicatorOptions o;
  o.link.slot_bytes = options.link_slot_bytes;
  o.link.num_slots = options.link_num_slots;
  o.timeout = options.effective_collective_timeout();
  o.algorithm = parse_algorithm(options.collective_algorithm);
  return o;
}

Communicator::Communicator(Runtime& runtime, std::vector<int> group)
    : Communicator(runtime, std::move(group),
                   CommunicatorOptions::from_runtime(runtime.options())) {}

Communicator::Communicator(Runtime& runtime, std::vector<int> group, CommunicatorOptions options)
    : runtime_(runtime), group_(std::move(group)), options_(std::move(options)) {
  options_.link.process_cores = runtime_.local_num_cores();
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
  if (group_.size() > 1 && options_.link.num_slots < kMinSlots) {
    throw InvalidArgumentError("link num_slots is " + std::to_string(options_.link.num_slots) +
                               " (expected >= 2: ring steps hold a received slot while they wait "
                               "for a send slot, so a link needs double buffering)");
  }
  if (options_.link.slot_bytes == 0 || options_.link.slot_bytes % 64 != 0) {
    throw InvalidArgumentError("link slot_bytes is " + std::to_string(options_.link.slot_bytes) +
                               " (expected a positive multiple of 64)");
  }
  const int n = size();
  if (options_.torus_rows < 0 || (options_.torus_rows > 0 && n % options_.torus_rows != 0)) {
    throw InvalidArgumentError("torus_rows is " + std::to_string(options_.torus_rows) +
                               " (expected 0 for automatic, or a divisor of the group size " +
                               std::to_string(n) + ")");
  }
  if (!options_.transport) {
    auto* provider = dynamic_cast<TransportProvider*>(&runtime_.process_group());
    options_.transport = provider ? provider->make_transport(runtime_, group_)
                                  : std::make_shared<InProcessTransport>();
  }
  for (int c : group_) {
    if (runtime_.process_of(c) != runtime_.process_of(group_[0])) spans_processes_ = true;
  }
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  links_ = std::make_unique<std::atomic<Link*>[]>(nn);
  for (size_t i = 0; i < nn; ++i) links_[i].store(nullptr, std::memory_order_relaxed);
  links_aborted_.assign(static_cast<size_t>(n), 0);
  // The clockwise ring every default algorithm uses is made up front; other pairs on first use.
  if (n > 1) {
    for (int i = 0; i < n; ++i) link(i, (i + 1) % n);
    // Direct access is all or nothing for the group's algorithms: a group across processes has
    // links without it (the hierarchical all-reduce uses the in-process links directly).
    direct_access_ = !spans_processes_ && link(0, 1).supports_direct_access();
  }
  init_placement();
  sequence_.assign(static_cast<size_t>(n), 0);
  entered_ = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(n));
  finished_ = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(n));
  stats_.assign(static_cast<size_t>(n), CollectiveStats{});
  started_.resize(static_cast<size_t>(n));
  init_checks();
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
    const std::string reason = "core " + std::to_string(core) + " failed: " + what;
    if (runtime_.is_local(core)) {
      abort_after_finished(core, reason);
    } else if (!options_.transport->carries_failures()) {
      // Another process's progress is not known here: from its desynced collective, else all.
      // (A transport that carries failures brings them with the progress: on_remote_failure.)
      const std::optional<uint64_t> desync = remote_desync_sequence(core, what);
      abort(reason, desync.value_or(0), desync);
    }
  });
}

void Communicator::init_placement() {
  rank_process_ = options_.simulated_process_of_rank;
  if (rank_process_.empty()) {
    for (int c : group_) rank_process_.push_back(runtime_.process_of(c));
  } else if (rank_process_.size() != group_.size() || std::ranges::min(rank_process_) < 0) {
    throw InvalidArgumentError("simulated_process_of_rank has " +
                               std::to_string(rank_process_.size()) + " entries, smallest " +
                               std::to_string(std::ranges::min(rank_process_)) +
                               " (expected one >= 0 per rank of group " + group_string() + ")");
  }
  const ProcessRuns runs = ProcessRuns::of(rank_process_, size());
  placement_error_ = runs.error;
  const int nl = runs.ranks_per_process;
  // A process's ranks are joined by ring links r -> r + 1 (made above): one pair per local run
  // tells whether the transport gives them direct access.
  for (int k = 0; runs.fits() && nl > 1 && k < runs.num_processes; ++k) {
    if (runtime_.is_local(group_[static_cast<size_t>(k * nl)]))
      local_direct_access_ &= link(k * nl, k * nl + 1).supports_direct_access();
  }
  hierarchical_by_default_ = runs.fits() && runs.num_processes > 1 && local_direct_access_;
}

Communicator::~Communicator() {
  if (fingerprints_ && spans_processes_) options_.transport->set_fingerprint_listener(nullptr);
  if (spans_processes_ && options_.transport->carries_failures())
    options_.transport->set_failure_listener(nullptr);
  runtime_.remove_abort_handler(abort_handler_id_);
}

std::vector<std::unique_ptr<Communicator>> Communicator::for_groups(
    Runtime& runtime, const std::vector<std::vector<int>>& groups,
    const CommunicatorOptions& options) {
  std::vector<int> owner(static_cast<size_t>(runtime.num_cores()), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int c : groups[g]) {
      if (c >= 0 && c < runtime.num_cores()) {
        // A core repeated inside one group is the constructor's error ("lists core c twice").
        if (owner[static_cast<size_t>(c)] >= 0 &&
            owner[static_cast<size_t>(c)] != static_cast<int>(g)) {
          throw InvalidArgumentError("core " + std::to_string(c) + " is in replica group " +
                                     std::to_string(owner[static_cast<size_t>(c)]) + " and " +
                                     std::to_string(g) + " (expected disjoint groups)");
        }
        owner[static_cast<size_t>(c)] = static_cast<int>(g);
      }
    }
  }
  std::vector<std::unique_ptr<Communicator>> out;
  for (const auto& g : groups) out.push_back(std::make_unique<Communicator>(runtime, g, options));
  return out;
}

std::vector<std::unique_ptr<Communicator>> Communicator::for_groups(
    Runtime& runtime, const std::vector<std::vector<int>>& groups) {
  return for_groups(runtime, groups, CommunicatorOptions::from_runtime(runtime.options()));
}

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

Link& Communicator::link(int src_rank, int dst_rank) {
  const size_t i = static_cast<size_t>(src_rank) * group_.size() + static_cast<size_t>(dst_rank);
  Link* l = links_[i].load(std::memory_order_acquire);
  if (l) return *l;
  std::lock_guard lock(links_mu_);
  l = links_[i].load(std::memory_order_relaxed);
  if (l) return *l;
  owned_links_.push_back(options_.transport->connect(
      group_[static_cast<size_t>(src_rank)], group_[static_cast<size_t>(dst_rank)], options_.link));
  l = owned_links_.back().get();
  // abort() marks a rank under links_mu_ as it aborts the rank's links: a link made after that
  // sees the mark here.
  if (links_aborted_[static_cast<size_t>(src_rank)] ||
      links_aborted_[static_cast<size_t>(dst_rank)]) {
    std::lock_guard alock(abort_mu_);
    l->abort(abort_reason_);
  }
  links_[i].store(l, std::memory_order_release);
  return *l;
}

void Communicator::reset() {
  std::lock_guard llock(links_mu_);
  std::lock_guard lock(abort_mu_);
  for (auto& l : owned_links_) l->reset();
  std::fill(sequence_.begin(), sequence_.end(), 0);
  for (size_t i = 0; i < group_.size(); ++i) {
    entered_[i].store(0);
    finished_[i].store(0);
  }
  std::fill(links_aborted_.begin(), links_aborted_.end(), 0);
  if (fingerprints_) fingerprints_->clear();
  reset_epoch_.fetch_add(1, std::memory_order_relaxed);
  abort_reason_.clear();
  desync_sequence_.reset();
  desync_reason_.clear();
  abort_from_.store(kNotAborted, std::memory_order_release);
}

CollectiveStats Communicator::stats(int core_id) const {
  return stats_[static_cast<size_t>(rank_of(core_id))];
}

void Communicator::reset_stats() { std::fill(stats_.begin(), stats_.end(), CollectiveStats{}); }

void Communicator::wait_started(CoreContext& ctx) {
  auto& s = started_[static_cast<size_t>(rank_of(ctx.core_id()))];
  if (s) {
    s->wait_done();
    s.reset();
  }
}

CollectiveHandle Communicator::start(CoreContext& ctx, std::function<void(CoreContext&)> op) {
  const int rank = rank_of(ctx.core_id());
  auto state = std::make_shared<detail::AsyncState>();
  const int core_id = ctx.core_id();
  state->abort_group = [this, core_id](const std::string& reason) {
    abort_after_finished(core_id, "core " + std::to_string(core_id) + " failed: " + reason);
  };
  started_[static_cast<size_t>(rank)] = state;
  Runtime& rt = ctx.runtime();
  VirtualCore& core = ctx.core();
  core.comm_executor().post([state, op = std::move(op), &rt, &core] {
    t_in_comm_worker = true;
    std::exception_ptr error;
    try {
      CoreContext c(rt, core);
      op(c);
    } catch (...) {
      error = std::current_exception();
    }
    t_in_comm_worker = false;
    state->finish(error);
  });
  return CollectiveHandle(state);
}

void Communicator::run(CoreContext& ctx, Fingerprint fp, uint64_t input_bytes, const Body& body) {
  const int rank = rank_of(ctx.core_id());
  if (!t_in_comm_worker) wait_started(ctx);  // call order per core: started work runs first
  const auto start_time = std::chrono::steady_clock::now();
  const size_t ri = static_cast<size_t>(rank);
  fp.sequence = sequence_[ri]++;
  // seq_cst, as abort()'s store of abort_from_ and load of entered_: one of the two sees the
  // other, so a core entering an aborted collective either fails here or has its links aborted.
  entered_[ri].store(fp.sequence + 1, std::memory_order_seq_cst);
  FlightRecord record(rings_[ri], recorder_id_, fp, input_bytes, options_.timeout, start_time);
  if (fp.sequence >= abort_from_.load(std::memory_order_seq_cst)) {
    try {
      throw_if_desynced(ctx.core_id(), fp);
      std::lock_guard lock(abort_mu_);
      throw AbortedError(fp.to_string() + " on core " + std::to_string(ctx.core_id()) +
                         ": communicator " + group_string() + " was aborted (" + abort_reason_ +
                         "); call reset() before reusing it");
    } catch (...) {
      record.failed(std::current_exception());
      throw;
    }
  }
  AlgorithmContext ac;
  ac.rank = rank;
  ac.nranks = size();
  ac.fp = fp;
  ac.timeout = options_.timeout;
  ac.link = [this](int s, int d) -> Link& { return link(s, d); };
  const int core_id = ctx.core_id();
  const bool full_check = options_.desync_check;
  ac.on_mismatch = [this, core_id, full_check, fp](const Link& from, const Fingerprint& theirs) {
    if (full_check || !same_message_layout(fp, theirs))
      throw DesyncError(
          detail::desync_message(group_string(), core_id, fp, from.src_core(), theirs));
  };
  ac.on_disagreement = [this, core_id, fp](const std::string& what) {
    throw DesyncError(std::string(detail::kDesyncMarker) + group_string() + ": core " +
                      std::to_string(core_id) + " called " + fp.to_string() + " but " + what +
                      " (every core in the group must call the same collectives with the same "
                      "type, shape, parameters and op, in the same order)");
  };
  ac.direct_users = &direct_users_;
  ac.rank_process = rank_process_;
  try {
    check_group_fingerprint(core_id, fp);
    record.started();
    body(ac);
  } catch (...) {
    try {
      rethrow_with_context(rank, fp);  // aborts the group, so peers leave their waits
    } catch (...) {
      record.failed(std::current_exception());
      wait_for_direct_users();
      throw;
    }
  }
  finished_[ri].store(fp.sequence + 1, std::memory_order_release);
  const auto end_time = std::chrono::steady_clock::now();
  record.finished(CollectiveState::kCompleted, end_time);
  CollectiveStats& st = stats_[ri];
  ++st.num_collectives;
  st.bytes += input_bytes;
  st.seconds += std::chrono::duration<double>(end_time - start_time).count();
}

// Selection, from a quick local timing (tests/collectives/collective_ops_test.cc,
// DISABLED_AlgorithmTimings: default 1 MiB x 4 slots, f32 sum, median of 15, on the 2-CPU
// development machine under a load average of ~4, so +-30%). Median microseconds:
//
//   N  bytes    ring   bidi   rec.doubling  torus   (classic ring, not deterministic)
//   2  4 KiB    10.8   11.6     1.6         12.7     11.3
//   2  16 KiB   14.2   13.7     6.3         24.3      3.9
//   4  1 KiB    27.6   19.8    10.4         12.9     28.2
//   4  16 KiB   23.8   31.6    26.6         71.0     17.4
//   4  1 MiB    1692   1944    6927         3812     1147
//   8  1 KiB    56.2  105.6     5.9         86.9    103.0
//   8  16 KiB   75.2  150.4   195.6        140.7    147.7
//   8  1 MiB    3012   4926   23740        12375     1753
//   8  8 MiB   22187  34120  552840       115130    41915
//
// Recursive doubling (log2 N latency, one local fold) wins up to a few KiB and loses badly above
// (it moves (N-1) S per rank); the unidirectional chain is the fastest deterministic algorithm
// above that for N >= 4 (with 2 CPUs, its one stream per rank beats the bidirectional ring's
// two), and close to the best at N = 2. So: recursive doubling up to 8 KiB, the ring above.
//
// With direct access (in process) the two-shot kDirect replaces the ring above 8 KiB: it moves
// each byte once (the slot algorithms copy it through slots on top) and all ranks work at once.
// `vtpu bench collectives --algorithm X --min-bytes 16K --max-bytes 256K --iters 100`, 2 and 4
// cores, alternating in one run at load 11-13 (median us):
//
//   N  bytes    direct  recursive_doubling  ring
//   2  16 KiB    10.6        36.6            (>8000: futex sleeps under the load)
//   2  64 KiB    15.8        47.6
//   2  256 KiB   39.6      7950
//   4  64 KiB    48.6    >11000
//
// and bench/collectives/compare.sh's tables in bench/RESULTS.md for 64 KiB-32 MiB.
//
// The bound is on the bytes each rank moves, (N-1) S, as well as on S: recursive doubling here is
// a Bruck all-gather of every rank's raw input and a fold in rank order (bitwise the same on every
// rank), so each rank receives (N-1) S and holds N S of scratch. kSmallMessageGroupBytes is what
// the largest measured win moved (8 cores at 8 KiB: 7 x 8 KiB). With S alone deciding,
// `vtpu train mlp --cores 1024 --hidden 7` all-reduced 2144 B by recursive doubling, moved 2.2 GB
// over the group and timed out, while the larger default model (19 KiB, kDirect) finished.
bool Communicator::recursive_doubling_is_small(int group_size, uint64_t bytes) {
  return group_size > 1 && bytes <= kSmallMessageBytes &&
         static_cast<uint64_t>(group_size - 1) * bytes <= kSmallMessageGroupBytes;
}

Algorithm Communicator::select_algorithm(uint64_t bytes) const {
  if (size() == 1) return Algorithm::kLocal;
  if (recursive_doubling_is_small(size(), bytes)) return Algorithm::kRecursiveDoubling;
  if (hierarchical_by_default_) return Algorithm::kHierarchical;
  if (direct_access_) return Algorithm::kDirect;
  if (!options_.deterministic) return Algorithm::kRingReduceScatter;
  return Algorithm::kRing;
}

Algorithm Communicator::resolve_all_reduce_algorithm(Algorithm requested, uint64_t bytes) const {
  Algorithm a = requested != Algorithm::kAuto ? requested : options_.algorithm;
  // Checked before the one-core shortcut, so that a bad choice fails on every group size (it was
  // accepted silently on one core and rejected on two). kLocal is what one core runs, so it is
  // accepted there.
  if (a == Algorithm::kLocal && size() == 1) return Algorithm::kLocal;
  switch (a) {
    case Algorithm::kAuto:
    case Algorithm::kRing:
    case Algorithm::kBidirectionalRing:
    case Algorithm::kRecursiveDoubling:
    case Algorithm::kTorus2d:
    case Algorithm::kRingReduceScatter:
      break;
    case Algorithm::kHierarchical:
      if (!placement_error_.empty())
        throw InvalidArgumentError("all_reduce algorithm hierarchical: " + placement_error_);
      [[fallthrough]];
    case Algorithm::kDirect:
      // One core has no links (and runs kLocal below); a bigger group needs direct access (the
      // hierarchical algorithm only between the ranks of a process).
      if (!(a == Algorithm::kDirect ? direct_access_ : local_direct_access_) && size() > 1) {
        throw UnimplementedError("all_reduce algorithm " + std::string(algorithm_name(a)) +
                                 " needs links with direct access; transport " +
                                 std::string(options_.transport->name()) +
                                 " has none (use ring, bidirectional_ring, recursive_doubling, "
                                 "torus_2d or ring_reduce_scatter)");
      }
      break;
    default:
      throw InvalidArgumentError("all_reduce algorithm " + std::string(algorithm_name(a)) +
                                 " is not an all_reduce algorithm (expected auto, ring, "
                                 "bidirectional_ring, recursive_doubling, torus_2d, "
                                 "ring_reduce_scatter, direct or hierarchical)");
  }
  if (size() == 1) return Algorithm::kLocal;
  if (a == Algorithm::kAuto) a = select_algorithm(bytes);
  return a;
}

// ---- all_reduce ------------------------------------------------------------------------------

void Communicator::all_reduce_bytes(CoreContext& ctx, DataType dtype,
                                    std::span<const std::byte> send, std::span<std::byte> recv,
                                    std::span<const int64_t> shape, ReduceOp op,
                                    CollectiveOptions opts) {
  const uint64_t elem = data_type_bytes(dtype);
  const Shape s = Shape::of(shape);
  const uint64_t count = s.num_elements();
  check_same_shape_buffers("all_reduce", send, recv, count, elem, s);
  Fingerprint fp = make_fingerprint(CollectiveKind::kAllReduce, dtype, s,
                                    resolve_all_reduce_algorithm(opts.algorithm, count * elem));
  fp.reduce_op = op;
  int rows = options_.torus_rows > 0 ? options_.torus_rows : torus_rows_for(size());
  const void* src = send.data();
  void* dst = recv.data();
  run(ctx, fp, count * elem, [&](const AlgorithmContext& ac) {
    if (ac.nranks == 1) {
      if (src != dst && count) std::memcpy(dst, src, count * elem);
      return;
    }
    visit_data_type(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = static_cast<const T*>(src);
      T* y = static_cast<T*>(dst);
      switch (ac.fp.algorithm) {
        case Algorithm::kRing:
          chain_ring_all_reduce<T>(ac, x, y, count);
          break;
        case Algorithm::kBidirectionalRing:
          bidirectional_ring_all_reduce<T>(ac, x, y, count);
          break;
        case Algorithm::kRecursiveDoubling:
          recursive_doubling_all_reduce<T>(ac, x, y, count);
          break;
        case Algorithm::kTorus2d:
          torus_2d_all_reduce<T>(ac, x, y, count, rows);
          break;
        case Algorithm::kDirect:
          direct_all_reduce<T>(ac, x, y, count);
          break;
        case Algorithm::kHierarchical:
          hierarchical_all_reduce<T>(ac, x, y, count);
          break;
        case Algorithm::kRingReduceScatter: {
          RingPrimitives<T> prims(ac.link(ac.mod(ac.rank - 1), ac.rank),
                                  ac.link(ac.rank, ac.mod(ac.rank + 1)), ac.fp, ac.timeout,
                                  ac.on_mismatch);
          if (count == 0) {
            // Fingerprints must still meet: one empty message round the ring.
            prims.send(nullptr, 0);
            prims.recv(nullptr, 0);
          } else {
            ring_all_reduce<T>(prims, ac.rank, ac.nranks, x, y, count);
          }
          break;
        }
        default:
          throw InternalError("unresolved all_reduce algorithm");
      }
    });
  });
}

// ---- all_gather ------------------------------------------------------------------------------

std::vector<int64_t> Communicator::all_gather_shape(std::span<const int64_t> shape, int n, int axis,
                                                    bool tiled) {
  const int rank = static_cast<int>(shape.size());
  const int max_axis = tiled ? rank - 1 : rank;
  if (axis < 0 || axis > max_axis) {
    throw InvalidArgumentError("all_gather axis is " + std::to_string(axis) + " for input shape " +
                               dims_text(shape) + " (expected 0.." + std::to_string(max_axis) +
                               (tiled ? ", tiled" : ", stacked") + ")");
  }
  std::vector<int64_t> out(shape.begin(), shape.end());
  if (tiled) {
    out[static_cast<size_t>(axis)] *= n;
  } else {
    out.insert(out.begin() + axis, n);
  }
  if (out.size() > static_cast<size_t>(Shape::kMaxDims)) {
    throw InvalidArgumentError("all_gather output shape has " + std::to_string(out.size()) +
                               " dimensions (expected at most 8)");
  }
  return out;
}

void Communicator::all_gather_bytes(CoreContext& ctx, DataType dtype,
                                    std::span<const std::byte> send, std::span<std::byte> recv,
                                    std::span<const int64_t> shape, int axis, bool tiled) {
  const uint64_t elem = data_type_bytes(dtype);
  const Shape s = Shape::of(shape);
  const int n = size();
  const std::vector<int64_t> out_shape = all_gather_shape(shape, n, axis, tiled);
  const uint64_t count = s.num_elements();
  check_size("all_gather", "send", send.size(), count, elem, s.to_string());
  check_size("all_gather", "recv", recv.size(), count * static_cast<uint64_t>(n), elem,
             dims_text(out_shape));
  const uint64_t outer = product(shape, 0, static_cast<size_t>(axis));
  const uint64_t block_bytes = count * elem;
  const int my_rank = rank_of(ctx.core_id());
  const bool nccl_in_place =
      outer == 1 && send.data() == recv.data() + static_cast<uint64_t>(my_rank) * block_bytes;
  if (!nccl_in_place && bytes_overlap(send.data(), send.size(), recv.data(), recv.size())) {
    throw InvalidArgumentError(
        "all_gather send and recv buffers overlap (expected disjoint buffers, or NCCL's in place "
        "form: send == recv + rank * send bytes with gathering on a leading axis)");
  }
  Fingerprint fp = make_fingerprint(
      CollectiveKind::kAllGather, dtype, s,
      n == 1 ? Algorithm::kLocal : (direct_access_ ? Algorithm::kDirect : Algorithm::kRing));
  fp.axis = axis;
  fp.tiled = tiled;
  run(ctx, fp, block_bytes, [&](const AlgorithmContext& ac) {
    if (ac.fp.algorithm == Algorithm::kDirect) {
      direct_all_gather(ac, send, recv, outer);
    } else {
      ring_all_gather(ac, send, recv, outer);
    }
  });
}

// ---- reduce_scatter --------------------------------------------------------------------------

std::vector<int64_t> Communicator::reduce_scatter_shape(std::span<const int64_t> shape, int n,
                                                        int scatter_dimension, bool tiled) {
  const int rank = static_cast<int>(shape.size());
  if (scatter_dimension < 0 || scatter_dimension >= rank) {
    throw InvalidArgumentError(
        "reduce_scatter scatter_dimension is " + std::to_string(scatter_dimension) +
        " for input shape " + dims_text(shape) + " (expected 0.." + std::to_string(rank - 1) + ")");
  }
  const int64_t d = shape[static_cast<size_t>(scatter_dimension)];
  if (d % n != 0) {
    throw InvalidArgumentError("reduce_scatter scatter_dimension " +
                               std::to_string(scatter_dimension) + " of input shape " +
                               dims_text(shape) + " has size " + std::to_string(d) +
                               ", which the group size " + std::to_string(n) + " does not divide");
  }
  std::vector<int64_t> out(shape.begin(), shape.end());
  if (tiled) {
    out[static_cast<size_t>(scatter_dimension)] = d / n;
  } else {
    if (d != n) {
      throw InvalidArgumentError(
          "reduce_scatter (not tiled) scatter_dimension " + std::to_string(scatter_dimension) +
          " of input shape " + dims_text(shape) + " has size " + std::to_string(d) +
          " (expected the group size " + std::to_string(n) + "; use tiled for a multiple)");
    }
    out.erase(out.begin() + scatter_dimension);
  }
  return out;
}

void Communicator::reduce_scatter_bytes(CoreContext& ctx, DataType dtype,
                                        std::span<const std::byte> send, std::span<std::byte> recv,
                                        std::span<const int64_t> shape, ReduceOp op,
                                        int scatter_dimension, bool tiled) {
  const uint64_t elem = data_type_bytes(dtype);
  const Shape s = Shape::of(shape);
  const int n = size();
  const std::vector<int64_t> out_shape = reduce_scatter_shape(shape, n, scatter_dimension, tiled);
  const uint64_t count = s.num_elements();
  const uint64_t block = count / static_cast<uint64_t>(n);
  check_size("reduce_scatter", "send", send.size(), count, elem, s.to_string());
  check_size("reduce_scatter", "recv", recv.size(), block, elem, dims_text(out_shape));
  const uint64_t outer = product(shape, 0, static_cast<size_t>(scatter_dimension));
  Fingerprint fp = make_fingerprint(
      CollectiveKind::kReduceScatter, dtype, s,
      n == 1 ? Algorithm::kLocal : (direct_access_ ? Algorithm::kDirect : Algorithm::kPairwise));
  fp.reduce_op = op;
  fp.axis = scatter_dimension;
  fp.tiled = tiled;
  run(ctx, fp, count * elem, [&](const AlgorithmContext& ac) {
    if (ac.fp.algorithm == Algorithm::kDirect) {
      direct_reduce_scatter(ac, dtype, op, send, recv, outer);
    } else {
      pairwise_reduce_scatter(ac, dtype, op, send, recv, outer);
    }
  });
}

// ---- all_to_all ------------------------------------------------------------------------------

std::vector<int64_t> Communicator::all_to_all_shape(std::span<const int64_t> shape, int n,
                                                    int split_axis, int concat_axis) {
  const int rank = static_cast<int>(shape.size());
  for (auto [name, a] : {std::pair{"split_axis", split_axis}, {"concat_axis", concat_axis}}) {
    if (a < 0 || a >= rank) {
      throw InvalidArgumentError(std::string("all_to_all ") + name + " is " + std::to_string(a) +
                                 " for input shape " + dims_text(shape) + " (expected 0.." +
                                 std::to_string(rank - 1) + ")");
    }
  }
  const int64_t d = shape[static_cast<size_t>(split_axis)];
  if (d % n != 0) {
    throw InvalidArgumentError("all_to_all split_axis " + std::to_string(split_axis) +
                               " of input shape " + dims_text(shape) + " has size " +
                               std::to_string(d) + ", which the group size " + std::to_string(n) +
                               " does not divide");
  }
  std::vector<int64_t> out(shape.begin(), shape.end());
  out[static_cast<size_t>(split_axis)] /= n;
  out[static_cast<size_t>(concat_axis)] *= n;
  return out;
}

void Communicator::all_to_all_bytes(CoreContext& ctx, DataType dtype,
                                    std::span<const std::byte> send, std::span<std::byte> recv,
                                    std::span<const int64_t> shape, int split_axis,
                                    int concat_axis) {
  const uint64_t elem = data_type_bytes(dtype);
  const Shape s = Shape::of(shape);
  const int n = size();
  const std::vector<int64_t> out_shape = all_to_all_shape(shape, n, split_axis, concat_axis);
  const uint64_t count = s.num_elements();
  check_size("all_to_all", "send", send.size(), count, elem, s.to_string());
  check_size("all_to_all", "recv", recv.size(), count, elem, dims_text(out_shape));
  std::vector<int64_t> block_shape(shape.begin(), shape.end());
  block_shape[static_cast<size_t>(split_axis)] /= n;
  const uint64_t outer_split = product(shape, 0, static_cast<size_t>(split_axis));
  const uint64_t outer_concat = product(block_shape, 0, static_cast<size_t>(concat_axis));
  Fingerprint fp = make_fingerprint(CollectiveKind::kAllToAll, dtype, s,
                                    n == 1 ? Algorithm::kLocal : Algorithm::kPairwise);
  fp.axis = split_axis;
  fp.concat_axis = concat_axis;
  run(ctx, fp, count * elem, [&](const AlgorithmContext& ac) {
    pairwise_all_to_all(ac, send, recv, outer_split, outer_concat);
  });
}

// ---- collective_permute ----------------------------------------------------------------------

void Communicator::collective_permute_bytes(CoreContext& ctx, DataType dtype,
                                            std::span<const std::byte> send,
                                            std::span<std::byte> recv,
                                            std::span<const int64_t> shape,
                                            std::span<const PermutePair> pairs) {
  const uint64_t elem = data_type_bytes(dtype);
  const Shape s = Shape::of(shape);
  const int n = size();
  const uint64_t count = s.num_elements();
  check_same_shape_buffers("collective_permute", send, recv, count, elem, s);
  std::vector<int> dst_of(static_cast<size_t>(n), -1), src_of(static_cast<size_t>(n), -1);
  for (const auto& [src, dst] : pairs) {
    for (int v : {src, dst}) {
      if (v < 0 || v >= n) {
        throw InvalidArgumentError("collective_permute pair (" + std::to_string(src) + ", " +
                                   std::to_string(dst) + ") names rank " + std::to_string(v) +
                                   " (expected ranks 0.." + std::to_string(n - 1) + " of group " +
                                   group_string() + ")");
      }
    }
    if (dst_of[static_cast<size_t>(src)] != -1) {
      throw InvalidArgumentError("collective_permute lists source " + std::to_string(src) +
                                 " twice (expected each source at most once)");
    }
    if (src_of[static_cast<size_t>(dst)] != -1) {
      throw InvalidArgumentError("collective_permute lists destination " + std::to_string(dst) +
                                 " twice (expected each destination at most once)");
    }
    dst_of[static_cast<size_t>(src)] = dst;
    src_of[static_cast<size_t>(dst)] = src;
  }
  Fingerprint fp =
      make_fingerprint(CollectiveKind::kCollectivePermute, dtype, s, Algorithm::kPairwise);
  fp.pairs_hash = hash_pairs(pairs);
  run(ctx, fp, count * elem, [&](const AlgorithmContext& ac) {
    permute(ac, send, recv, dst_of[static_cast<size_t>(ac.rank)],
            src_of[static_cast<size_t>(ac.rank)]);
  });
}

// ---- broadcast and reduce --------------------------------------------------------------------

void Communicator::broadcast_bytes(CoreContext& ctx, DataType dtype,
                                   std::span<const std::byte> send, std::span<std::byte> recv,
                                   std::span<const int64_t> shape, int root) {
  const uint64_t elem = data_type_bytes(dtype);
  const Shape s = Shape::of(shape);
  const int n = size();
  const uint64_t count = s.num_elements();
  const int my_rank = rank_of(ctx.core_id());
  check_rooted("broadcast", root, n, my_rank == root, my_rank == root, send, recv, count, elem, s);
  Fingerprint fp = make_fingerprint(CollectiveKind::kBroadcast, dtype, s,
                                    n == 1 ? Algorithm::kLocal : Algorithm::kChain);
  fp.root = root;
  run(ctx, fp, count * elem,
      [&](const AlgorithmContext& ac) { chain_broadcast(ac, send, recv, root); });
}

void Communicator::reduce_bytes(CoreContext& ctx, DataType dtype, std::span<const std::byte> send,
                                std::span<std::byte> recv, std::span<const int64_t> shape, int root,
                                ReduceOp op) {
  const uint64_t elem = data_type_bytes(dtype);
  const Shape s = Shape::of(shape);
  const int n = size();
  const uint64_t count = s.num_elements();
  check_rooted("reduce", root, n, rank_of(ctx.core_id()) == root, true, send, recv, count, elem, s);
  Fingerprint fp = make_fingerprint(
      CollectiveKind::kReduce, dtype, s,
      n == 1 ? Algorithm::kLocal : (direct_access_ ? Algorithm::kDirect : Algorithm::kChain));
  fp.reduce_op = op;
  fp.root = root;
  run(ctx, fp, count * elem, [&](const AlgorithmContext& ac) {
    if (ac.nranks == 1) {
      if (send.data() != recv.data() && count) std::memcpy(recv.data(), send.data(), count * elem);
      return;
    }
    visit_data_type(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = reinterpret_cast<const T*>(send.data());
      T* y = reinterpret_cast<T*>(recv.data());
      if (ac.fp.algorithm == Algorithm::kDirect) {
        direct_reduce<T>(ac, x, y, count, root);
      } else {
        chain_reduce<T>(ac, x, y, count, root);
      }
    });
  });
}

// ---- barrier ---------------------------------------------------------------------------------

void Communicator::barrier(CoreContext& ctx) {
  Fingerprint fp;
  fp.kind = CollectiveKind::kBarrier;
  fp.num_dims = 0;
  fp.num_elements = 0;
  fp.algorithm = size() == 1 ? Algorithm::kLocal : Algorithm::kDissemination;
  run(ctx, fp, 0, [&](const AlgorithmContext& ac) { ac.barrier(); });
}

}  // namespace vtpu
