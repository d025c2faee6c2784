// A Communicator is a replica group of cores that run collectives together, with the semantics of
// JAX's lax collectives (psum, all_gather, psum_scatter, all_to_all, ppermute) plus NCCL's
// broadcast, reduce and a barrier. It owns a table of links between its ranks and a sequence
// number per collective. Differences from JAX are listed in docs/COLLECTIVES.md.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/collectives/collective_handle.h"
#include "vtpu/collectives/fingerprint_table.h"
#include "vtpu/collectives/flight_recorder.h"
#include "vtpu/collectives/link.h"
#include "vtpu/collectives/transport.h"
#include "vtpu/collectives/types.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {

struct AlgorithmContext;

struct CommunicatorOptions {
  LinkOptions link;                          // slot bytes and count; default from RuntimeOptions
  std::chrono::milliseconds timeout{30000};  // every wait inside a collective; default 30 s
  std::shared_ptr<Transport> transport;      // null: InProcessTransport
  /// all_reduce algorithm when a call passes kAuto; kAuto (default) selects by size (see
  /// Communicator::select_algorithm).
  Algorithm algorithm = Algorithm::kAuto;
  /// true (default): kAuto only picks algorithms that fold in rank order (bit-identical across
  /// algorithms). false: on links without direct access, kAuto may pick kRingReduceScatter for
  /// large messages (fewer bytes per link, reduction order depending on the chunk; still
  /// identical on every core and every run). With direct access kAuto picks kDirect either way:
  /// it folds in rank order and is the fastest.
  bool deterministic = true;
  /// Rows R of the R x C mesh kTorus2d sees (R must divide the group size); 0 (default): the most
  /// square factorisation with R <= C.
  int torus_rows = 0;
  /// true (default): every core publishes each collective's fingerprint to the group's table
  /// (FingerprintTable; across processes, through the transport) and every received message's
  /// fingerprint is compared with the receiver's, so a desync fails at once naming both sides,
  /// also between cores that no link joins (cost: one compare with the table's reference per
  /// collective, one 120-byte compare per received slot, and across processes one small message
  /// per collective to each other process). false: only the fields that decide the messages'
  /// sizes are compared (op, dtype, shape, algorithm, root: a size mismatch is still
  /// InvalidArgumentError naming both sides); another desync (reduce op, axes, sequence) shows as
  /// a timeout or wrong results.
  bool desync_check = true;
  /// For tests and experiments: the process each rank is taken to live in, one entry >= 0 per
  /// rank (empty, the default: the runtime's placement, Runtime::process_of). It makes the
  /// hierarchical all-reduce, and kAuto's choice of it, treat the ranks as living in those
  /// processes, while the links stay what the transport makes (in process: ring buffers with
  /// direct access), so one process can run what a multi-process run would.
  std::vector<int> simulated_process_of_rank;
  /// Where the cores record their last collectives (flight_recorder.h); null (default): the
  /// process's FlightRecorder::global(), configured by $VTPU_FLIGHT_RECORDER_SIZE and
  /// $VTPU_FLIGHT_RECORDER_DIR.
  std::shared_ptr<FlightRecorder> flight_recorder;
  /// Options from the runtime's link_slot_bytes, link_num_slots, collective_timeout and
  /// collective_algorithm.
  static CommunicatorOptions from_runtime(const RuntimeOptions& options);
};

/// Per-call options.
struct CollectiveOptions {
  Algorithm algorithm = Algorithm::kAuto;  // all_reduce only; kAuto: the communicator's choice
};

/// A (source rank, destination rank) pair of collective_permute.
using PermutePair = std::pair<int, int>;

/// Per-core totals since creation (or the last reset_stats()).
struct CollectiveStats {
  uint64_t num_collectives = 0;
  uint64_t bytes = 0;    // bytes of the user input buffers (elements * element bytes), summed
  double seconds = 0.0;  // wall time inside collectives
};

