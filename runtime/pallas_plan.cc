#include "vtpu/runtime/pallas_plan.h"

#include <algorithm>
#include <string>

#include "vtpu/common/element_type.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/device_buffer.h"

namespace vtpu {
namespace pallas_internal {

std::string shape_text(std::span<const int64_t> dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

uint64_t checked_product(std::initializer_list<uint64_t> factors, const std::string& what) {
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  uint64_t r = 1;
  for (uint64_t f : factors) {
    if (f != 0 && r > kLimit / f) {
      throw InvalidArgumentError(what + " is too large (more than 2^62 bytes)");
    }
    r *= f;
  }
  return r;
}

namespace {

void check_block_shape(const OperandPlan& p, const std::vector<int64_t>& shape,
                       const std::vector<int64_t>& block) {
  auto fail = [&](const std::string& why) {
    throw InvalidArgumentError(p.label() + " of shape " + shape_text(shape) + " has block shape " +
                               shape_text(block) + ": " + why);
  };
  if (block.size() != shape.size()) {
    fail("the block rank is " + std::to_string(block.size()) + " (expected " +
         std::to_string(shape.size()) + ", the array rank)");
  }
  for (size_t d = 0; d < block.size(); ++d) {
    if (block[d] < 1) fail("block dim " + std::to_string(d) + " is not positive");
  }
  // Mosaic's rule (jax/_src/pallas/mosaic/lowering.py, _check_block_mappings): each of the last
  // two block dims equals the array dim or is a multiple of 128 (last) / 8 (second-to-last).
  // Pallas has no separate "block <= array" check, so a block larger than the array is legal
  // exactly when it is such a multiple: the one block spans the whole dim and the rest is
  // padding. Anything else larger than the array is rejected with its own message.
  auto check_dim = [&](size_t d, int64_t granule, const char* which) {
    const int64_t b = block[d], a = shape[d];
    if (b == a || b % granule == 0) return;
    const std::string dim = "the " + std::string(which) + " block dim " + std::to_string(b);
    if (b > a) {
      fail(dim + " is larger than the array dim " + std::to_string(a) + " (expected at most " +
           std::to_string(a) +
           ": equal to it to span the whole dim, or "
           "a multiple of " +
           std::to_string(granule) + ", which Pallas TPU pads; TPU (8, 128) tiling)");
    }
    fail(dim + " must be a multiple of " + std::to_string(granule) + " or equal the array dim " +
         std::to_string(a) + " (TPU (8, 128) tiling)");
  };
  check_dim(block.size() - 1, kLanes, "last");
  if (block.size() >= 2) check_dim(block.size() - 2, kSublanes, "second-to-last");
  if (block.size() == 3 && block[0] != 1) {
    fail("the leading block dim is " + std::to_string(block[0]) +
         " (expected 1: one batch entry per grid point, Pallas's None/1; the body sees the "
         "squeezed 2-D block)");
  }
}

/// Rows of a VMEM tile for an element size: (8, 128) for 32-bit types; 16-bit types pack two
/// rows per sublane (16, 128) and 8-bit types four (32, 128), as Mosaic lays out VMEM. 64-bit
/// types (not native on TPU) are taken as (8, 128).
int64_t tile_rows(uint64_t element_bytes) {
  return element_bytes >= 4 ? kSublanes : kSublanes * static_cast<int64_t>(4 / element_bytes);
}

OperandPlan make_operand_plan(const PallasOperand& op, bool is_output) {
  OperandPlan p;
  p.op = &op;
  p.is_output = is_output;
  p.pipelined = op.spec.memory_space != MemorySpace::kHbm;
  if (op.spec.memory_space != MemorySpace::kHbm && op.spec.memory_space != MemorySpace::kVmem) {
    throw InvalidArgumentError(p.label() + " has memory space " +
                               std::string(memory_space_name(op.spec.memory_space)) +
                               " (expected vmem, pipelined, or hbm, left in place)");
  }
  if (op.shape.empty() || op.shape.size() > 3) {
    throw InvalidArgumentError(
        p.label() + " has shape " + shape_text(op.shape) + ": rank " +
        std::to_string(op.shape.size()) +
        " is not supported (expected rank 1, 2, or 3 with a leading batch dim blocked by 1; "
        "see docs/KERNELS.md)");
  }
  for (int64_t d : op.shape) {
    if (d < 1) {
      throw InvalidArgumentError(p.label() + " has shape " + shape_text(op.shape) +
                                 " (expected every dim >= 1)");
    }
  }
  p.rank = static_cast<int>(op.shape.size());
  p.batch = p.rank == 3 ? op.shape[0] : 1;
  p.rows = p.rank >= 2 ? op.shape[static_cast<size_t>(p.rank - 2)] : 1;
  p.cols = op.shape.back();
  p.es = element_size_bytes(op.dtype);
  const std::vector<int64_t> block =
      (op.spec.block_shape.empty() || !p.pipelined) ? op.shape : op.spec.block_shape;
  check_block_shape(p, op.shape, block);
  p.brows = p.rank >= 2 ? block[static_cast<size_t>(p.rank - 2)] : 1;
  p.bcols = block.back();
  p.block_bytes =
      checked_product({static_cast<uint64_t>(p.brows), static_cast<uint64_t>(p.bcols), p.es},
                      p.label() + "'s block " + shape_text(block));
  p.padded_bytes = vmem_tile_padded_bytes(op.dtype, block);
  const uint64_t array_bytes = p.array_bytes =
      checked_product({static_cast<uint64_t>(p.batch), static_cast<uint64_t>(p.rows),
                       static_cast<uint64_t>(p.cols), p.es},
                      p.label() + " of shape " + shape_text(op.shape));
  if (op.buffer != nullptr) {
    // offset + bytes must not wrap.
    const uint64_t need =
        op.offset_bytes > op.buffer->size_bytes() ? UINT64_MAX : array_bytes + op.offset_bytes;
    if (op.buffer->size_bytes() < need || need < array_bytes) {
      throw InvalidArgumentError(p.label() + " of shape " + shape_text(op.shape) + " " +
                                 std::string(element_type_name(op.dtype)) + " at offset " +
                                 std::to_string(op.offset_bytes) + " needs " +
                                 std::to_string(need) + " bytes but its buffer holds " +
                                 std::to_string(op.buffer->size_bytes()));
    }
  }
  return p;
}

}  // namespace

Plan make_plan(const std::vector<PallasOperand>& inputs, const std::vector<PallasOperand>& outputs,
               const PallasCallOptions& options, bool need_buffers) {
  Plan plan;
  plan.grid = options.grid;
  for (size_t a = 0; a < plan.grid.size(); ++a) {
    if (plan.grid[a] < 1) {
      throw InvalidArgumentError("pallas_call '" + options.name + "' has grid " +
                                 shape_text(plan.grid) + " (expected every extent >= 1)");
    }
    // Checked before multiplying: extents like (2^32, 2^32) must not wrap.
    if (plan.grid[a] > (int64_t{1} << 40) / plan.num_steps) {
      throw InvalidArgumentError("pallas_call '" + options.name + "' has grid " +
                                 shape_text(plan.grid) + " (more than 2^40 grid points)");
    }
    plan.num_steps *= plan.grid[a];
  }
  if (outputs.empty()) {
    throw InvalidArgumentError("pallas_call '" + options.name + "' has no outputs");
  }
  for (const auto& op : inputs) plan.inputs.push_back(make_operand_plan(op, false));
  for (const auto& op : outputs) plan.outputs.push_back(make_operand_plan(op, true));
  if (need_buffers) {
    for (const auto* list : {&plan.inputs, &plan.outputs}) {
      for (const auto& p : *list) {
        if (p.op->buffer == nullptr) {
          throw InvalidArgumentError(p.label() + " of pallas_call '" + options.name +
                                     "' has no buffer");
        }
      }
    }
  }
  plan.step_flops.assign(static_cast<size_t>(plan.num_steps), 0.0);
  for (int64_t s = 0; s < plan.num_steps; ++s) {
    const std::vector<int64_t> gi = plan.grid_index(s);
    if (options.step_flops) plan.step_flops[static_cast<size_t>(s)] = options.step_flops(gi);
    for (auto* list : {&plan.inputs, &plan.outputs}) {
      for (auto& p : *list) {
        std::array<int64_t, 3> b{0, 0, 0};
        if (p.pipelined && p.op->spec.index_map) {
          const std::vector<int64_t> idx = p.op->spec.index_map(gi);
          if (idx.size() != static_cast<size_t>(p.rank)) {
            throw InvalidArgumentError(
                p.label() + "'s index map returned " + std::to_string(idx.size()) +
                " block indices at grid point " + shape_text(gi) + " (expected " +
                std::to_string(p.rank) + ", the array rank)");
          }
          if (p.rank == 3) {
            b = {idx[0], idx[1], idx[2]};
          } else if (p.rank == 2) {
            b = {0, idx[0], idx[1]};
          } else {
            b = {0, 0, idx[0]};
          }
          // Compared with the block counts, not multiplied out (a huge index must not wrap).
          if (b[0] < 0 || b[1] < 0 || b[2] < 0 || b[0] >= p.batch ||
              b[1] >= (p.rows + p.brows - 1) / p.brows ||
              b[2] >= (p.cols + p.bcols - 1) / p.bcols) {
            throw InvalidArgumentError(p.label() + "'s index map gives block " + shape_text(idx) +
                                       " at grid point " + shape_text(gi) +
                                       ", outside the array of shape " + shape_text(p.op->shape) +
                                       " in blocks of " + shape_text(p.block_dims()) +
                                       " (block indices must be in [0, ceil(dim / block)))");
          }
        }
        if (p.events.empty() || p.events.back() != b) {
          if (p.is_output) {
            // A set of visited blocks keeps planning O(steps log steps).
            if (!p.visited.insert(b).second) {
              throw InvalidArgumentError(
                  p.label() + " revisits block " + shape_text(p.user_index(b)) + " at grid point " +
                  shape_text(gi) +
                  " after leaving it (an output block must be visited by consecutive grid "
                  "points only; its first visit was already written back)");
            }
          }
          p.events.push_back(b);
          p.first_step.push_back(s);
          p.last_step.push_back(s);
        } else {
          p.last_step.back() = s;
        }
        p.event_of_step.push_back(static_cast<int64_t>(p.events.size()) - 1);
      }
    }
  }
  return plan;
}

}  // namespace pallas_internal

using pallas_internal::checked_product;
using pallas_internal::kLanes;
using pallas_internal::shape_text;
using pallas_internal::tile_rows;

uint64_t vmem_tile_padded_bytes(ElementType dtype, std::span<const int64_t> block_shape) {
  const uint64_t es = element_size_bytes(dtype);
  if (block_shape.empty()) return es;
  auto up = [](int64_t v, int64_t m) { return static_cast<uint64_t>((v + m - 1) / m * m); };
  const std::string what = "a VMEM block of shape " + shape_text(block_shape);
  if (block_shape.size() == 1) {
    // A rank-1 block is laid out as (1, n) rows of whole tiles: Mosaic's 1-D tiling is one
    // (8, 128) tile of 32-bit words (the 1024-element chunk of its rank-1 block rule).
    return checked_product({up(block_shape[0], tile_rows(es) * kLanes), es}, what);
  }
  const size_t r = block_shape.size();
  uint64_t lead = 1;
  for (size_t d = 0; d + 2 < r; ++d) lead = checked_product({lead, up(block_shape[d], 1)}, what);
  return checked_product(
      {lead, up(block_shape[r - 2], tile_rows(es)), up(block_shape[r - 1], kLanes), es}, what);
}

}  // namespace vtpu
