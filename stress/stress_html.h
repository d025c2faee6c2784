// The HTML report of `vtpu stress --html FILE`: one self-contained page (inline CSS, JS, SVG and
// canvas; no network access, no external fonts) drawn from the `vtpu stress --json` document
// (the contract is docs/STRESS.md, "Input"). Modelled on PyTorch's memory_viz views
// (https://pytorch.org/memory_viz: the active memory timeline and the allocator state view):
//
//   summary table          one row per run (allocator x auto-defragment), every summary field,
//                          the best value per column highlighted
//   fragmentation          one line per run over the events of one core (core picker), legend,
//                          hover readout
//   memory timeline        one small chart per core (bytes in use vs bytes reserved), run picker
//   occupancy map          the arena at its worst moment: address in rows, blocks coloured by a
//                          stable hash of their label, holes visible, internal waste hatched,
//                          hover shows label / id / offset / size
//
// The data is embedded as JSON in <script type="application/json" id="vtpu-stress-data"> with
// '<', '>' and '&' written as \u003c, \u003e, \u0026 and every non-ASCII character as \uXXXX,
// so no label can close the script element; the page inserts data into the DOM only as text
// (textContent), never as markup. The embedded document equals the input except in two ways that
// keep big pages small (StressHtmlOptions): worst-moment maps with more blocks than their share of
// the segment budget have their blocks merged (`blocks` becomes `blocks_merged`, see
// merge_worst_blocks), and past 20000 timeline samples every `timeline` is written column-wise
// (`timeline_columns`, same values). 8 cores x 6 runs x 1000 samples with 100k-block maps give a
// page of about 5 MB.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace vtpu {

/// Limits that keep the page small. Thread-compatible plain data.
struct StressHtmlOptions {
  /// Total segments (blocks after merging) of all worst-moment maps in the page; each map gets an
  /// equal share, clamped to [min_segments_per_map, max_segments_per_map]. A map with at most its
  /// share of blocks is embedded unchanged. Default 65536 (about 2.5 MB of map data).
  uint64_t total_segment_budget = 65536;
  /// Lower clamp of a map's share. Default 1024.
  uint64_t min_segments_per_map = 1024;
  /// Upper clamp of a map's share. Default 16384.
  uint64_t max_segments_per_map = 16384;
  /// Above this many timeline samples in the whole document, every `timeline` is embedded as
  /// `timeline_columns` (timeline_columns()), which drops the repeated key names: 8 cores x 6
  /// runs x 1000 samples take about 2.7 MB instead of 6.5 MB. Default 20000.
  uint64_t verbatim_timeline_samples = 20000;
};

/// Checks `report` against the `vtpu stress --json` contract (format "vtpu-stress", version 1,
/// and every field the page reads, with its type and range; blocks of a worst-moment map must
/// cover [0, capacity_bytes) in address order with no gap or overlap). Extra fields are allowed.
/// Throws InvalidArgumentError naming the JSON path of the first missing or wrong field and what
/// was expected, e.g. "stress report: runs[1].per_core[0].timeline[3].bytes_in_use: missing
/// (expected a non-negative integer)". Thread-safe (pure).
void validate_stress_report(const nlohmann::json& report);

/// The merged form of one worst-moment map (`worst` of the contract, already validated) for a
/// segment budget `budget` (>= 1). With L = the end of the last used block (the in-use extent,
/// or capacity when no block is used) and s = ceil(L / budget): a block of at least s bytes stays
/// one segment; runs of adjacent smaller blocks are merged into one segment, closed once it
/// reaches s bytes (past L the threshold is ceil(capacity / budget)). So at most 3*budget+1
/// segments cover [0, L), and holes of s bytes or more stay visible. Returns an object
/// {"original_blocks", "distinct_labels", "top_labels": [{"label", "bytes", "blocks"}, ...] (the
///  16 labels with the most used bytes, null for unlabelled), "min_block_bytes" (s),
///  "used_blocks", "free_blocks", "largest_free_bytes", "used_bytes", "requested_bytes" (a used
///  block without requested_bytes counts its bytes), "labels": [...], "columns": [...],
///  "segments": [[offset, bytes, state (0 free, 1 used, 2 merged with used bytes), label index
///  or -1, id or null, requested_bytes, block count, used bytes], ...]}; a merged segment's label
/// is the one with the most used bytes in it. Totals are exact (over the original blocks).
/// Thread-safe (pure).
nlohmann::json merge_worst_blocks(const nlohmann::json& worst, uint64_t budget);

/// A timeline (array of sample objects) as one array per key, in order of first appearance:
/// {"event": [...], "t_us": [...], ...}; a sample without a key gives null in that column. The
/// values are the input's, unchanged. Thread-safe (pure).
nlohmann::json timeline_columns(const nlohmann::json& timeline);

/// The page for `report` (validated first; throws InvalidArgumentError as validate_stress_report).
/// Labels with invalid UTF-8 are embedded with U+FFFD replacement characters. The returned string
/// is UTF-8 (in fact ASCII). Thread-safe (pure).
std::string render_stress_html(const nlohmann::json& report, const StressHtmlOptions& options);
std::string render_stress_html(const nlohmann::json& report);

}  // namespace vtpu
