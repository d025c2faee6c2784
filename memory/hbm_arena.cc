#include "vtpu/memory/hbm_arena.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "vtpu/common/units.h"
#include "vtpu/memory/backing_store.h"

namespace vtpu {

namespace {
constexpr size_t kMaxReportedBuffers = 10;

std::string bytes_text(uint64_t b) {
  return std::to_string(b) + " bytes (" + format_bytes(b) + ")";
}
}  // namespace

std::string OomReport::to_string() const {
  std::ostringstream os;
  os << "out of HBM on core " << core_id << " (policy " << policy << "): cannot allocate "
     << bytes_text(requested_bytes);
  if (!label.empty()) os << " for '" << label << "'";
  if (requested_bytes != logical_bytes) {
    // allocate_padded names no shape: it may pack several arrays in one buffer.
    os << "\n  array:              " << (array_text.empty() ? "padded arrays" : array_text) << ": "
       << bytes_text(logical_bytes) << " logical, " << bytes_text(requested_bytes) << " padded ("
       << std::fixed << std::setprecision(2) << expansion() << "x)";
  }
  os << "\n  rounded request:    " << bytes_text(rounded_bytes)
     << "\n  bytes in use:       " << bytes_text(bytes_in_use) << " of limit "
     << bytes_text(bytes_limit) << "\n  total free:         " << bytes_text(total_free_bytes)
     << "\n  largest free block: " << bytes_text(largest_free_block_bytes)
     << "\n  fragmentation:      " << std::fixed << std::setprecision(3) << fragmentation
     << " (1 - largest free block / total free)";
  if (rounded_bytes <= total_free_bytes) {
    os << "\n  note: total free >= request, so this failure is due to fragmentation";
    if (defragmented) {
      os << " that defragmentation could not remove (" << pinned_buffers << " pinned buffer"
         << (pinned_buffers == 1 ? "" : "s") << ")";
    }
  } else if (requested_bytes > bytes_limit) {
    os << "\n  note: the request exceeds the arena's limit of " << bytes_text(bytes_limit);
  }
  if (!largest_live_buffers.empty()) {
    os << "\n  largest live buffers:";
    for (const LiveBufferInfo& b : largest_live_buffers) {
      os << "\n    " << std::setw(12) << format_bytes(b.size_bytes) << "  at offset " << b.offset
         << "  " << (b.label.empty() ? "(unlabelled)" : b.label);
    }
  }
  if (!bins.empty()) {
    os << "\n  free space by bin:\n    " << std::setw(12) << "chunk sizes" << std::setw(14)
       << "free chunks" << std::setw(14) << "free bytes" << std::setw(14) << "largest";
    for (const BinStats& b : bins) {
      if (b.num_free_chunks == 0) continue;
      // Each row is a bin [min_chunk_bytes, next bin's min): ">=" is the whole label.
      os << "\n    " << std::setw(12) << (">=" + format_bytes(b.min_chunk_bytes)) << std::setw(14)
         << b.num_free_chunks << std::setw(14) << format_bytes(b.free_bytes) << std::setw(14)
         << format_bytes(b.largest_free_chunk_bytes);
    }
  }
  if (!occupancy_map.empty()) {
    os << "\n  occupancy ('#' used, '+' internal waste, '.' free; offset 0 on the left):\n    ["
       << occupancy_map << "]";
  }
  return os.str();
}

double OomReport::expansion() const {
  return logical_bytes == 0
             ? 1.0
             : static_cast<double>(requested_bytes) / static_cast<double>(logical_bytes);
}

namespace {

// `text` with invalid UTF-8 sequences replaced by U+FFFD, so that a JSON report dumps without
// nlohmann's type_error 316 whatever bytes a user put in a label.
std::string utf8_or_replaced(const std::string& text) {
  return nlohmann::json::parse(
             nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
      .get<std::string>();
}

}  // namespace

void to_json(nlohmann::json& j, const OomReport& r) {
  nlohmann::json bins = nlohmann::json::array();
  for (const BinStats& b : r.bins) {
    bins.push_back({{"min_chunk_bytes", b.min_chunk_bytes},
                    {"max_chunk_bytes", b.max_chunk_bytes},
                    {"num_free_chunks", b.num_free_chunks},
                    {"free_bytes", b.free_bytes},
                    {"largest_free_chunk_bytes", b.largest_free_chunk_bytes}});
  }
  nlohmann::json live = nlohmann::json::array();
  for (const LiveBufferInfo& b : r.largest_live_buffers) {
    live.push_back({{"label", utf8_or_replaced(b.label)},
                    {"offset", b.offset},
                    {"size_bytes", b.size_bytes},
                    {"chunk_bytes", b.chunk_bytes}});
  }
  j = nlohmann::json{{"core_id", r.core_id},
                     {"policy", r.policy},
                     {"label", utf8_or_replaced(r.label)},
                     {"requested_bytes", r.requested_bytes},
                     {"rounded_bytes", r.rounded_bytes},
                     {"bytes_in_use", r.bytes_in_use},
                     {"bytes_limit", r.bytes_limit},
                     {"total_free_bytes", r.total_free_bytes},
                     {"largest_free_block_bytes", r.largest_free_block_bytes},
                     {"fragmentation", r.fragmentation},
                     {"largest_live_buffers", live},
                     {"logical_bytes", r.logical_bytes},
                     {"padded_bytes", r.requested_bytes},
                     {"expansion", r.expansion()},
                     {"array", r.array_text},
                     {"bins", bins},
                     {"occupancy_map", r.occupancy_map},
                     {"defragmented", r.defragmented},
                     {"pinned_buffers", r.pinned_buffers}};
}

OutOfMemoryError::OutOfMemoryError(OomReport report)
    : ResourceExhaustedError(report.to_string()), report_(std::move(report)) {}

HbmArena::HbmArena(const ArenaOptions& options)
    : options_(options), epoch_(options.event_epoch.value_or(std::chrono::steady_clock::now())) {
  policy_ = make_allocator_policy(options.policy, options.capacity_bytes, options.policy_options);
  capacity_bytes_ = policy_->capacity_bytes();
  if (options.backing) backing_ = std::make_unique<BackingStore>(capacity_bytes_);
  stats_.bytes_limit = capacity_bytes_;
  stats_.pool_bytes = capacity_bytes_;
  stats_.peak_pool_bytes = capacity_bytes_;
}

HbmArena::~HbmArena() = default;

HbmArena::Live* HbmArena::find_held_locked(BufferId id) {
  const uint64_t low = id & 0xFFFFFFFFu;
  if (low == 0 || low > slots_.size()) return nullptr;
  Slot& s = slots_[low - 1];
  if (!s.in_use || s.generation != (id >> 32)) return nullptr;
  return &s.live;
}

HbmArena::Live* HbmArena::find_locked(BufferId id) {
  Live* b = find_held_locked(id);
  return b != nullptr && !b->freed ? b : nullptr;
}

const HbmArena::Live* HbmArena::find_locked(BufferId id) const {
  return const_cast<HbmArena*>(this)->find_locked(id);
}

bool HbmArena::handed_out_locked(BufferId id) const {
  const uint64_t low = id & 0xFFFFFFFFu;
  if (low == 0 || low > slots_.size()) return false;
  const Slot& s = slots_[low - 1];
  const uint64_t gen = id >> 32;
  return gen < s.generation || (gen == s.generation && s.in_use);
}

BufferId HbmArena::next_id_locked() const {
  const uint64_t slot = free_slots_.empty() ? slots_.size() : free_slots_.back();
  const uint64_t gen = free_slots_.empty() ? 0 : slots_[slot].generation;
  return gen << 32 | (slot + 1);
}

template <typename Fn>
void HbmArena::for_each_live_locked(Fn&& fn) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.in_use) fn(static_cast<uint64_t>(s.generation) << 32 | (i + 1), s.live);
  }
}