/// A group of cores (a replica group). Create it on the host, then call its collectives from the
/// cores' SPMD programs.
///
/// Contract (every operation): every core of the group must call the same collectives, with the
/// same element type, shape, parameters and op, in the same order. Each message carries the
/// sender's Fingerprint (op, dtype, shape, parameters, algorithm, sequence number) and the
/// receiver checks it: a mismatch (desync) fails at once on every core of the group with
/// InvalidArgumentError naming both cores' fingerprints, never a partial result. Arrays are
/// row-major; `shape` gives the dims of the input (at most 8) and the byte sizes of send/recv must
/// match the shapes. Buffers are element spans (typed) or byte spans (`*_bytes`); all counts in the
/// error messages say which. Reductions fold in rank order ((x0 op x1) op x2 ...) unless an opt-in
/// non-deterministic algorithm is chosen, so results are bit-identical on every core and run to
/// run. Types: float, double, BFloat16, Float16, int32_t, int64_t; integer sum and prod wrap modulo
/// 2^bits.
///
/// Failure handling: every wait has `timeout`; DeadlineExceededError names the collective, the
/// sequence number and the cores that have not reached it. When a core of the group fails (in a
/// collective, or anywhere in a run_spmd program), the group is aborted from the first collective
/// that core has not finished: cores waiting inside that collective or a later one wake at once
/// with AbortedError carrying the cause (InvalidArgumentError when the cause is a desync of that
/// same collective), and later collectives fail with AbortedError at entry until reset(). A
/// collective the failed core has finished still completes on every core (its messages are
/// already in the links): an abort never takes a finished collective's result.
///
/// Sizes: whatever desync_check says, every message's op, dtype, shape, algorithm and root are
/// compared with the receiver's, and the direct algorithms compare every rank's buffer sizes
/// before touching a peer's buffer, so a size mismatch is InvalidArgumentError naming both sides,
/// never a write outside a buffer or a partial result. Broadcast, reduce by chain and
/// collective_permute first gather every rank's root, element count and pairs, so a disagreement
/// fails on every core.
///
/// Async: each op has a `*_start` form that returns a CollectiveHandle; the collective runs on the
/// core's communication worker (VirtualCore::comm_executor) while the program computes. A core's
/// collectives on one communicator run in call order: a synchronous call first waits for the
/// core's started ones. Buffers must stay alive until wait(). Started collectives of all
/// communicators share the core's one FIFO worker, so cores must start collectives of different
/// communicators in the same relative order (as NCCL requires of one stream); otherwise they
/// wait for each other until the timeout.
///
/// Thread-safe: each core calls from its own thread (its program); abort() from any thread;
/// reset() only when no collective is running. A Communicator must not outlive its Runtime.
class Communicator {
 public:
  /// `group` lists distinct core ids of `runtime`; rank i is group[i] and rings run in that
  /// order. Throws InvalidArgumentError for an empty group, repeated or out-of-range ids, bad
  /// options.
  Communicator(Runtime& runtime, std::vector<int> group);
  Communicator(Runtime& runtime, std::vector<int> group, CommunicatorOptions options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// One communicator per group (JAX's axis_index_groups): e.g. {{0,1,2,3},{4,5,6,7}}. The groups
  /// may run at once. Throws like the constructor.
  static std::vector<std::unique_ptr<Communicator>> for_groups(
      Runtime& runtime, const std::vector<std::vector<int>>& groups,
      const CommunicatorOptions& options);
  static std::vector<std::unique_ptr<Communicator>> for_groups(
      Runtime& runtime, const std::vector<std::vector<int>>& groups);

  const std::vector<int>& group() const { return group_; }
  int size() const { return static_cast<int>(group_.size()); }
  /// Rank of a core in this group; throws InvalidArgumentError if it is not a member.
  int rank_of(int core_id) const;

  /// The all_reduce algorithm kAuto picks for `bytes` of input in this group of N cores: kLocal
  /// for one core; kRecursiveDoubling while bytes <= kSmallMessageBytes and the bytes each rank
  /// receives, (N-1) x bytes, are <= kSmallMessageGroupBytes; otherwise kHierarchical when the
  /// group spans processes (the runtime's or the simulated placement) in equal contiguous runs
  /// whose ranks have direct access, else kDirect when the transport's links support direct
  /// access (in-process), else kRing (or kRingReduceScatter when options().deterministic is
  /// false). See the .cc for the measurement behind it.
  Algorithm select_algorithm(uint64_t bytes) const;
  static constexpr uint64_t kSmallMessageBytes = 8 * 1024;
  static constexpr uint64_t kSmallMessageGroupBytes = 7 * kSmallMessageBytes;
  /// select_algorithm's test for kRecursiveDoubling in a group of `group_size` cores (> 1):
  /// bytes <= kSmallMessageBytes and (group_size - 1) x bytes <= kSmallMessageGroupBytes.
  static bool recursive_doubling_is_small(int group_size, uint64_t bytes);

  // ---- all_reduce (lax.psum / pmax / pmin / pprod; ncclAllReduce) -----------------------------
  /// `send` and `recv` have the same number of elements on every core; `recv` may be `send` (in
  /// place) but may not partially overlap it. Throws InvalidArgumentError (sizes, overlap,
  /// desync, bad algorithm), DeadlineExceededError, AbortedError.
  template <typename T>
  void all_reduce(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                  ReduceOp op = ReduceOp::kSum, CollectiveOptions opts = {}) {
    const int64_t n = static_cast<int64_t>(send.size());
    all_reduce_bytes(ctx, data_type_of<T>(), std::as_bytes(send), std::as_writable_bytes(recv),
                     std::span<const int64_t>(&n, 1), op, opts);
  }
  /// In-place form.
  template <typename T>
  void all_reduce(CoreContext& ctx, std::span<T> inout, ReduceOp op = ReduceOp::kSum,
                  CollectiveOptions opts = {}) {
    all_reduce(ctx, std::span<const T>(inout), inout, op, opts);
  }
  /// Byte-level form: `shape` (dims of both buffers) is carried in the fingerprint.
  void all_reduce_bytes(CoreContext& ctx, DataType dtype, std::span<const std::byte> send,
                        std::span<std::byte> recv, std::span<const int64_t> shape,
                        ReduceOp op = ReduceOp::kSum, CollectiveOptions opts = {});

  // ---- all_gather (lax.all_gather; ncclAllGather) --------------------------------------------
  /// Input `shape` on every core. Stacked (tiled = false): output shape is `shape` with a new
  /// dimension of size N inserted at `axis` (0..rank); tiled: `shape` with dims[axis] * N
  /// (axis 0..rank-1). Output block q is rank q's input. In place as NCCL: axis 0 (or any axis
  /// with all leading dims 1) and send == recv + rank * input bytes. On one core, stacked gives
  /// shape (1, ...) and tiled the input's shape.
  template <typename T>
  void all_gather(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                  std::span<const int64_t> shape, int axis = 0, bool tiled = false) {
    all_gather_bytes(ctx, data_type_of<T>(), std::as_bytes(send), std::as_writable_bytes(recv),
                     shape, axis, tiled);
  }
  void all_gather_bytes(CoreContext& ctx, DataType dtype, std::span<const std::byte> send,
                        std::span<std::byte> recv, std::span<const int64_t> shape, int axis = 0,
                        bool tiled = false);
  /// Output dims of all_gather for input `shape` on `n` cores. Throws InvalidArgumentError for a
  /// bad axis.
  static std::vector<int64_t> all_gather_shape(std::span<const int64_t> shape, int n, int axis,
                                               bool tiled);

  // ---- reduce_scatter (lax.psum_scatter; ncclReduceScatter) ----------------------------------
  /// Reduces the inputs (shape `shape` everywhere, folded in rank order) and gives rank q block q
  /// along `scatter_dimension`, which N must divide (InvalidArgumentError naming it otherwise).
  /// Tiled: output dims[scatter_dimension] / N; not tiled: dims[scatter_dimension] must equal N
  /// and that dimension is removed. send and recv may overlap in any way (inputs are read before
  /// the output is written).
  template <typename T>
  void reduce_scatter(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                      std::span<const int64_t> shape, ReduceOp op = ReduceOp::kSum,
                      int scatter_dimension = 0, bool tiled = false) {
    reduce_scatter_bytes(ctx, data_type_of<T>(), std::as_bytes(send), std::as_writable_bytes(recv),
                         shape, op, scatter_dimension, tiled);
  }
  void reduce_scatter_bytes(CoreContext& ctx, DataType dtype, std::span<const std::byte> send,
                            std::span<std::byte> recv, std::span<const int64_t> shape,
                            ReduceOp op = ReduceOp::kSum, int scatter_dimension = 0,
                            bool tiled = false);
  static std::vector<int64_t> reduce_scatter_shape(std::span<const int64_t> shape, int n,
                                                   int scatter_dimension, bool tiled);

  // ---- all_to_all (lax.all_to_all) -----------------------------------------------------------
  /// Splits the input along `split_axis` into N blocks, sends block q to rank q, and concatenates
  /// the received blocks along `concat_axis` in rank order: output dims are the input's with
  /// dims[split_axis] / N and then dims[concat_axis] * N. N must divide dims[split_axis]
  /// (InvalidArgumentError otherwise). send and recv may overlap in any way.
  template <typename T>
  void all_to_all(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                  std::span<const int64_t> shape, int split_axis, int concat_axis) {
    all_to_all_bytes(ctx, data_type_of<T>(), std::as_bytes(send), std::as_writable_bytes(recv),
                     shape, split_axis, concat_axis);
  }
  void all_to_all_bytes(CoreContext& ctx, DataType dtype, std::span<const std::byte> send,
                        std::span<std::byte> recv, std::span<const int64_t> shape, int split_axis,
                        int concat_axis);
  static std::vector<int64_t> all_to_all_shape(std::span<const int64_t> shape, int n,
                                               int split_axis, int concat_axis);

  // ---- collective_permute (lax.ppermute) -----------------------------------------------------
  /// Rank `source` sends its input to rank `destination` for every pair; a rank that is no
  /// destination gets zeros. Every core passes the same list, in the same order (its hash is in
  /// the fingerprint). A source or destination listed twice, or a rank outside [0, N), is
  /// InvalidArgumentError. `recv` may be `send` (in place). Every rank first gathers every rank's
  /// pairs hash and shape (ceil(log2 N) rounds of small messages), so cores that pass different
  /// pairs or sizes all fail at once naming both, whatever desync_check says.
  template <typename T>
  void collective_permute(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                          std::span<const PermutePair> pairs) {
    const int64_t n = static_cast<int64_t>(send.size());
    collective_permute_bytes(ctx, data_type_of<T>(), std::as_bytes(send),
                             std::as_writable_bytes(recv), std::span<const int64_t>(&n, 1), pairs);
  }
  void collective_permute_bytes(CoreContext& ctx, DataType dtype, std::span<const std::byte> send,
                                std::span<std::byte> recv, std::span<const int64_t> shape,
                                std::span<const PermutePair> pairs);

  // ---- broadcast (ncclBroadcast) and reduce (ncclReduce) -------------------------------------
  /// Every rank's `recv` gets rank `root`'s `send` (send is read only on the root; recv may be
  /// send).
  template <typename T>
  void broadcast(CoreContext& ctx, std::span<const T> send, std::span<T> recv, int root) {
    const int64_t n = static_cast<int64_t>(recv.size());
    broadcast_bytes(ctx, data_type_of<T>(), std::as_bytes(send), std::as_writable_bytes(recv),
                    std::span<const int64_t>(&n, 1), root);
  }
  template <typename T>
  void broadcast(CoreContext& ctx, std::span<T> inout, int root) {
    broadcast(ctx, std::span<const T>(inout), inout, root);
  }
  /// `send` must have shape's elements on the root (other ranks may pass an empty span).
  void broadcast_bytes(CoreContext& ctx, DataType dtype, std::span<const std::byte> send,
                       std::span<std::byte> recv, std::span<const int64_t> shape, int root);

  /// Rank `root`'s `recv` gets the rank-order fold of every rank's `send`; recv on other ranks is
  /// not written (it may be empty there). recv may be send.
  template <typename T>
  void reduce(CoreContext& ctx, std::span<const T> send, std::span<T> recv, int root,
              ReduceOp op = ReduceOp::kSum) {
    const int64_t n = static_cast<int64_t>(send.size());
    reduce_bytes(ctx, data_type_of<T>(), std::as_bytes(send), std::as_writable_bytes(recv),
                 std::span<const int64_t>(&n, 1), root, op);
  }
  void reduce_bytes(CoreContext& ctx, DataType dtype, std::span<const std::byte> send,
                    std::span<std::byte> recv, std::span<const int64_t> shape, int root,
                    ReduceOp op = ReduceOp::kSum);

  // ---- barrier -------------------------------------------------------------------------------
  /// Returns once every core of the group has entered the barrier (dissemination, ceil(log2 N)
  /// rounds of empty messages).
  void barrier(CoreContext& ctx);

  // ---- async forms: same arguments, return a handle; see CollectiveHandle --------------------
  template <typename T>
  CollectiveHandle all_reduce_start(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                                    ReduceOp op = ReduceOp::kSum, CollectiveOptions opts = {}) {
    return start(ctx, [=, this](CoreContext& c) { all_reduce<T>(c, send, recv, op, opts); });
  }
  template <typename T>
  CollectiveHandle all_reduce_start(CoreContext& ctx, std::span<T> inout,
                                    ReduceOp op = ReduceOp::kSum, CollectiveOptions opts = {}) {
    return all_reduce_start(ctx, std::span<const T>(inout), inout, op, opts);
  }
  template <typename T>
  CollectiveHandle all_gather_start(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                                    std::span<const int64_t> shape, int axis = 0,
                                    bool tiled = false) {
    std::vector<int64_t> dims(shape.begin(), shape.end());
    return start(ctx,
                 [=, this](CoreContext& c) { all_gather<T>(c, send, recv, dims, axis, tiled); });
  }
  template <typename T>
  CollectiveHandle reduce_scatter_start(CoreContext& ctx, std::span<const T> send,
                                        std::span<T> recv, std::span<const int64_t> shape,
                                        ReduceOp op = ReduceOp::kSum, int scatter_dimension = 0,
                                        bool tiled = false) {
    std::vector<int64_t> dims(shape.begin(), shape.end());
    return start(ctx, [=, this](CoreContext& c) {
      reduce_scatter<T>(c, send, recv, dims, op, scatter_dimension, tiled);
    });
  }
  template <typename T>
  CollectiveHandle all_to_all_start(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                                    std::span<const int64_t> shape, int split_axis,
                                    int concat_axis) {
    std::vector<int64_t> dims(shape.begin(), shape.end());
    return start(ctx, [=, this](CoreContext& c) {
      all_to_all<T>(c, send, recv, dims, split_axis, concat_axis);
    });
  }
  template <typename T>
  CollectiveHandle collective_permute_start(CoreContext& ctx, std::span<const T> send,
                                            std::span<T> recv, std::span<const PermutePair> pairs) {
    std::vector<PermutePair> p(pairs.begin(), pairs.end());
    return start(ctx, [=, this](CoreContext& c) { collective_permute<T>(c, send, recv, p); });
  }
  template <typename T>
  CollectiveHandle broadcast_start(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                                   int root) {
    return start(ctx, [=, this](CoreContext& c) { broadcast<T>(c, send, recv, root); });
  }
  template <typename T>
  CollectiveHandle reduce_start(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                                int root, ReduceOp op = ReduceOp::kSum) {
    return start(ctx, [=, this](CoreContext& c) { reduce<T>(c, send, recv, root, op); });
  }
  CollectiveHandle barrier_start(CoreContext& ctx) {
    return start(ctx, [this](CoreContext& c) { barrier(c); });
  }
  /// Waits for every collective this core started on this communicator (errors stay in their
  /// handles). Called by every synchronous collective first.
  void wait_started(CoreContext& ctx);

  /// Aborts the group from its first collective: every waiter wakes with AbortedError(reason).
  /// Idempotent; the first reason stays.
  void abort(const std::string& reason);
  bool aborted() const { return abort_from_.load(std::memory_order_acquire) != kNotAborted; }
  /// Clears an abort, empties the links and restarts sequence numbers at 0. Host side only, when
  /// no core is inside a collective of this group.
  void reset();

  /// Totals for one member core (read after run_spmd returns).
  CollectiveStats stats(int core_id) const;
  void reset_stats();
  const CommunicatorOptions& options() const { return options_; }
  /// The recorder of this communicator's collectives (dump_json() dumps it on request) and this
  /// communicator's id in its dumps.
  FlightRecorder& flight_recorder() const { return *recorder_; }
  int flight_recorder_id() const { return recorder_id_; }

 private:
  using Body = std::function<void(const AlgorithmContext&)>;
  /// Runs one collective on the calling thread for `core_id`: waits for started work when called
  /// from the core's program, assigns the sequence number, checks the abort flag, runs `body` with
  /// an AlgorithmContext, turns errors into the group's abort, and counts stats.
  void run(CoreContext& ctx, Fingerprint fp, uint64_t input_bytes, const Body& body);
  CollectiveHandle start(CoreContext& ctx, std::function<void(CoreContext&)> op);
  Link& link(int src_rank, int dst_rank);
  [[noreturn]] void rethrow_with_context(int rank, const Fingerprint& fp);
  /// Aborts collectives from sequence `from_sequence` on (those before it may still complete):
  /// later entries fail at once and the links of every rank that has entered one of them are
  /// aborted, which wakes its waits. A lower `from_sequence` than an earlier abort's widens it;
  /// the first reason stays. `desync_sequence`: the cause was a desync of that collective.
  /// Returns true when it widened the abort (false: already aborted from that sequence or before).
  bool abort(const std::string& reason, uint64_t from_sequence,
             std::optional<uint64_t> desync_sequence = std::nullopt);
  /// abort(), and when that widened it and the group spans processes, the same failure sent to
  /// the other processes (Transport::publish_failure): a failure of a core of this process.
  void fail_from(int core_id, const std::string& reason, uint64_t from_sequence, bool desync);
  /// A failure another process published: aborts from its sequence on.
  void on_remote_failure(const PublishedFailure& failure);
  /// Aborts from the first collective core `core_id` (a member of this process) has not finished.
  void abort_after_finished(int core_id, const std::string& reason);
  /// Aborts every link of `rank` (once). Needs links_mu_.
  void abort_links_of_locked(int rank, const std::string& reason);
  /// Throws InvalidArgumentError naming the abort's cause when the group was aborted by a desync
  /// of `fp`'s collective: every core of a mismatched collective fails as the cores that compared
  /// the fingerprints do, also those woken by the abort.
  void throw_if_desynced(int core_id, const Fingerprint& fp) const;
  /// After the group is aborted: waits (sleeping, at most the timeout) until no rank is inside a
  /// DirectAccessScope, so that no peer touches this rank's buffers once its error returns.
  void wait_for_direct_users() const;
  /// Publishes `fp` of core `core_id` to the group's fingerprint table (and, for the first core of
  /// this process, to the other processes); throws DesyncError naming both cores when the
  /// collective's reference differs. No-op without the desync check.
  void check_group_fingerprint(int core_id, const Fingerprint& fp);
  /// A fingerprint another process published: a mismatch with this process's reference aborts
  /// the group as a desync of that collective.
  void on_remote_fingerprint(const PublishedFingerprint& published);
  /// Sets up the fingerprint table and the flight recorder (constructor only).
  void init_checks();
  /// The cores of this process that have not entered collective `sequence`, and those of other
  /// processes (whose progress this process does not see) named apart.
  std::string missing_cores(uint64_t sequence) const;
  /// The sequence of the collective of this group in which `core` of another process found a
  /// desync, when `what` (its error's text) reports one; else nullopt.
  std::optional<uint64_t> remote_desync_sequence(int core, const std::string& what) const;
  std::string group_string() const;
  Algorithm resolve_all_reduce_algorithm(Algorithm requested, uint64_t bytes) const;
  /// Sets the placement members below from the options or the runtime (constructor only).
  void init_placement();

  Runtime& runtime_;
  const std::vector<int> group_;
  CommunicatorOptions options_;
  std::vector<int> rank_of_core_;  // core id -> rank, -1 if not a member
  // Link table: links_[src * n + dst], created on first use; owned by owned_links_.
  std::unique_ptr<std::atomic<Link*>[]> links_;
  std::mutex links_mu_;
  std::vector<std::unique_ptr<Link>> owned_links_;  // GUARDED_BY(links_mu_)
  bool direct_access_ = false;    // the transport's links support direct access (set once)
  bool spans_processes_ = false;  // some ranks live in another process (set once)
  // Placement as the hierarchical all-reduce sees it (simulated or the runtime's; set once): the
  // process of each rank, why it does not fit the algorithm (empty: it fits), whether the ranks
  // of a process have direct access to each other, and whether kAuto picks it.
  std::vector<int> rank_process_;
  std::string placement_error_;
  bool local_direct_access_ = true;
  bool hierarchical_by_default_ = false;
  // Ranks inside a DirectAccessScope; a failed collective waits for 0 before it returns.
  std::atomic<int> direct_users_{0};
  std::vector<uint64_t> sequence_;                     // per rank; written by that rank's core
  std::unique_ptr<std::atomic<uint64_t>[]> entered_;   // per rank: collectives entered
  std::unique_ptr<std::atomic<uint64_t>[]> finished_;  // per rank: collectives finished
  std::vector<CollectiveStats> stats_;                 // per rank; written by that rank's core
  // Per rank: the last collective this core started and has not waited for; only its core's
  // program thread touches it.
  std::vector<std::shared_ptr<detail::AsyncState>> started_;
  // The first sequence the abort fails (kNotAborted: none); written under abort_mu_.
  static constexpr uint64_t kNotAborted = ~uint64_t{0};
  std::atomic<uint64_t> abort_from_{kNotAborted};
  mutable std::mutex abort_mu_;
  std::string abort_reason_;                 // GUARDED_BY(abort_mu_)
  std::optional<uint64_t> desync_sequence_;  // GUARDED_BY(abort_mu_); set when a desync aborted
  std::string desync_reason_;                // GUARDED_BY(abort_mu_); that desync's error
  std::vector<char> links_aborted_;          // GUARDED_BY(links_mu_); per rank, 1 once aborted
  int abort_handler_id_ = 0;
  // Null without the desync check or with one rank. Cleared with the communicator's reset count
  // (reset_epoch_), which tags what this process publishes to the others.
  std::unique_ptr<FingerprintTable> fingerprints_;
  std::atomic<uint32_t> reset_epoch_{0};
  std::shared_ptr<FlightRecorder> recorder_;  // set once
  int recorder_id_ = 0;
  std::vector<CoreFlightRing*> rings_;  // per rank; null for other processes' ranks or when off
};

}  // namespace vtpu
