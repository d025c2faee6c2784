#include "vtpu/memory/memory_profile.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "memory/profile.pb.h"
#include "vtpu/common/atomic_file.h"
#include "vtpu/common/error.h"

namespace vtpu {

namespace {

constexpr std::string_view kUnlabelled = "(unlabelled)";
constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

std::string chunk_text(const MemoryChunkRecord& c) {
  return "chunk at offset " + std::to_string(c.offset) + " on core " + std::to_string(c.core_id);
}

// The records sorted by (core, offset), after checking that each is consistent and that the
// chunks of one core do not overlap. Throws InvalidArgumentError naming the chunk.
std::vector<const MemoryChunkRecord*> validated_in_address_order(
    std::span<const MemoryChunkRecord> chunks) {
  std::vector<const MemoryChunkRecord*> sorted;
  sorted.reserve(chunks.size());
  for (const MemoryChunkRecord& c : chunks) {
    if (c.chunk_bytes == 0) {
      throw InvalidArgumentError(chunk_text(c) + " has chunk_bytes 0; expected >= 1");
    }
    if (c.offset > std::numeric_limits<uint64_t>::max() - c.chunk_bytes) {
      throw InvalidArgumentError(chunk_text(c) + " of " + std::to_string(c.chunk_bytes) +
                                 " bytes ends past 2^64");
    }
    if (c.in_use && c.requested_bytes > c.chunk_bytes) {
      throw InvalidArgumentError(chunk_text(c) + " has requested_bytes " +
                                 std::to_string(c.requested_bytes) + " > chunk_bytes " +
                                 std::to_string(c.chunk_bytes));
    }
    sorted.push_back(&c);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return std::tie(a->core_id, a->offset) < std::tie(b->core_id, b->offset);
  });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const MemoryChunkRecord& prev = *sorted[i - 1];
    const MemoryChunkRecord& cur = *sorted[i];
    if (prev.core_id == cur.core_id && cur.offset < prev.offset + prev.chunk_bytes) {
      throw InvalidArgumentError(chunk_text(cur) + " overlaps the chunk at offset " +
                                 std::to_string(prev.offset) + " of " +
                                 std::to_string(prev.chunk_bytes) + " bytes");
    }
  }
  return sorted;
}

int64_t to_int64(uint64_t v, const char* what) {
  if (v > kMaxInt64) {
    throw InvalidArgumentError(std::string(what) + " " + std::to_string(v) +
                               " does not fit pprof's int64");
  }
  return static_cast<int64_t>(v);
}

// Builds a perftools.profiles.Profile: interns strings and one function + location per name, as
// XLA's PprofProfileBuilder does. Thread-compatible.
class ProfileBuilder {
 public:
  ProfileBuilder() { string_id(""); }  // string_table[0] must be ""

  perftools::profiles::Profile& profile() { return profile_; }

  int64_t string_id(const std::string& s) {
    auto [it, inserted] = strings_.emplace(s, profile_.string_table_size());
    if (inserted) profile_.add_string_table(s);
    return it->second;
  }

  // The location of a one-frame "stack" whose function is `name`. Ids start at 1 (0 is unset).
  uint64_t location_id(const std::string& name) {
    auto [it, inserted] = locations_.emplace(name, profile_.location_size() + 1);
    if (inserted) {
      const uint64_t id = it->second;
      auto* function = profile_.add_function();
      function->set_id(id);
      function->set_name(string_id(name));
      function->set_system_name(function->name());
      auto* location = profile_.add_location();
      location->set_id(id);
      location->add_line()->set_function_id(id);
    }
    return it->second;
  }

  void add_str_label(perftools::profiles::Sample* s, int64_t key, const std::string& value) {
    auto* l = s->add_label();
    l->set_key(key);
    l->set_str(string_id(value));
  }

  void add_num_label(perftools::profiles::Sample* s, int64_t key, int64_t value, int64_t unit = 0) {
    auto* l = s->add_label();
    l->set_key(key);
    l->set_num(value);
    if (unit != 0) l->set_num_unit(unit);
  }