template <typename Fn>
void HbmArena::for_each_live_locked(Fn&& fn) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.in_use) fn(static_cast<uint64_t>(s.generation) << 32 | (i + 1), s.live);
  }
}

BufferId HbmArena::allocate(uint64_t size_bytes, std::string label) {
  if (size_bytes == 0) {
    throw InvalidArgumentError("allocation of 0 bytes on core " + std::to_string(core_id()) +
                               (label.empty() ? "" : " for '" + label + "'") +
                               " (expected >= 1 byte)");
  }
  std::lock_guard lock(mu_);
  return allocate_locked(size_bytes, size_bytes, std::move(label), {});
}

BufferId HbmArena::allocate_array(ElementType type, std::span<const int64_t> dims,
                                  const std::optional<Layout>& layout, std::string label) {
  const Layout l = layout ? *layout : tpu_default_layout(type, static_cast<int64_t>(dims.size()));
  const ArrayBytes bytes = array_bytes(type, dims, l);
  const std::string text = shape_to_string(type, dims, l);
  if (bytes.padded_bytes == 0) {
    throw InvalidArgumentError("array " + text + " on core " + std::to_string(core_id()) +
                               " has no elements (expected at least one)");
  }
  std::lock_guard lock(mu_);
  return allocate_locked(bytes.padded_bytes, bytes.logical_bytes, std::move(label), text);
}

