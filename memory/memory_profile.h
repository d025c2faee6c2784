// Device memory profiles of HBM arenas, in two formats.
//
// 1. pprof, as jax.profiler.save_device_memory_profile writes it. XLA's PyClient::HeapProfile
//    builds a perftools.profiles.Profile (google/pprof's profile.proto, kept here as
//    memory/profile.proto) and JAX gzips the serialized message. The model:
//
//      sample_type  [allocations/count, space/bytes]        (in that order, as JAX)
//      sample       one per (core, kind, label, bytes): value = [n, n * bytes]
//                   labels  kind="buffer"  core="<id>"  label="<buffer label>"  bytes=<size>
//      location     one per distinct label: a single line whose function is named after the
//                   label ("(unlabelled)" for ""), standing in for JAX's Python stack, so that
//                   `go tool pprof -top FILE` lists buffers by label
//
//    JAX aggregates live buffers by (traceback, size, device); vtpu has no Python stacks, so the
//    label takes the traceback's place and the key is (core, kind, label, bytes). With
//    PprofOptions::aggregate = false every in-use chunk is its own sample (count 1) and also
//    carries `offset` and `alloc_seq` labels. Free chunks are not sampled.
//
// 2. A JSON snapshot of every chunk, free ones included, grouped per core after PyTorch's
//    torch.cuda.memory._snapshot(): one segment per core with its blocks in address order, plus
//    totals. See docs/MEMORY.md for the keys and how they differ from PyTorch's.
//
// Both take plain records (MemoryChunkRecord), so they know nothing of arenas or threads; an
// arena turns its chunk walk into records.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>

namespace vtpu {

/// One chunk of one core's HBM arena, in use or free. All sizes and offsets are bytes.
/// Plain data, thread-compatible.
struct MemoryChunkRecord {
  int core_id = 0;               // core (arena) that owns the chunk
  uint64_t offset = 0;           // bytes from the start of the core's arena
  uint64_t chunk_bytes = 0;      // bytes the allocator set aside (>= requested_bytes when in use)
  uint64_t requested_bytes = 0;  // bytes the caller asked for; 0 for a free chunk
  bool in_use = false;           // false: a free chunk
  std::string label;             // buffer label; "" if none (or free)
  uint64_t alloc_seq = 0;        // allocation number within the core, from 1 (0 for free)
  std::string kind = "buffer";   // what holds the bytes; JAX uses "buffer" and "executable"
};

/// Which size a pprof sample's space/bytes value counts.
enum class PprofBytes {
  kRequested,  // requested_bytes: the buffer's size, as JAX counts a buffer's on-device size
  kChunk,      // chunk_bytes: rounding included; sums to memory_stats().bytes_in_use
};

/// How encode_pprof() builds samples.
struct PprofOptions {
  /// true: one sample per (core, kind, label, bytes), value [count, count * bytes], as JAX
  /// aggregates per (traceback, size, device). false: one sample per in-use chunk. Default true.
  bool aggregate = true;
  /// The size the space/bytes value counts. Default kRequested (what JAX reports).
  PprofBytes space = PprofBytes::kRequested;
};

/// Encodes the in-use chunks as a gzipped pprof profile (perftools.profiles.Profile, the bytes
/// jax.profiler.device_memory_profile returns). The output is deterministic: samples are ordered
/// by (core, kind, label, bytes) (by (core, offset) when not aggregating), the string table and
/// ids in order of first use, no timestamp, and a gzip header with mtime 0.
/// Throws InvalidArgumentError if a record is inconsistent (chunk_bytes == 0, an in-use chunk
/// with requested_bytes > chunk_bytes, chunks of one core that overlap) or if a value does not
/// fit pprof's int64. Thread-safe (a pure function of its arguments).
std::string encode_pprof(std::span<const MemoryChunkRecord> chunks,
                         const PprofOptions& options = {});

/// Writes encode_pprof(chunks, options) to `path`, replacing the file. View it with
/// `go tool pprof -top PATH`. Throws as encode_pprof(), and for a file that cannot be written an
/// error naming the path and the errno text: NotFoundError (ENOENT, ENOTDIR),
/// PermissionDeniedError (EACCES, EPERM), ResourceExhaustedError (ENOSPC, EDQUOT, EFBIG), else
/// InvalidArgumentError. The file is replaced atomically (common/atomic_file.h): on error the old
/// file is as it was. Thread-safe; of concurrent writers to one path the last wins.
void write_pprof(const std::string& path, std::span<const MemoryChunkRecord> chunks,
                 const PprofOptions& options = {});

/// A JSON snapshot of every chunk, grouped per core after torch.cuda.memory._snapshot():
///
///   {"format": "vtpu.memory_snapshot", "version": 1,
///    "segments": [{"device": core, "address": 0, "total_size", "allocated_size", "active_size",
///                  "requested_size", "free_size", "largest_free_block", "num_blocks",
///                  "num_allocated_blocks",
///                  "blocks": [{"address", "size", "requested_size",
///                              "state": "active_allocated" | "inactive",
///                              "label", "alloc_seq", "kind"}, ...]}, ...],
///    "totals": {"total_size", "allocated_size", "active_size", "requested_size", "free_size",
///               "num_blocks", "num_allocated_blocks", "num_segments"}}
///
/// Segments are ordered by core id and blocks by address; an address is the offset in the
/// core's arena. Sizes are bytes: total_size sums every chunk, allocated_size and active_size the
/// in-use chunks, requested_size what callers asked for. Throws InvalidArgumentError as
/// encode_pprof(). Thread-safe (a pure function of its arguments).
nlohmann::json memory_snapshot_json(std::span<const MemoryChunkRecord> chunks);

/// Writes memory_snapshot_json(chunks) to `path` (indented by 2, newline-terminated), replacing
/// the file. Errors and thread-safety as write_pprof().
void write_memory_snapshot(const std::string& path, std::span<const MemoryChunkRecord> chunks);

}  // namespace vtpu
