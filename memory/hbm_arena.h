// One core's HBM: an allocator policy (offset bookkeeping) joined with backing storage (an mmap
// reservation committed lazily, or none for metadata-only simulation), stats with JAX's keys, and
// out-of-memory reports.
//
// The arena hands out buffer ids, not raw pointers, so that defragmentation can move live buffers;
// data(id) resolves an id to its current address. A pointer from data() stays valid until the
// arena next compacts (defragment(), or an allocation that triggers auto-defragmentation); pin the
// buffer (pin()/BufferPin) for as long as an operation holds its address, and it is never moved.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/memory_profile.h"
#include "vtpu/memory/memory_stats.h"
#include "vtpu/memory/tiled_layout.h"
#include "vtpu/memory/trace.h"

namespace vtpu {

/// Identifies a live buffer within one arena. Never reused while the arena lives, never 0. The
/// value is opaque: the low 32 bits are the buffer's slot in the arena's table plus 1 and the high
/// 32 bits count how often that slot was reused, so the ids of an arena that has not freed yet are
/// 1, 2, 3, ... (the allocation sequence numbers), and later ones need not be.
using BufferId = uint64_t;

struct ArenaOptions {
  uint64_t capacity_bytes = uint64_t{16} << 30;  // bytes of HBM; default 16 GiB
  std::string policy = "bfc";                    // allocator policy name
  PolicyOptions policy_options;                  // policy tuning
  bool backing = true;        // true: real bytes (lazy mmap); false: offsets only, data() is null
  bool poison_freed = false;  // fill a freed buffer's bytes with 0xDB so stale reads show (memset)
  int core_id = 0;            // for messages and reports
  /// On an allocation that fails although total free >= the rounded request, compact the arena
  /// and retry once, as the TPU runtime does. Ignored by policies that cannot relocate (planned).
  bool auto_defragment = true;
  /// With auto_defragment, also compact BEFORE an allocation that would raise the arena's reserved
  /// footprint (its high-water mark: the highest chunk end any allocation has reached), when the
  /// live chunks plus the request would end lower once compacted, and some buffer was freed since
  /// the last compaction (otherwise compacting again moves nothing). The allocation is then made
  /// in the compacted arena. This keeps peak reserved close to peak live at the price of the bytes
  /// moved (memory_stats() counts them with the other compactions), as Linux's proactive
  /// compaction compacts before a high-order allocation would need new memory. Default false: off
  /// (the TPU runtime compacts only on a failed request). Ignored when auto_defragment is false
  /// and by policies that cannot relocate (planned).
  bool defragment_before_growth = false;
  std::string name = {};  // pool name for messages ("" = unnamed)
  /// Keep an event log (alloc, free, oom, defragment with timestamps) in the vtpu trace format
  /// (memory/trace.h), so any run can be replayed. It grows by one event per operation.
  bool record_events = false;
  /// Time zero of the event log's t_us; unset: the arena's creation. A Runtime gives all its
  /// cores one epoch so their logs merge into one trace.
  std::optional<std::chrono::steady_clock::time_point> event_epoch = {};
};

/// What one compaction did. Sizes in bytes.
struct DefragmentResult {
  uint64_t buffers_moved = 0;
  uint64_t bytes_moved = 0;     // requested bytes of the moved buffers (what was copied)
  uint64_t pinned_buffers = 0;  // live buffers left in place because they were pinned
  uint64_t largest_free_before = 0;
  uint64_t largest_free_after = 0;
  uint64_t duration_ns = 0;
  bool supported = true;  // false: the policy cannot relocate (planned); nothing was done
};

/// Where try_allocate() put a buffer. Sizes in bytes.
struct ArenaPlacement {
  BufferId id = 0;
  uint64_t seq = 0;          // allocation sequence number (from 1; MemoryChunkRecord::alloc_seq)
  uint64_t offset = 0;       // bytes from the start of the arena
  uint64_t chunk_bytes = 0;  // bytes the policy set aside (>= the request)
};

/// The counters a replay samples after every operation (one lock, no copying of the full
/// MemoryStats). Sizes in bytes.
struct ArenaFreeSpace {
  uint64_t bytes_in_use = 0;              // chunk bytes of live buffers
  uint64_t total_free_bytes = 0;          // sum of all free chunks
  uint64_t largest_free_block_bytes = 0;  // largest chunk an allocation could get right now
  uint64_t num_defragmentations = 0;      // compactions so far (explicit and automatic)
};

/// A live buffer as the out-of-memory report lists it.
struct LiveBufferInfo {
  std::string label;
  uint64_t offset = 0;
  uint64_t size_bytes = 0;   // bytes requested
  uint64_t chunk_bytes = 0;  // bytes the policy set aside
};

/// Everything known when an allocation fails. All sizes in bytes.
struct OomReport {
  int core_id = 0;
  std::string policy;
  std::string label;             // label of the failed request
  uint64_t requested_bytes = 0;  // bytes asked of the policy (padded bytes for an array)
  uint64_t rounded_bytes = 0;    // after the policy's rounding
  uint64_t logical_bytes = 0;    // array bytes before tile padding (== requested otherwise)
  std::string array_text;        // "f32[256,512]{1,0:T(8,128)}" for an array, else empty
  uint64_t bytes_in_use = 0;
  uint64_t bytes_limit = 0;
  uint64_t total_free_bytes = 0;
  uint64_t largest_free_block_bytes = 0;
  double fragmentation = 0.0;                        // 1 - largest_free_block / total_free
  std::vector<LiveBufferInfo> largest_live_buffers;  // up to 10, largest first
  std::vector<BinStats> bins;                        // per size class (bfc, tlsf, buddy)
  std::string occupancy_map;                         // kOccupancyMapWidth characters
  bool defragmented = false;                         // auto-defragmentation ran and did not help
  uint64_t pinned_buffers = 0;                       // live buffers pinned at the time