 private:
  perftools::profiles::Profile profile_;
  std::unordered_map<std::string, int64_t> strings_;
  std::unordered_map<std::string, uint64_t> locations_;
};

// gzip (RFC 1952) of `in`, header mtime 0, so equal input gives equal bytes.
std::string gzip(const std::string& in) {
  z_stream zs{};
  // windowBits 15 + 16 asks zlib for a gzip wrapper instead of a zlib one.
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw InternalError(std::string("zlib deflateInit2 failed: ") + (zs.msg ? zs.msg : "?"));
  }
  std::unique_ptr<z_stream, decltype(&deflateEnd)> guard(&zs, &deflateEnd);
  std::string out;
  constexpr size_t kStep = size_t{1} << 30;  // avail_in and avail_out are 32-bit
  size_t consumed = 0;
  char buf[1 << 16];
  int rc = Z_OK;
  do {
    if (zs.avail_in == 0 && consumed < in.size()) {
      const size_t n = std::min(kStep, in.size() - consumed);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + consumed));
      zs.avail_in = static_cast<uInt>(n);
      consumed += n;
    }
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = deflate(&zs, consumed == in.size() ? Z_FINISH : Z_NO_FLUSH);
    if (rc == Z_STREAM_ERROR) throw InternalError("zlib deflate failed");
    out.append(buf, sizeof buf - zs.avail_out);
  } while (rc != Z_STREAM_END);
  return out;
}

}  // namespace

std::string encode_pprof(std::span<const MemoryChunkRecord> chunks, const PprofOptions& options) {
  const std::vector<const MemoryChunkRecord*> sorted = validated_in_address_order(chunks);

  ProfileBuilder b;
  auto& profile = b.profile();
  auto* allocations = profile.add_sample_type();
  allocations->set_type(b.string_id("allocations"));
  allocations->set_unit(b.string_id("count"));
  auto* space = profile.add_sample_type();
  space->set_type(b.string_id("space"));
  space->set_unit(b.string_id("bytes"));
  const int64_t bytes_unit = space->unit();
  const int64_t kind_key = b.string_id("kind");
  const int64_t core_key = b.string_id("core");
  const int64_t label_key = b.string_id("label");
  const int64_t size_key = b.string_id("bytes");

  auto bytes_of = [&](const MemoryChunkRecord& c) {
    return options.space == PprofBytes::kChunk ? c.chunk_bytes : c.requested_bytes;
  };
  // Adds one sample of `count` buffers of `bytes` each; returns it for extra labels.
  auto add_sample = [&](const MemoryChunkRecord& c, uint64_t count, uint64_t bytes) {
    auto* s = profile.add_sample();
    s->add_location_id(b.location_id(c.label.empty() ? std::string(kUnlabelled) : c.label));
    if (bytes != 0 && count > kMaxInt64 / bytes) {
      throw InvalidArgumentError(std::to_string(count) + " buffers of " + std::to_string(bytes) +
                                 " bytes labelled '" + c.label + "' on core " +
                                 std::to_string(c.core_id) + " exceed pprof's int64");
    }
    s->add_value(to_int64(count, "allocation count"));
    s->add_value(to_int64(count * bytes, "space"));
    b.add_str_label(s, kind_key, c.kind);
    // A string, as JAX's device label: pprof drops a numeric label whose value is 0 and that has
    // no unit, which would lose core 0.
    b.add_str_label(s, core_key, std::to_string(c.core_id));
    if (!c.label.empty()) b.add_str_label(s, label_key, c.label);
    b.add_num_label(s, size_key, to_int64(bytes, "buffer size"), bytes_unit);
    return s;
  };

  if (options.aggregate) {
    // (core, kind, label, bytes) -> (first record, count), in key order.
    using Key = std::tuple<int, std::string_view, std::string_view, uint64_t>;
    std::map<Key, std::pair<const MemoryChunkRecord*, uint64_t>> groups;
    for (const MemoryChunkRecord* c : sorted) {
      if (!c->in_use) continue;
      ++groups.try_emplace(Key{c->core_id, c->kind, c->label, bytes_of(*c)}, c, 0)
            .first->second.second;
    }
    for (const auto& [key, group] : groups) {
      add_sample(*group.first, group.second, std::get<3>(key));
    }
  } else {
    const int64_t offset_key = b.string_id("offset");
    const int64_t seq_key = b.string_id("alloc_seq");
    for (const MemoryChunkRecord* c : sorted) {
      if (!c->in_use) continue;
      auto* s = add_sample(*c, 1, bytes_of(*c));
      b.add_num_label(s, offset_key, to_int64(c->offset, "offset"), bytes_unit);
      b.add_num_label(s, seq_key, to_int64(c->alloc_seq, "alloc_seq"));
    }
  }

  std::string serialized;
  if (!profile.SerializeToString(&serialized)) {
    throw InternalError("cannot serialize the pprof profile (" +
                        std::to_string(profile.sample_size()) + " samples)");
  }
  return gzip(serialized);
}