BufferId HbmArena::allocate_padded(uint64_t charged_bytes, uint64_t logical_bytes,
                                   std::string label) {
  if (charged_bytes == 0 || logical_bytes > charged_bytes) {
    throw InvalidArgumentError("padded allocation of " + std::to_string(charged_bytes) +
                               " bytes for " + std::to_string(logical_bytes) +
                               " logical bytes on core " + std::to_string(core_id()) +
                               (label.empty() ? "" : " for '" + label + "'") +
                               " (expected charged >= 1 and logical <= charged)");
  }
  std::lock_guard lock(mu_);
  return allocate_locked(charged_bytes, logical_bytes, std::move(label), {});
}

std::optional<ArenaPlacement> HbmArena::try_allocate(uint64_t size_bytes, std::string label,
                                                     ArenaFreeSpace* after) {
  if (size_bytes == 0) {
    throw InvalidArgumentError("allocation of 0 bytes on core " + std::to_string(core_id()) +
                               (label.empty() ? "" : " for '" + label + "'") +
                               " (expected >= 1 byte)");
  }
  std::lock_guard lock(mu_);
  bool defragmented = false;
  std::optional<ArenaPlacement> p =
      try_allocate_locked(size_bytes, size_bytes, label, &defragmented);
  if (after != nullptr) *after = free_space_locked();
  return p;
}

ArenaFreeSpace HbmArena::free_space() const {
  std::lock_guard lock(mu_);
  return free_space_locked();
}

ArenaFreeSpace HbmArena::free_space_locked() const {
  return ArenaFreeSpace{stats_.bytes_in_use, policy_->total_free_bytes(),
                        policy_->largest_free_block_bytes(), stats_.num_defragmentations};
}

BufferId HbmArena::allocate_locked(uint64_t size_bytes, uint64_t logical_bytes, std::string label,
                                   const std::string& array_text) {
  bool defragmented = false;
  if (auto p = try_allocate_locked(size_bytes, logical_bytes, label, &defragmented)) return p->id;
  OomReport report = make_oom_report_locked(size_bytes, logical_bytes, label, array_text);
  report.defragmented = defragmented;
  throw OutOfMemoryError(std::move(report));
}