  static constexpr int kOccupancyMapWidth = 100;
  /// requested / logical: the tile-padding expansion factor (1 for non-arrays).
  double expansion() const;

  /// Multi-line human-readable report.
  std::string to_string() const;
};
void to_json(nlohmann::json& j, const OomReport& r);

/// Thrown when an arena cannot satisfy a request. Carries the full report.
class OutOfMemoryError : public ResourceExhaustedError {
 public:
  explicit OutOfMemoryError(OomReport report);
  const OomReport& report() const noexcept { return report_; }

 private:
  OomReport report_;
};

class HbmArena;

/// Pins a buffer for its lifetime (RAII over HbmArena::pin/unpin). Move-only. Keeps the arena
/// alive. Thread-compatible.
class BufferPin {
 public:
  BufferPin() = default;
  BufferPin(std::shared_ptr<HbmArena> arena, BufferId id);
  ~BufferPin() { reset(); }
  BufferPin(BufferPin&& o) noexcept : arena_(std::move(o.arena_)), id_(o.id_) { o.id_ = 0; }
  BufferPin& operator=(BufferPin&& o) noexcept;
  BufferPin(const BufferPin&) = delete;
  BufferPin& operator=(const BufferPin&) = delete;
  /// Unpins now (no-op when empty).
  void reset() noexcept;

 private:
  std::shared_ptr<HbmArena> arena_;
  BufferId id_ = 0;
};

/// One core's HBM arena. Thread-safe: every method takes the arena's mutex.
///
/// Defragmentation (after the TPU runtime's on-OOM compaction) slides every unpinned live buffer
/// toward offset 0 in address order, around pinned buffers, shrinking each chunk to the policy's
/// rounded size; contents move with memmove, lowest address first, which is safe because no
/// buffer ever moves up. With nothing pinned, bfc, tlsf and first_fit end with one free block, so
/// for bfc and first_fit a request that fits in total free always succeeds after it; tlsf's good
/// fit can still refuse a request above the lower bound of that block's list (README), and buddy
/// keeps its alignment holes.
class HbmArena {
 public:
  /// Throws InvalidArgumentError for an unknown policy or a capacity below the policy minimum,
  /// ResourceExhaustedError if the address space cannot be reserved.
  explicit HbmArena(const ArenaOptions& options);
  ~HbmArena();
  HbmArena(const HbmArena&) = delete;
  HbmArena& operator=(const HbmArena&) = delete;