void write_pprof(const std::string& path, std::span<const MemoryChunkRecord> chunks,
                 const PprofOptions& options) {
  write_file_atomically(path, "pprof profile", encode_pprof(chunks, options));
}

nlohmann::json memory_snapshot_json(std::span<const MemoryChunkRecord> chunks) {
  const std::vector<const MemoryChunkRecord*> sorted = validated_in_address_order(chunks);

  struct Totals {
    uint64_t total = 0, allocated = 0, requested = 0, free = 0, largest_free = 0;
    uint64_t blocks = 0, allocated_blocks = 0;
    void add(const MemoryChunkRecord& c) {
      total += c.chunk_bytes;
      ++blocks;
      if (c.in_use) {
        allocated += c.chunk_bytes;
        requested += c.requested_bytes;
        ++allocated_blocks;
      } else {
        free += c.chunk_bytes;
        largest_free = std::max(largest_free, c.chunk_bytes);
      }
    }
    // The size keys; torch's active_size equals allocated_size (vtpu frees at once, so no block
    // is ever "active_pending_free").
    void to(nlohmann::json& j) const {
      j["total_size"] = total;
      j["allocated_size"] = allocated;
      j["active_size"] = allocated;
      j["requested_size"] = requested;
      j["free_size"] = free;
      j["num_blocks"] = blocks;
      j["num_allocated_blocks"] = allocated_blocks;
    }
  };

  nlohmann::json segments = nlohmann::json::array();
  Totals all;
  for (size_t i = 0; i < sorted.size();) {
    const int core = sorted[i]->core_id;
    Totals t;
    nlohmann::json blocks = nlohmann::json::array();
    for (; i < sorted.size() && sorted[i]->core_id == core; ++i) {
      const MemoryChunkRecord& c = *sorted[i];
      t.add(c);
      all.add(c);
      blocks.push_back({{"address", c.offset},
                        {"size", c.chunk_bytes},
                        {"requested_size", c.requested_bytes},
                        {"state", c.in_use ? "active_allocated" : "inactive"},
                        {"label", c.label},
                        {"alloc_seq", c.alloc_seq},
                        {"kind", c.kind}});
    }
    nlohmann::json seg = {{"device", core}, {"address", 0}};
    t.to(seg);
    seg["largest_free_block"] = t.largest_free;
    seg["blocks"] = std::move(blocks);
    segments.push_back(std::move(seg));
  }
  nlohmann::json totals = nlohmann::json::object();
  all.to(totals);
  totals["num_segments"] = segments.size();
  return {{"format", "vtpu.memory_snapshot"},
          {"version", 1},
          {"segments", std::move(segments)},
          {"totals", std::move(totals)}};
}

void write_memory_snapshot(const std::string& path, std::span<const MemoryChunkRecord> chunks) {
  // Invalid UTF-8 in a label is replaced (U+FFFD), as the trace writer does, rather than thrown
  // as a nlohmann::json::type_error.
  write_file_atomically(
      path, "memory snapshot",
      memory_snapshot_json(chunks).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
          "\n");
}

}  // namespace vtpu