std::optional<ArenaPlacement> HbmArena::try_allocate_locked(uint64_t size_bytes,
                                                            uint64_t logical_bytes,
                                                            std::string& label,
                                                            bool* defragmented) {
  std::optional<PolicyAllocation> a = policy_->allocate(size_bytes);
  if (a && options_.defragment_before_growth && options_.auto_defragment &&
      a->offset + a->chunk_bytes > reserved_high_water_ && stats_.num_frees != frees_at_defrag_ &&
      policy_->can_relocate() &&
      stats_.bytes_in_use + policy_->rounded_bytes(size_bytes) < a->offset + a->chunk_bytes) {
    // The request would raise the reserved footprint although the live chunks and it would end
    // lower after a compaction: give the chunk back, compact, and place the request again.
    policy_->free(a->offset);
    defragment_locked();
    *defragmented = true;
    a = policy_->allocate(size_bytes);
  }
  if (!a && options_.auto_defragment && policy_->can_relocate() && size_bytes <= capacity_bytes_ &&
      policy_->rounded_bytes(size_bytes) <= policy_->total_free_bytes()) {
    defragment_locked();
    *defragmented = true;
    a = policy_->allocate(size_bytes);
  }
  if (!a) {
    ++stats_.num_ooms;
    if (size_bytes <= capacity_bytes_ &&
        policy_->rounded_bytes(size_bytes) <= policy_->total_free_bytes()) {
      ++stats_.num_fragmentation_ooms;
    }
    if (options_.record_events) {
      TraceEvent e;
      e.op = TraceOp::kOom;
      e.id = next_id_locked();  // the id the buffer would have had; never handed out
      e.bytes = size_bytes;
      e.label = label;
      record_locked(std::move(e));
    }
    return std::nullopt;
  }
  if (free_slots_.empty() && slots_.size() >= kMaxSlots) {
    policy_->free(a->offset);
    throw ResourceExhaustedError("arena on core " + std::to_string(core_id()) + " holds " +
                                 std::to_string(kMaxSlots) +
                                 " live buffers, the most its buffer table can name");
  }
  const BufferId id = next_id_locked();
  if (options_.record_events) {
    TraceEvent e;
    e.op = TraceOp::kAlloc;
    e.id = id;
    e.bytes = size_bytes;
    e.label = label;
    record_locked(std::move(e));
  }
  uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Slot& s = slots_[slot];
  s.in_use = true;
  s.live.offset = a->offset;
  s.live.size_bytes = size_bytes;
  s.live.chunk_bytes = a->chunk_bytes;
  s.live.logical_bytes = logical_bytes;
  s.live.seq = stats_.num_allocs + 1;
  s.live.label = std::move(label);
  s.live.pins = 0;
  s.live.freed = false;
  ++num_live_;
  reserved_high_water_ = std::max(reserved_high_water_, a->offset + a->chunk_bytes);
  stats_.bytes_in_use += a->chunk_bytes;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  stats_.largest_alloc_size = std::max(stats_.largest_alloc_size, a->chunk_bytes);
  stats_.padded_bytes_in_use += size_bytes;
  stats_.logical_bytes_in_use += logical_bytes;
  ++stats_.num_allocs;
  return ArenaPlacement{id, stats_.num_allocs, a->offset, a->chunk_bytes};
}

void HbmArena::free(BufferId id) {
  std::lock_guard lock(mu_);
  free_locked(id);
}

void HbmArena::free(BufferId id, ArenaFreeSpace* after) {
  std::lock_guard lock(mu_);
  free_locked(id);
  if (after != nullptr) *after = free_space_locked();
}

void HbmArena::free_locked(BufferId id) {
  Live* found = find_locked(id);
  if (found == nullptr) {
    throw InvalidArgumentError("free of buffer id " + std::to_string(id) + " on core " +
                               std::to_string(core_id()) + ", which is not live (double free?)");
  }
  Live& b = *found;
  if (b.pins > 0) {
    // An in-flight copy still reads the bytes: keep the chunk until the last unpin.
    b.freed = true;
    ++num_pending_free_;
    pending_free_bytes_ += b.chunk_bytes;
    return;
  }
  release_locked(id, b);
}

