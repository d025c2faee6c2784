// vtpu.memory: one HBM arena with a chosen allocator policy (memory/hbm_arena.h), its buffers,
// statistics with JAX's keys, its block map and compaction, and the replay of a trace
// (memory/trace.h) on one arena with the stress harness's metrics (stress/stress_replay.h).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "py_args.h"
#include "py_common.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/memory/trace.h"
#include "vtpu/stress/stress_replay.h"

namespace vtpu::python {
namespace {

/// vtpu.memory.Buffer: a live buffer of an arena. Keeps the arena alive; the id stays valid until
/// free() (ids are never reused).
struct PyBuffer {
  std::shared_ptr<HbmArena> arena;
  BufferId id = 0;
  std::string label;
  bool freed = false;
};

std::shared_ptr<HbmArena> make_arena(py::handle capacity_bytes, py::handle policy,
                                     py::handle auto_defragment, bool defragment_before_growth,
                                     bool backing, bool poison_freed, py::handle max_internal,
                                     bool record_events, const std::string& name) {
  ArenaOptions o;
  o.capacity_bytes = bytes_arg(capacity_bytes, "capacity_bytes");
  o.policy = str_arg(policy, "policy");
  o.auto_defragment = on_off_arg(auto_defragment, "auto_defragment");
  o.defragment_before_growth = defragment_before_growth;
  o.backing = backing;
  o.poison_freed = poison_freed;
  if (!max_internal.is_none()) {
    o.policy_options.max_internal_fragmentation_bytes =
        bytes_arg(max_internal, "max_internal_fragmentation_bytes");
  }
  o.record_events = record_events;
  o.name = name;
  return std::make_shared<HbmArena>(o);
}

// Freed through this Buffer or by its id (Arena.free(id)); ids are never reused.
bool is_freed(const PyBuffer& b) {
  if (b.freed) return true;
  try {
    (void)b.arena->size_bytes(b.id);
    return false;
  } catch (const InvalidArgumentError&) {
    return true;
  }
}

BufferId id_of(py::handle buffer) {
  return static_cast<BufferId>(int_arg(buffer, "buffer", 1, INT64_MAX));
}

py::dict defragment_dict(const DefragmentResult& r) {
  py::dict d;
  d["buffers_moved"] = r.buffers_moved;
  d["bytes_moved"] = r.bytes_moved;
  d["pinned_buffers"] = r.pinned_buffers;
  d["largest_free_before"] = r.largest_free_before;
  d["largest_free_after"] = r.largest_free_after;
  d["duration_ns"] = r.duration_ns;
  d["supported"] = r.supported;
  return d;
}

// The block map in address order, PyTorch memory_snapshot()'s block fields where they overlap
// ("size", "requested_size", "state").
py::list blocks_list(const HbmArena& arena) {
  py::list out;
  for (const MemoryChunkRecord& r : arena.chunk_records()) {
    py::dict b;
    b["offset"] = r.offset;
    b["size"] = r.chunk_bytes;
    b["requested_size"] = r.requested_bytes;
    b["state"] = r.in_use ? "active_allocated" : "inactive";
    b["label"] = r.label;
    out.append(b);
  }
  return out;
}

py::object replay_trace(py::handle path, py::handle policy, py::handle capacity_bytes,
                        py::handle auto_defragment, bool defragment_before_growth, bool details,
                        bool search_capacity, py::handle capacity_search_max) {
  const std::string trace_path = str_arg(path, "path");
  StressReplayOptions ro;
  ro.policy = str_arg(policy, "policy");
  ro.capacity_bytes = bytes_arg(capacity_bytes, "capacity_bytes");
  ro.auto_defragment = on_off_arg(auto_defragment, "auto_defragment");
  ro.defragment_before_growth = defragment_before_growth;
  ro.track_worst = details;
  ro.timeline_samples = details ? ro.timeline_samples : 0;
  const uint64_t search_max = capacity_search_max.is_none()
                                  ? std::max<uint64_t>(4 * ro.capacity_bytes, 64 * kGiB)
                                  : bytes_arg(capacity_search_max, "capacity_search_max");
  nlohmann::json result;
  {
    py::gil_scoped_release release;
    const Trace trace = read_trace(trace_path);
    uint64_t skipped = 0;
    const std::vector<CoreStream> streams =
        compile_core_streams(trace.events, 1, trace_path, &skipped);
    if (ro.policy == "planned") ro.heap_plan = plan_for_stream(streams[0]);
    StressCoreMetrics m;
    {
      CoreReplayer replayer(streams[0], ro);
      replayer.run_all();
      m = replayer.finish();
    }
    if (search_capacity) {
      m.min_capacity_bytes = find_min_capacity(streams[0], ro, search_max);
      m.capacity_search_max_bytes = search_max;
    }
    result = stress_metrics_json(m, details);
    result["trace"] = trace_path;
    result["policy"] = ro.policy;
    result["capacity_bytes"] = ro.capacity_bytes;
    result["auto_defragment"] = ro.auto_defragment;
    result["skipped_events"] = skipped;
  }
  return to_python(result);
}

void register_buffer(py::module_& m) {
  py::class_<PyBuffer, std::shared_ptr<PyBuffer>>(
      m, "Buffer",
      "A live buffer of an Arena, as Arena.alloc returns it. Its offset may change when the arena "
      "compacts (Arena.defragment, or an allocation that auto-defragments).")
      .def_property_readonly(
          "id", [](const PyBuffer& b) { return b.id; },
          "The arena's id of the buffer (an int, never reused; Arena.free takes it too).")
      .def_property_readonly(
          "size", [](const PyBuffer& b) { return b.arena->size_bytes(b.id); },
          "Bytes requested (PyTorch's requested_size).")
      .def_property_readonly(
          "offset", [](const PyBuffer& b) { return b.arena->offset(b.id); },
          "Current bytes from the start of the arena.")
      .def_property_readonly(
          "label", [](const PyBuffer& b) { return b.label; }, "The label given to alloc.")
      .def_property_readonly("freed", &is_freed,
                             "Whether the buffer was freed (by free() or Arena.free).")
      .def(
          "free",
          [](PyBuffer& b) {
            b.arena->free(b.id);
            b.freed = true;
          },
          "Returns the buffer to its arena. A second free raises vtpu.InvalidArgumentError.")
      .def("__repr__", [](const PyBuffer& b) {
        if (is_freed(b)) return "Buffer(id=" + std::to_string(b.id) + ", freed)";
        return "Buffer(id=" + std::to_string(b.id) +
               ", size=" + std::to_string(b.arena->size_bytes(b.id)) +
               ", offset=" + std::to_string(b.arena->offset(b.id)) + ")";
      });
}

void register_arena_queries(py::class_<HbmArena, std::shared_ptr<HbmArena>>& c) {
  c.def(
       "stats", [](const HbmArena& a) { return to_python(nlohmann::json(a.memory_stats())); },
       "Memory statistics as a dict with the keys of JAX's Device.memory_stats() (bytes_in_use, "
       "peak_bytes_in_use, bytes_limit, largest_alloc_size, largest_free_block_bytes, num_allocs, "
       "...) plus vtpu's (num_frees, total_free_bytes, num_ooms, fragmentation, ...). Sizes in "
       "bytes; bytes_in_use counts the policy's chunk bytes (rounding included).")
      .def(
          "memory_stats",
          [](const HbmArena& a) { return to_python(nlohmann::json(a.memory_stats())); },
          "The same dict as stats(), under JAX's name.")
      .def_property_readonly(
          "fragmentation", [](const HbmArena& a) { return a.memory_stats().fragmentation(); },
          "1 - largest free block / total free bytes (0.0 when nothing is free): the share of "
          "free bytes that the largest single request cannot use.")
      .def_property_readonly(
          "largest_free_block_bytes",
          [](const HbmArena& a) { return a.free_space().largest_free_block_bytes; },
          "Bytes of the largest block an allocation could get now.")
      .def_property_readonly(
          "total_free_bytes", [](const HbmArena& a) { return a.free_space().total_free_bytes; },
          "Bytes of all free blocks.")
      .def("blocks", &blocks_list,
           "Every block in address order, free or in use, as dicts: offset, size (bytes the "
           "policy set aside), requested_size (0 when free), state (\"active_allocated\" or "
           "\"inactive\", as torch.cuda.memory_snapshot names them) and label.")
      .def("occupancy_map", &HbmArena::occupancy_map,
           "A 100-character picture of the arena: '#' in use, '+' internal waste (rounding), '.' "
           "free; each character covers capacity/100 bytes.")
      .def("check_consistency", &HbmArena::check_consistency,
           "Verifies the policy's and the arena's invariants; raises vtpu.InternalError on the "
           "first violation.")
      .def(
          "save_event_log",
          [](const HbmArena& a, const std::string& path) {
            if (!a.records_events()) {
              throw FailedPreconditionError("save_event_log('" + path +
                                            "'): the arena records no events; expected "
                                            "Arena(..., record_events=True)");
            }
            a.write_event_log(path);
          },
          py::arg("path"),
          "Writes the events recorded so far as a vtpu trace file, which replay_trace reads. "
          "Needs Arena(record_events=True): FailedPreconditionError otherwise.")
      .def_property_readonly("capacity_bytes", &HbmArena::capacity_bytes,
                             "Bytes the arena manages.")
      .def_property_readonly("policy", &HbmArena::policy_name, "The allocator policy's name.")
      .def("__repr__", [](const HbmArena& a) {
        return "Arena(capacity_bytes=" + std::to_string(a.capacity_bytes()) + ", policy='" +
               a.policy_name() + "')";
      });
}

void register_arena(py::module_& m) {
  py::class_<HbmArena, std::shared_ptr<HbmArena>> c(
      m, "Arena",
      "One HBM arena (one core's memory) with a chosen allocator policy. Thread-safe.\n\n"
      "Arena(capacity_bytes, policy=\"bfc\", *, auto_defragment=True,\n"
      "      defragment_before_growth=False, backing=False, poison_freed=False,\n"
      "      max_internal_fragmentation_bytes=None, record_events=False, name=\"\")\n\n"
      "capacity_bytes: an int or a size such as \"64M\" (K, M, G, T = 1024^n).\n"
      "policy: one of vtpu.memory.POLICIES: bfc (TensorFlow's best-fit with coalescing),\n"
      "    tlsf (two-level segregated fit), first_fit, buddy (power-of-two blocks); all\n"
      "    hand out 256-byte granules.\n"
      "auto_defragment: compact and retry once when a request fails for fragmentation, as\n"
      "    the TPU runtime does (True/False or \"on\"/\"off\").\n"
      "defragment_before_growth: also compact before a request would raise the footprint.\n"
      "backing: hold real bytes (default: offsets only). poison_freed: fill freed bytes.\n"
      "max_internal_fragmentation_bytes: bfc's split threshold (default capacity / 128,\n"
      "    at most 128 MiB). record_events: keep an event log for save_event_log().\n\n"
      "An allocation that does not fit raises vtpu.ResourceExhaustedError (a MemoryError)\n"
      "whose .report dict, also its attributes, is the out-of-memory report:\n"
      "requested_bytes, rounded_bytes, bytes_in_use, bytes_limit, total_free_bytes,\n"
      "largest_free_block_bytes, fragmentation, largest_live_buffers, occupancy_map, ...");
  c.def(py::init(&make_arena), py::arg("capacity_bytes"), py::arg("policy") = "bfc", py::kw_only(),
        py::arg("auto_defragment") = true, py::arg("defragment_before_growth") = false,
        py::arg("backing") = false, py::arg("poison_freed") = false,
        py::arg("max_internal_fragmentation_bytes") = py::none(), py::arg("record_events") = false,
        py::arg("name") = "");
  c.def(
       "alloc",
       [](const std::shared_ptr<HbmArena>& a, py::handle nbytes, std::string label) {
         const uint64_t size = bytes_arg(nbytes, "nbytes");
         if (size == 0) {
           throw InvalidArgumentError("Arena.alloc: nbytes=0 (expected a byte count >= 1)");
         }
         const BufferId id = a->allocate(size, label);
         return std::make_shared<PyBuffer>(PyBuffer{a, id, std::move(label)});
       },
       py::arg("nbytes"), py::arg("label") = "",
       "Allocates nbytes (an int >= 1 or a size such as \"4K\") and returns a Buffer. Raises "
       "vtpu.ResourceExhaustedError with the out-of-memory report when no block fits (after "
       "auto-defragmentation), vtpu.InvalidArgumentError for 0 bytes.")
      .def(
          "free",
          [](HbmArena& a, py::handle buffer) {
            if (!py::isinstance<PyBuffer>(buffer)) return a.free(id_of(buffer));
            auto& b = buffer.cast<PyBuffer&>();
            // Another arena's id could name a live buffer here: refuse it rather than free that.
            if (b.arena.get() != &a) {
              throw InvalidArgumentError("buffer " + std::to_string(b.id) +
                                         " belongs to another arena (expected one of this arena)");
            }
            a.free(b.id);
            b.freed = true;
          },
          py::arg("buffer"),
          "Frees a Buffer (or its id). An unknown or already freed buffer raises "
          "vtpu.InvalidArgumentError.")
      .def(
          "defragment", [](HbmArena& a) { return defragment_dict(a.defragment()); },
          "Compacts the arena now: slides every live buffer toward offset 0 in address order. "
          "Returns a dict: buffers_moved, bytes_moved, pinned_buffers, largest_free_before, "
          "largest_free_after, duration_ns, supported.");
  register_arena_queries(c);
}

}  // namespace

void register_memory(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "memory",
      "One HBM arena with a chosen allocator policy (alloc/free, JAX-keyed stats, fragmentation, "
      "block map, defragmentation, out-of-memory reports) and trace replay.");
  m.attr("POLICIES") = py::tuple(py::cast(known_allocator_policies()));
  register_buffer(m);
  register_arena(m);
  m.def("replay_trace", &replay_trace, py::arg("path"), py::arg("policy") = "bfc",
        py::arg("capacity_bytes") = "16G", py::kw_only(), py::arg("auto_defragment") = true,
        py::arg("defragment_before_growth") = false, py::arg("details") = false,
        py::arg("search_capacity") = false, py::arg("capacity_search_max") = py::none(),
        "Replays a vtpu trace file (memory/trace.h; the PyTorch traces of data/traces) on one\n"
        "arena and returns the stress harness's metrics for it as a dict: the per-core figures\n"
        "of `vtpu stress --trace PATH --cores 1 --load off` (events, allocs, frees,\n"
        "peak_live_bytes, peak_reserved_bytes, reserved_over_live, fragmentation_mean/max,\n"
        "false_ooms, true_ooms, defragmentations, ...) plus trace, policy, capacity_bytes,\n"
        "auto_defragment and skipped_events (oom and defragment events, which replay skips).\n\n"
        "policy: one of POLICIES, or \"planned\" (a heap plan made from the trace).\n"
        "Events of every core replay on the one arena.\n"
        "details=True adds the timeline and the worst moment's block map.\n"
        "search_capacity=True adds min_capacity_bytes, the smallest capacity with no OOM (up\n"
        "to capacity_search_max, default max(4 x capacity_bytes, 64G)).\n"
        "Runs without the GIL.");
}

}  // namespace vtpu::python