  /// Allocates `size_bytes` (>= 1). Throws InvalidArgumentError for 0 and OutOfMemoryError
  /// (ResourceExhausted) with a full report when no free chunk fits.
  BufferId allocate(uint64_t size_bytes, std::string label = {});
  /// As allocate(), but returns std::nullopt instead of throwing OutOfMemoryError when no chunk
  /// fits (after auto-defragmentation, as allocate() does; stats and the event log count the OOM
  /// the same way), and returns where the buffer went. No report is built, so a replay that
  /// expects many failures (a capacity search) stays fast. Throws InvalidArgumentError for 0.
  /// When `after` is given, it receives free_space() as it is after the call (under the same lock).
  std::optional<ArenaPlacement> try_allocate(uint64_t size_bytes, std::string label = {},
                                             ArenaFreeSpace* after = nullptr);
  /// Bytes in use, free-space totals and the compaction count, read under one lock.
  ArenaFreeSpace free_space() const;
  /// Allocates an array of `type` and logical shape `dims` stored in `layout` (default: the TPU
  /// default layout, tpu_default_layout) and charges the arena its PADDED bytes (XLA's tiled
  /// layout rules, memory/tiled_layout.h); stats count the logical bytes separately
  /// (logical_bytes_in_use). Example: f32[256,512,128,2] holds 134,217,728 logical bytes but
  /// takes 8,589,934,592. Throws InvalidArgumentError for a bad shape or layout (and for a
  /// zero-element array), OutOfMemoryError whose report gives the logical and padded bytes and the
  /// expansion factor.
  BufferId allocate_array(ElementType type, std::span<const int64_t> dims,
                          const std::optional<Layout>& layout = std::nullopt,
                          std::string label = {});

  /// Allocates a chunk of `charged_bytes` for data of `logical_bytes` (<= charged_bytes), as
  /// allocate_array() does for one array: the arena is charged the padded footprint and stats
  /// count the logical bytes separately. For several arrays packed in one buffer, charged_bytes
  /// is the sum of their padded bytes. Throws InvalidArgumentError for 0 charged bytes or
  /// logical > charged, OutOfMemoryError as allocate().
  BufferId allocate_padded(uint64_t charged_bytes, uint64_t logical_bytes, std::string label = {});

  /// Frees a live buffer. Throws InvalidArgumentError for an unknown id. A pinned buffer (an
  /// in-flight DMA reads it) leaves the caller's view at once (its id is no longer live), but its
  /// chunk is released only by the last unpin(), so the copy never reads reused memory (PyTorch's
  /// caching allocator defers a free the same way for record_stream). Until then it counts in
  /// MemoryStats::pending_free_buffers / pending_free_bytes and in bytes_in_use.
  void free(BufferId id);
  /// free(id), then free_space() as it is after it (under the same lock) into *after.
  void free(BufferId id, ArenaFreeSpace* after);

  /// Current address of a live buffer; nullptr for a metadata-only arena. Throws
  /// InvalidArgumentError for an unknown id.
  std::byte* data(BufferId id) const;
  /// Requested size and current offset of a live buffer, in bytes.
  uint64_t size_bytes(BufferId id) const;
  uint64_t offset(BufferId id) const;

  /// Compacts the arena now (see the class comment). Keeps every byte of every buffer.
  DefragmentResult defragment();

  /// Pins a live buffer: defragmentation never moves it until a matching unpin(). Pins nest.
  /// Throws InvalidArgumentError for an unknown id.
  void pin(BufferId id);
  /// Undoes one pin(); the last unpin of a buffer freed while pinned releases its chunk. A no-op
  /// for a buffer already released (ids are never reused); throws
  /// FailedPreconditionError for a live buffer that is not pinned and InvalidArgumentError for an
  /// id this arena never handed out.
  void unpin(BufferId id);
  bool is_pinned(BufferId id) const;

  /// A 100-character picture of the arena: '#' bytes in use, '+' internal waste (chunk bytes
  /// beyond the request: rounding, unsplit remainders), '.' free. Each character covers
  /// capacity/100 bytes and shows whichever of the three holds most of them.
  std::string occupancy_map() const;

  /// The events recorded so far (empty unless ArenaOptions::record_events), in order. Event ids
  /// are BufferIds and `core` is the arena's core id.
  std::vector<TraceEvent> event_log() const;
  /// Writes the event log as a trace file (header, then one JSON line per event). Throws as
  /// TraceWriter.
  void write_event_log(const std::string& path) const;

  /// Every chunk in address order, in use (with label, requested bytes and allocation sequence
  /// number, from 1) or free: the input of encode_pprof() and memory_snapshot_json().
  std::vector<MemoryChunkRecord> chunk_records() const;

  MemoryStats memory_stats() const;
  /// Policy consistency plus: every live buffer sits at an in-use chunk; byte counters agree.
  void check_consistency() const;
  /// Calls `fn` for every chunk in address order (under the arena's lock: do not call back in).
  void walk(const std::function<void(const ChunkInfo&)>& fn) const;