void HbmArena::release_locked(BufferId id, const Live& b) {
  if (backing_ && options_.poison_freed) {
    // The requested bytes rounded to 256 B: the bytes a stale reader could touch, without
    // committing the pages of an unsplit remainder that was never used.
    const uint64_t n = std::min(b.chunk_bytes, (b.size_bytes + 255) / 256 * 256);
    std::memset(backing_->data() + b.offset, 0xDB, n);
  }
  policy_->free(b.offset);
  if (options_.record_events) {
    TraceEvent e;
    e.op = TraceOp::kFree;
    e.id = id;
    record_locked(std::move(e));
  }
  stats_.bytes_in_use -= b.chunk_bytes;
  stats_.padded_bytes_in_use -= b.size_bytes;
  stats_.logical_bytes_in_use -= b.logical_bytes;
  ++stats_.num_frees;
  const auto slot = static_cast<uint32_t>((id & 0xFFFFFFFFu) - 1);
  Slot& s = slots_[slot];
  s.in_use = false;
  s.live.label.clear();  // keeps its capacity for the slot's next buffer
  if (++s.generation != kRetiredGeneration) free_slots_.push_back(slot);
  --num_live_;
}

const HbmArena::Live& HbmArena::live_locked(BufferId id) const {
  const Live* b = find_locked(id);
  if (b == nullptr) {
    throw InvalidArgumentError("buffer id " + std::to_string(id) + " is not live on core " +
                               std::to_string(core_id()));
  }
  return *b;
}

std::byte* HbmArena::data(BufferId id) const {
  std::lock_guard lock(mu_);
  const Live& b = live_locked(id);
  return backing_ ? backing_->data() + b.offset : nullptr;
}

uint64_t HbmArena::size_bytes(BufferId id) const {
  std::lock_guard lock(mu_);
  return live_locked(id).size_bytes;
}

uint64_t HbmArena::offset(BufferId id) const {
  std::lock_guard lock(mu_);
  return live_locked(id).offset;
}

MemoryStats HbmArena::memory_stats() const {
  std::lock_guard lock(mu_);
  MemoryStats s = stats_;
  s.largest_free_block_bytes = policy_->largest_free_block_bytes();
  s.total_free_bytes = policy_->total_free_bytes();
  s.num_live_buffers = num_live_ - num_pending_free_;
  s.pending_free_buffers = num_pending_free_;
  s.pending_free_bytes = pending_free_bytes_;
  return s;
}

void HbmArena::check_consistency() const {
  std::lock_guard lock(mu_);
  policy_->check_consistency();
  std::unordered_map<uint64_t, uint64_t> in_use;  // offset -> chunk bytes
  uint64_t in_use_bytes = 0;
  policy_->walk([&](const ChunkInfo& c) {
    if (c.in_use) {
      in_use.emplace(c.offset, c.size_bytes);
      in_use_bytes += c.size_bytes;
    }
  });
  if (in_use.size() != num_live_) {
    throw InternalError("arena on core " + std::to_string(core_id()) + " tracks " +
                        std::to_string(num_live_) + " live buffers but the policy has " +
                        std::to_string(in_use.size()) + " chunks in use");
  }
  uint64_t requested = 0;
  uint64_t logical = 0;
  size_t counted = 0;
  for_each_live_locked([&](BufferId id, const Live& b) {
    auto it = in_use.find(b.offset);
    if (it == in_use.end() || it->second != b.chunk_bytes || b.size_bytes > b.chunk_bytes ||
        b.logical_bytes > b.size_bytes) {
      throw InternalError("live buffer " + std::to_string(id) + " at offset " +
                          std::to_string(b.offset) + " does not match an in-use chunk");
    }
    requested += b.size_bytes;
    logical += b.logical_bytes;
    ++counted;
  });
  if (counted != num_live_ || free_slots_.size() + num_live_ > slots_.size()) {
    throw InternalError("arena buffer table on core " + std::to_string(core_id()) + " holds " +
                        std::to_string(counted) + " live slots, counts " +
                        std::to_string(num_live_) + ", and lists " +
                        std::to_string(free_slots_.size()) + " free slots of " +
                        std::to_string(slots_.size()));
  }
  if (in_use_bytes != stats_.bytes_in_use || requested != stats_.padded_bytes_in_use ||
      logical != stats_.logical_bytes_in_use) {
    throw InternalError("arena byte counters disagree with the chunk walk on core " +
                        std::to_string(core_id()));
  }
  if (in_use_bytes + policy_->total_free_bytes() != capacity_bytes_) {
    throw InternalError("in-use + free bytes != capacity on core " + std::to_string(core_id()));
  }
}

