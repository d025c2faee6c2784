// The plan of one pallas_call, internal to runtime/: each operand as a batch of 2-D arrays in
// blocks, and the grid points at which each block is fetched or visited. pallas_call.cc runs and
// simulates the plan; pallas_plan.cc builds and checks it (Mosaic's block-shape rules).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "vtpu/runtime/pallas_call.h"

namespace vtpu::pallas_internal {

inline constexpr int64_t kSublanes = 8;  // second-minor block dim granule (f32 tile rows)
inline constexpr int64_t kLanes = 128;   // minor block dim granule (f32 tile columns)

/// "(2, 3)", and "(4,)" for one dim, as Python prints a shape.
std::string shape_text(std::span<const int64_t> dims);

/// Multiplies non-negative factors, throwing InvalidArgumentError (naming `what`) past 2^62.
uint64_t checked_product(std::initializer_list<uint64_t> factors, const std::string& what);

/// One operand as a batch of 2-D arrays: rank-1 arrays are (1, 1, n), rank-2 (1, r, c); a rank-3
/// array (b, r, c) has blocks (1, br, bc), one batch entry per block. Thread-compatible.
struct OperandPlan {
  const PallasOperand* op = nullptr;
  bool is_output = false;
  bool pipelined = true;  // false: memory_space kHbm
  int rank = 2;
  int64_t batch = 1;             // array: leading dim (rank 3), else 1
  int64_t rows = 0, cols = 0;    // array
  int64_t brows = 0, bcols = 0;  // block
  uint64_t es = 4;               // element bytes
  uint64_t block_bytes = 0;      // one VMEM buffer, logical (brows x bcols elements)
  uint64_t padded_bytes = 0;     // the same padded to VMEM tiles: what the arena is charged
  uint64_t array_bytes = 0;      // the whole array in HBM
  // Consecutive grid points with the same block index share one event (fetch or visit).
  std::vector<std::array<int64_t, 3>> events;  // block index (batch, row block, col block)
  std::vector<int64_t> first_step, last_step;
  std::vector<int64_t> event_of_step;
  std::set<std::array<int64_t, 3>> visited;  // outputs: blocks visited so far (planning only)

  int64_t valid_rows(int64_t e) const {
    return std::min(brows, rows - events[static_cast<size_t>(e)][1] * brows);
  }
  int64_t valid_cols(int64_t e) const {
    return std::min(bcols, cols - events[static_cast<size_t>(e)][2] * bcols);
  }
  uint64_t event_bytes(int64_t e) const {
    return static_cast<uint64_t>(valid_rows(e) * valid_cols(e)) * es;
  }
  std::string label() const {
    return std::string(is_output ? "output" : "input") + " '" + op->name + "'";
  }
  /// The block shape as the user gave it (rank 1, 2 or 3).
  std::vector<int64_t> block_dims() const {
    if (rank == 3) return {1, brows, bcols};
    if (rank == 2) return {brows, bcols};
    return {bcols};
  }
  /// A block index as the index map returned it (rank entries).
  std::vector<int64_t> user_index(const std::array<int64_t, 3>& b) const {
    if (rank == 3) return {b[0], b[1], b[2]};
    if (rank == 2) return {b[1], b[2]};
    return {b[2]};
  }
  std::vector<int64_t> block_index(int64_t e) const {
    return user_index(events[static_cast<size_t>(e)]);
  }
};

/// The grid and every operand's plan; built by make_plan, then only read. Thread-compatible.
struct Plan {
  std::vector<int64_t> grid;
  int64_t num_steps = 1;
  std::vector<OperandPlan> inputs, outputs;
  std::vector<double> step_flops;

  std::vector<int64_t> grid_index(int64_t s) const {
    std::vector<int64_t> idx(grid.size());
    for (size_t a = grid.size(); a-- > 0;) {
      idx[a] = s % grid[a];
      s /= grid[a];
    }
    return idx;
  }
};

/// Checks the operands, the grid and the index maps, and lays out every block event. Throws
/// InvalidArgumentError naming the operand and the grid point. `need_buffers`: every operand must
/// have a buffer (execution, not simulation).
Plan make_plan(const std::vector<PallasOperand>& inputs, const std::vector<PallasOperand>& outputs,
               const PallasCallOptions& options, bool need_buffers);

}  // namespace vtpu::pallas_internal