  int core_id() const { return options_.core_id; }
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  const std::string& policy_name() const { return options_.policy; }
  /// ArenaOptions::record_events: whether event_log() records anything.
  bool records_events() const { return options_.record_events; }
  bool has_backing() const { return static_cast<bool>(backing_); }

 private:
  struct Live {
    uint64_t offset = 0;
    uint64_t size_bytes = 0;
    uint64_t chunk_bytes = 0;
    uint64_t logical_bytes = 0;
    uint64_t seq = 0;  // allocation sequence number (num_allocs when it was made)
    std::string label;
    int pins = 0;
    bool freed = false;  // freed while pinned: released by the last unpin (see free())
  };
  // One entry of the live-buffer table. A slot is reused after its buffer is freed, with its
  // generation advanced, so the BufferId (generation << 32 | slot + 1) of a freed buffer never
  // names the new one. A slot whose generation reaches kRetiredGeneration is never reused.
  struct Slot {
    Live live;
    uint32_t generation = 0;  // of the buffer in it, or of the next one when free
    bool in_use = false;
  };
  static constexpr uint32_t kRetiredGeneration = UINT32_MAX;
  static constexpr uint64_t kMaxSlots = UINT32_MAX - 1;  // slot + 1 fits in 32 bits, never 0
  // The live buffer `id` names, or nullptr (unknown, freed or malformed id).
  Live* find_locked(BufferId id);
  const Live* find_locked(BufferId id) const;
  // Like find_locked, but also finds a buffer freed while pinned and not yet released.
  Live* find_held_locked(BufferId id);
  // Returns the chunk of the buffer `id` (held, not pinned) to the policy and retires its slot.
  void release_locked(BufferId id, const Live& b);
  // Whether this arena ever handed out `id` (live or freed).
  bool handed_out_locked(BufferId id) const;
  // The id the next successful allocation will get.
  BufferId next_id_locked() const;
  // Calls fn(id, live) for every live buffer, in slot order.
  template <typename Fn>
  void for_each_live_locked(Fn&& fn) const;
  template <typename Fn>
  void for_each_live_locked(Fn&& fn);
  BufferId allocate_locked(uint64_t size_bytes, uint64_t logical_bytes, std::string label,
                           const std::string& array_text);
  // The allocation without the report: std::nullopt on OOM (counted, logged); sets
  // *defragmented when auto-defragmentation ran. `label` is moved from only on success.
  std::optional<ArenaPlacement> try_allocate_locked(uint64_t size_bytes, uint64_t logical_bytes,
                                                    std::string& label, bool* defragmented);
  const Live& live_locked(BufferId id) const;
  DefragmentResult defragment_locked();
  std::string occupancy_map_locked() const;
  OomReport make_oom_report_locked(uint64_t size_bytes, uint64_t logical_bytes,
                                   const std::string& label, const std::string& array_text) const;

  ArenaOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<AllocatorPolicy> policy_;      // GUARDED_BY(mu_)
  std::unique_ptr<class BackingStore> backing_;  // null when metadata-only
  uint64_t capacity_bytes_ = 0;
  // Live buffers: a flat table indexed by slot (BufferId's low 32 bits - 1) plus a LIFO free-list
  // of slots, so a lookup is one bounds check and one generation compare (no hashing), and
  // allocations reuse recently freed, cache-warm slots.
  std::vector<Slot> slots_;           // GUARDED_BY(mu_)
  std::vector<uint32_t> free_slots_;  // GUARDED_BY(mu_)
  size_t num_live_ = 0;               // GUARDED_BY(mu_) slots in use, incl. pending frees
  size_t num_pending_free_ = 0;       // GUARDED_BY(mu_) freed while pinned, not yet released
  uint64_t pending_free_bytes_ = 0;   // GUARDED_BY(mu_) their chunk bytes
  MemoryStats stats_;                 // GUARDED_BY(mu_), counters only
  // Highest offset + chunk bytes any allocation has reached (the reserved footprint), and
  // stats_.num_frees at the last compaction (defragment_before_growth).
  uint64_t reserved_high_water_ = 0;  // GUARDED_BY(mu_)
  uint64_t frees_at_defrag_ = 0;      // GUARDED_BY(mu_)
  std::chrono::steady_clock::time_point epoch_;
  std::vector<TraceEvent> events_;  // GUARDED_BY(mu_)
  void record_locked(TraceEvent e);
  void free_locked(BufferId id);
  ArenaFreeSpace free_space_locked() const;
};

}  // namespace vtpu