void HbmArena::walk(const std::function<void(const ChunkInfo&)>& fn) const {
  std::lock_guard lock(mu_);
  policy_->walk(fn);
}

OomReport HbmArena::make_oom_report_locked(uint64_t size_bytes, uint64_t logical_bytes,
                                           const std::string& label,
                                           const std::string& array_text) const {
  OomReport r;
  r.logical_bytes = logical_bytes;
  r.array_text = array_text;
  r.bins = policy_->bin_stats();
  r.occupancy_map = occupancy_map_locked();
  for_each_live_locked([&](BufferId, const Live& b) { r.pinned_buffers += b.pins > 0 ? 1 : 0; });
  r.core_id = core_id();
  r.policy = options_.policy;
  r.label = label;
  r.requested_bytes = size_bytes;
  r.rounded_bytes = policy_->rounded_bytes(size_bytes);
  r.bytes_in_use = stats_.bytes_in_use;
  r.bytes_limit = capacity_bytes_;
  r.total_free_bytes = policy_->total_free_bytes();
  r.largest_free_block_bytes = policy_->largest_free_block_bytes();
  r.fragmentation = fragmentation_ratio(r.largest_free_block_bytes, r.total_free_bytes);
  std::vector<LiveBufferInfo> all;
  all.reserve(num_live_);
  for_each_live_locked([&](BufferId, const Live& b) {
    all.push_back(
        {b.freed ? b.label + " (freed, held by an in-flight copy until unpinned)" : b.label,
         b.offset, b.size_bytes, b.chunk_bytes});
  });
  const size_t n = std::min(kMaxReportedBuffers, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(),
                    [](const LiveBufferInfo& a, const LiveBufferInfo& b) {
                      return a.size_bytes != b.size_bytes ? a.size_bytes > b.size_bytes
                                                          : a.offset < b.offset;
                    });
  all.resize(n);
  r.largest_live_buffers = std::move(all);
  return r;
}

DefragmentResult HbmArena::defragment() {
  std::lock_guard lock(mu_);
  return defragment_locked();
}

