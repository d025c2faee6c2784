#include "memory/hbm_arena.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/units.h"
#include "memory/backing_store.h"

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
  os << "\n  rounded request:    " << bytes_text(rounded_bytes)
     << "\n  bytes in use:       " << bytes_text(bytes_in_use) << " of limit "
     << bytes_text(bytes_limit) << "\n  total free:         " << bytes_text(total_free_bytes)
     << "\n  largest free block: " << bytes_text(largest_free_block_bytes)
     << "\n  fragmentation:      " << std::fixed << std::setprecision(3) << fragmentation
     << " (1 - largest free block / total free)";
  if (rounded_bytes <= total_free_bytes) {
    os << "\n  note: total free >= request, so this failure is due to fragmentation";
  }
  if (!largest_live_buffers.empty()) {
    os << "\n  largest live buffers:";
    for (const LiveBufferInfo& b : largest_live_buffers) {
      os << "\n    " << std::setw(12) << format_bytes(b.size_bytes) << "  at offset " << b.offset
         << "  " << (b.label.empty() ? "(unlabelled)" : b.label);
    }
  }
  return os.str();
}

void to_json(nlohmann::json& j, const OomReport& r) {
  nlohmann::json live = nlohmann::json::array();
  for (const LiveBufferInfo& b : r.largest_live_buffers) {
    live.push_back({{"label", b.label},
                    {"offset", b.offset},
                    {"size_bytes", b.size_bytes},
                    {"chunk_bytes", b.chunk_bytes}});
  }
  j = nlohmann::json{{"core_id", r.core_id},
                     {"policy", r.policy},
                     {"label", r.label},
                     {"requested_bytes", r.requested_bytes},
                     {"rounded_bytes", r.rounded_bytes},
                     {"bytes_in_use", r.bytes_in_use},
                     {"bytes_limit", r.bytes_limit},
                     {"total_free_bytes", r.total_free_bytes},
                     {"largest_free_block_bytes", r.largest_free_block_bytes},
                     {"fragmentation", r.fragmentation},
                     {"largest_live_buffers", live}};
}

OutOfMemoryError::OutOfMemoryError(OomReport report)
    : ResourceExhaustedError(report.to_string()), report_(std::move(report)) {}

HbmArena::HbmArena(const ArenaOptions& options) : options_(options) {
  policy_ = make_allocator_policy(options.policy, options.capacity_bytes, options.policy_options);
  capacity_bytes_ = policy_->capacity_bytes();
  if (options.backing) backing_ = std::make_unique<BackingStore>(capacity_bytes_);
  stats_.bytes_limit = capacity_bytes_;
}

HbmArena::~HbmArena() = default;

BufferId HbmArena::allocate(uint64_t size_bytes, std::string label) {
  if (size_bytes == 0) {
    throw InvalidArgumentError("allocation of 0 bytes on core " + std::to_string(core_id()) +
                               (label.empty() ? "" : " for '" + label + "'") +
                               " (expected >= 1 byte)");
  }
  std::lock_guard lock(mu_);
  std::optional<PolicyAllocation> a = policy_->allocate(size_bytes);
  if (!a) {
    ++stats_.num_ooms;
    throw OutOfMemoryError(make_oom_report_locked(size_bytes, label));
  }
  const BufferId id = next_id_++;
  live_.emplace(id, Live{a->offset, size_bytes, a->chunk_bytes, std::move(label)});
  stats_.bytes_in_use += a->chunk_bytes;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  stats_.largest_alloc_size = std::max(stats_.largest_alloc_size, a->chunk_bytes);
  stats_.bytes_requested += size_bytes;
  ++stats_.num_allocs;
  return id;
}

void HbmArena::free(BufferId id) {
  std::lock_guard lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) {
    throw InvalidArgumentError("free of buffer id " + std::to_string(id) + " on core " +
                               std::to_string(core_id()) + ", which is not live (double free?)");
  }
  const Live& b = it->second;
  if (backing_ && options_.poison_freed) {
    // The requested bytes rounded to 256 B: the bytes a stale reader could touch, without
    // committing the pages of an unsplit remainder that was never used.
    const uint64_t n = std::min(b.chunk_bytes, (b.size_bytes + 255) / 256 * 256);
    std::memset(backing_->data() + b.offset, 0xDB, n);
  }
  policy_->free(b.offset);
  stats_.bytes_in_use -= b.chunk_bytes;
  stats_.bytes_requested -= b.size_bytes;
  ++stats_.num_frees;
  live_.erase(it);
}

const HbmArena::Live& HbmArena::live_locked(BufferId id) const {
  auto it = live_.find(id);
  if (it == live_.end()) {
    throw InvalidArgumentError("buffer id " + std::to_string(id) + " is not live on core " +
                               std::to_string(core_id()));
  }
  return it->second;
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
  s.num_live_buffers = live_.size();
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
  if (in_use.size() != live_.size()) {
    throw InternalError("arena on core " + std::to_string(core_id()) + " tracks " +
                        std::to_string(live_.size()) + " live buffers but the policy has " +
                        std::to_string(in_use.size()) + " chunks in use");
  }
  uint64_t requested = 0;
  for (const auto& [id, b] : live_) {
    auto it = in_use.find(b.offset);
    if (it == in_use.end() || it->second != b.chunk_bytes || b.size_bytes > b.chunk_bytes) {
      throw InternalError("live buffer " + std::to_string(id) + " at offset " +
                          std::to_string(b.offset) + " does not match an in-use chunk");
    }
    requested += b.size_bytes;
  }
  if (in_use_bytes != stats_.bytes_in_use || requested != stats_.bytes_requested) {
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

OomReport HbmArena::make_oom_report_locked(uint64_t size_bytes, const std::string& label) const {
  OomReport r;
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
  all.reserve(live_.size());
  for (const auto& [id, b] : live_) all.push_back({b.label, b.offset, b.size_bytes, b.chunk_bytes});
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

}  // namespace vtpu