DefragmentResult HbmArena::defragment_locked() {
  DefragmentResult result;
  if (!policy_->can_relocate()) {
    result.supported = false;
    return result;
  }
  const auto start = std::chrono::steady_clock::now();
  result.largest_free_before = policy_->largest_free_block_bytes();

  struct Entry {
    Live* live;
    uint64_t new_offset;
    uint64_t new_chunk_bytes;
  };
  std::vector<Entry> entries;
  entries.reserve(num_live_);
  std::vector<std::pair<uint64_t, uint64_t>> pinned;  // [offset, end) of pinned chunks
  for_each_live_locked([&](BufferId, Live& b) {
    entries.push_back({&b, b.offset, b.chunk_bytes});
    if (b.pins > 0) pinned.emplace_back(b.offset, b.offset + b.chunk_bytes);
  });
  std::sort(entries.begin(), entries.end(),
            [](const Entry& x, const Entry& y) { return x.live->offset < y.live->offset; });
  std::sort(pinned.begin(), pinned.end());
  result.pinned_buffers = pinned.size();

  // Slide each unpinned buffer, in address order, to the lowest aligned offset at or above the end
  // of the previously placed unpinned buffer that overlaps no pinned chunk (it may land below a
  // pinned buffer it used to sit above). That offset is never above the buffer's old one, since
  // the old place is itself such an offset, so a destination never reaches a later source.
  auto align_up = [](uint64_t x, uint64_t a) { return (x + a - 1) / a * a; };
  uint64_t cursor = 0;
  size_t p = 0;  // first pinned range that may still lie at or above the cursor
  for (Entry& e : entries) {
    const Live& b = *e.live;
    if (b.pins == 0) {
      const uint64_t size = policy_->rounded_bytes(b.size_bytes);
      const uint64_t align = policy_->placement_alignment(size);
      uint64_t t = align_up(cursor, align);
      for (;;) {
        while (p < pinned.size() && pinned[p].second <= t) ++p;
        if (p < pinned.size() && pinned[p].first < t + size) {
          t = align_up(pinned[p].second, align);
          continue;
        }
        break;
      }
      if (t < b.offset || (t == b.offset && size < b.chunk_bytes)) {
        e.new_offset = t;
        e.new_chunk_bytes = size;
      }
      cursor = e.new_offset + e.new_chunk_bytes;
    }
  }
  std::vector<ChunkInfo> layout;
  layout.reserve(entries.size());
  for (const Entry& e : entries) layout.push_back({e.new_offset, e.new_chunk_bytes, true});
  std::sort(layout.begin(), layout.end(),
            [](const ChunkInfo& x, const ChunkInfo& y) { return x.offset < y.offset; });
  policy_->rebuild(layout);  // validates first: on error nothing has changed

  // Lowest address first: a buffer's destination never reaches the source of a later one.
  std::byte* base = backing_ ? backing_->data() : nullptr;
  for (Entry& e : entries) {
    Live& b = *e.live;
    if (e.new_offset != b.offset) {
      if (base != nullptr) std::memmove(base + e.new_offset, base + b.offset, b.size_bytes);
      ++result.buffers_moved;
      result.bytes_moved += b.size_bytes;
    }
    stats_.bytes_in_use -= b.chunk_bytes - e.new_chunk_bytes;
    b.offset = e.new_offset;
    b.chunk_bytes = e.new_chunk_bytes;
  }
  result.largest_free_after = policy_->largest_free_block_bytes();
  result.duration_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
  if (options_.record_events) {
    TraceEvent e;
    e.op = TraceOp::kDefragment;
    e.bytes_moved = result.bytes_moved;
    e.buffers_moved = result.buffers_moved;
    e.duration_us = static_cast<double>(result.duration_ns) / 1000.0;
    record_locked(std::move(e));
  }
  ++stats_.num_defragmentations;
  frees_at_defrag_ = stats_.num_frees;
  stats_.defrag_buffers_moved += result.buffers_moved;
  stats_.defrag_bytes_moved += result.bytes_moved;
  stats_.defrag_time_ns += result.duration_ns;
  return result;
}

void HbmArena::pin(BufferId id) {
  std::lock_guard lock(mu_);
  Live* b = find_locked(id);
  if (b == nullptr) live_locked(id);  // throws the unknown-id error
  ++b->pins;
}

void HbmArena::unpin(BufferId id) {
  std::lock_guard lock(mu_);
  Live* b = find_held_locked(id);
  if (b == nullptr) {
    if (handed_out_locked(id)) return;  // already released; ids are never reused
    throw InvalidArgumentError("unpin of buffer id " + std::to_string(id) + " on core " +
                               std::to_string(core_id()) + ", which this arena never allocated");
  }
  if (b->pins == 0) {
    throw FailedPreconditionError("unpin of buffer id " + std::to_string(id) + " on core " +
                                  std::to_string(core_id()) + ", which is not pinned");
  }
  if (--b->pins == 0 && b->freed) {
    --num_pending_free_;
    pending_free_bytes_ -= b->chunk_bytes;
    release_locked(id, *b);
  }
}

bool HbmArena::is_pinned(BufferId id) const {
  std::lock_guard lock(mu_);
  return live_locked(id).pins > 0;
}

void HbmArena::record_locked(TraceEvent e) {
  e.core = core_id();
  e.t_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - epoch_).count();
  // steady_clock never goes back, but an epoch shared across arenas may lie after this arena's
  // first events only if a caller passed a future epoch; keep t_us monotonic and non-negative.
  const double floor = events_.empty() ? 0.0 : events_.back().t_us;
  e.t_us = std::max(e.t_us, floor);
  events_.push_back(std::move(e));
}

std::vector<TraceEvent> HbmArena::event_log() const {
  std::lock_guard lock(mu_);
  return events_;
}

void HbmArena::write_event_log(const std::string& path) const {
  const std::vector<TraceEvent> events = event_log();
  nlohmann::json header = default_trace_header();
  header["source"] =
      "vtpu HbmArena event log, core " + std::to_string(core_id()) + ", policy " + options_.policy;
  TraceWriter writer(path, header);
  for (const TraceEvent& e : events) writer.write(e);
  writer.close();
}

std::vector<MemoryChunkRecord> HbmArena::chunk_records() const {
  std::lock_guard lock(mu_);
  std::unordered_map<uint64_t, const Live*> by_offset;
  by_offset.reserve(num_live_);
  for_each_live_locked([&](BufferId, const Live& b) { by_offset.emplace(b.offset, &b); });
  std::vector<MemoryChunkRecord> out;
  policy_->walk([&](const ChunkInfo& c) {
    MemoryChunkRecord r;
    r.core_id = core_id();
    r.offset = c.offset;
    r.chunk_bytes = c.size_bytes;
    r.in_use = c.in_use;
    if (c.in_use) {
      auto it = by_offset.find(c.offset);
      if (it != by_offset.end()) {
        r.requested_bytes = it->second->size_bytes;
        r.label = it->second->label;
        r.alloc_seq = it->second->seq;
      }
    }
    out.push_back(std::move(r));
  });
  return out;
}

std::string HbmArena::occupancy_map() const {
  std::lock_guard lock(mu_);
  return occupancy_map_locked();
}

std::string HbmArena::occupancy_map_locked() const {
  constexpr int kWidth = OomReport::kOccupancyMapWidth;
  // Bytes of each kind (0 used, 1 waste, 2 free) per cell; cell i covers
  // [i * capacity / kWidth, (i + 1) * capacity / kWidth).
  std::vector<std::array<long double, 3>> cells(kWidth, {0, 0, 0});
  const long double cell_bytes = static_cast<long double>(capacity_bytes_) / kWidth;
  auto add = [&](uint64_t begin, uint64_t end, int kind) {
    if (begin >= end) return;
    int first = static_cast<int>(static_cast<long double>(begin) / cell_bytes);
    for (int i = std::min(first, kWidth - 1); i < kWidth; ++i) {
      const long double lo = std::max<long double>(begin, i * cell_bytes);
      const long double hi = std::min<long double>(end, (i + 1) * cell_bytes);
      if (hi <= lo) break;
      cells[i][kind] += hi - lo;
    }
  };
  std::unordered_map<uint64_t, uint64_t> requested;  // chunk offset -> requested bytes
  for_each_live_locked([&](BufferId, const Live& b) { requested.emplace(b.offset, b.size_bytes); });
  policy_->walk([&](const ChunkInfo& c) {
    if (!c.in_use) {
      add(c.offset, c.offset + c.size_bytes, 2);
      return;
    }
    auto it = requested.find(c.offset);
    const uint64_t used = it == requested.end() ? c.size_bytes : std::min(it->second, c.size_bytes);
    add(c.offset, c.offset + used, 0);
    add(c.offset + used, c.offset + c.size_bytes, 1);
  });
  std::string map(kWidth, ' ');
  static constexpr char kSymbol[3] = {'#', '+', '.'};
  for (int i = 0; i < kWidth; ++i) {
    int best = 0;
    for (int k = 1; k < 3; ++k) {
      if (cells[i][k] > cells[i][best]) best = k;
    }
    map[i] = kSymbol[best];
  }
  return map;
}

BufferPin::BufferPin(std::shared_ptr<HbmArena> arena, BufferId id)
    : arena_(std::move(arena)), id_(id) {
  arena_->pin(id_);
}

BufferPin& BufferPin::operator=(BufferPin&& o) noexcept {
  if (this != &o) {
    reset();
    arena_ = std::move(o.arena_);
    id_ = o.id_;
    o.id_ = 0;
  }
  return *this;
}

void BufferPin::reset() noexcept {
  if (arena_) {
    try {
      arena_->unpin(id_);
    } catch (...) {  // cannot happen: this pin's count is still held
    }
    arena_.reset();
    id_ = 0;
  }
}

}  // namespace vtpu
