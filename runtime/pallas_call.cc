#include "vtpu/runtime/pallas_call.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/runtime/device_buffer.h"
#include "vtpu/runtime/pallas_plan.h"
#include "vtpu/runtime/virtual_core.h"

namespace vtpu {

namespace {

constexpr int kMaxBuffers = 8;
constexpr int kMaxSemaphores = 64;
constexpr uint64_t kArenaGranule = 256;  // the bfc policy rounds every request to 256 bytes

using Clock = std::chrono::steady_clock;
using pallas_internal::checked_product;
using pallas_internal::make_plan;
using pallas_internal::OperandPlan;
using pallas_internal::Plan;
using pallas_internal::shape_text;

uint64_t round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

void check_options(const PallasCallOptions& o, int num_buffers) {
  if (num_buffers < 1 || num_buffers > kMaxBuffers) {
    throw InvalidArgumentError("pallas_call '" + o.name + "': num_buffers is " +
                               std::to_string(num_buffers) + " (expected 1.." +
                               std::to_string(kMaxBuffers) + ")");
  }
  if (o.num_dma_semaphores < 0 || o.num_dma_semaphores > kMaxSemaphores) {
    throw InvalidArgumentError("pallas_call '" + o.name + "': num_dma_semaphores is " +
                               std::to_string(o.num_dma_semaphores) + " (expected 0.." +
                               std::to_string(kMaxSemaphores) + ")");
  }
}

/// Walks the schedule of the header comment, calling the actions in order. Shared by the executor
/// and the simulator so that the simulated time follows exactly what runs.
template <typename Actions>
void walk_schedule(const Plan& plan, int n, Actions& act) {
  std::vector<int64_t> issued(plan.inputs.size(), 0);       // fetches issued per input
  std::vector<int64_t> waited(plan.inputs.size(), -1);      // last fetch waited per input
  std::vector<int64_t> wb_waited(plan.outputs.size(), -1);  // writebacks waited up to
  for (int64_t s = 0; s < plan.num_steps; ++s) {
    for (size_t i = 0; i < plan.inputs.size(); ++i) {
      const OperandPlan& p = plan.inputs[i];
      if (!p.pipelined) continue;
      const int64_t f = p.event_of_step[static_cast<size_t>(s)];
      const int64_t last = std::min<int64_t>(f + n - 1, static_cast<int64_t>(p.events.size()) - 1);
      while (issued[i] <= last) act.issue_fetch(i, issued[i]++);
    }
    for (size_t j = 0; j < plan.outputs.size(); ++j) {
      const OperandPlan& p = plan.outputs[j];
      if (!p.pipelined) continue;
      const int64_t v = p.event_of_step[static_cast<size_t>(s)];
      if (p.first_step[static_cast<size_t>(v)] == s && v - n >= 0 && wb_waited[j] < v - n) {
        for (int64_t w = wb_waited[j] + 1; w <= v - n; ++w) act.wait_writeback(j, w);
        wb_waited[j] = v - n;
      }
    }
    for (size_t i = 0; i < plan.inputs.size(); ++i) {
      const OperandPlan& p = plan.inputs[i];
      if (!p.pipelined) continue;
      const int64_t f = p.event_of_step[static_cast<size_t>(s)];
      if (waited[i] < f) {
        act.wait_fetch(i, f);
        waited[i] = f;
      }
    }
    act.body(s);
    for (size_t j = 0; j < plan.outputs.size(); ++j) {
      const OperandPlan& p = plan.outputs[j];
      if (!p.pipelined) continue;
      const int64_t v = p.event_of_step[static_cast<size_t>(s)];
      if (p.last_step[static_cast<size_t>(v)] == s) act.start_writeback(j, v);
    }
  }
  for (size_t j = 0; j < plan.outputs.size(); ++j) {
    const OperandPlan& p = plan.outputs[j];
    if (!p.pipelined) continue;
    for (int64_t w = wb_waited[j] + 1; w < static_cast<int64_t>(p.events.size()); ++w) {
      act.wait_writeback(j, w);
    }
  }
}

struct SimActions {
  const Plan& plan;
  int n;
  double hbm_bw, peak;
  double t = 0.0, dma_free = 0.0, dma_total = 0.0, compute_total = 0.0;
  std::vector<std::vector<double>> fetch_done, wb_done;

  double dma(uint64_t bytes) {
    const double d = static_cast<double>(bytes) / hbm_bw;
    const double start = std::max(t, dma_free);
    dma_free = start + d;
    dma_total += d;
    return dma_free;
  }
  void issue_fetch(size_t i, int64_t g) {
    fetch_done[i][static_cast<size_t>(g)] = dma(plan.inputs[i].event_bytes(g));
  }
  void wait_fetch(size_t i, int64_t f) { t = std::max(t, fetch_done[i][static_cast<size_t>(f)]); }
  void wait_writeback(size_t j, int64_t v) { t = std::max(t, wb_done[j][static_cast<size_t>(v)]); }
  void body(int64_t s) {
    const double c = plan.step_flops[static_cast<size_t>(s)] / peak;
    t += c;
    compute_total += c;
  }
  void start_writeback(size_t j, int64_t v) {
    wb_done[j][static_cast<size_t>(v)] = dma(plan.outputs[j].event_bytes(v));
  }
};

SimulatedTime simulate(const Plan& plan, int n, const HardwareProfile& profile,
                       const std::string& dtype) {
  SimActions a{plan, n, profile.hbm_bytes_per_second, profile.peak_flops(dtype), 0, 0, 0, 0,
               {},   {}};
  for (const auto& p : plan.inputs) a.fetch_done.emplace_back(p.events.size(), 0.0);
  for (const auto& p : plan.outputs) a.wb_done.emplace_back(p.events.size(), 0.0);
  walk_schedule(plan, n, a);
  SimulatedTime r;
  r.num_buffers = n;
  r.total_seconds = a.t;
  r.compute_seconds = a.compute_total;
  r.dma_seconds = a.dma_total;
  r.exposed_dma_seconds = std::max(0.0, a.t - a.compute_total);
  return r;
}

}  // namespace

DmaRegion BlockRef::region() const {
  const uint64_t es = element_size_bytes(dtype);
  return DmaRegion{data, valid_rows(), static_cast<uint64_t>(valid_cols()) * es,
                   static_cast<uint64_t>(row_stride) * es};
}

int64_t KernelContext::program_id(int axis) const {
  if (axis < 0 || axis >= static_cast<int>(grid_.size())) {
    throw InvalidArgumentError("program_id(" + std::to_string(axis) + ") on a grid of rank " +
                               std::to_string(grid_.size()));
  }
  return grid_index_[static_cast<size_t>(axis)];
}

int64_t KernelContext::num_programs(int axis) const {
  if (axis < 0 || axis >= static_cast<int>(grid_.size())) {
    throw InvalidArgumentError("num_programs(" + std::to_string(axis) + ") on a grid of rank " +
                               std::to_string(grid_.size()));
  }
  return grid_[static_cast<size_t>(axis)];
}

namespace {
template <typename V>
const auto& at_checked(const V& v, int k, const char* what) {
  if (k < 0 || k >= static_cast<int>(v.size())) {
    throw InvalidArgumentError(std::string(what) + " " + std::to_string(k) +
                               " is out of range (the kernel has " + std::to_string(v.size()) +
                               ")");
  }
  return v[static_cast<size_t>(k)];
}
}  // namespace

const BlockRef& KernelContext::input(int i) const { return at_checked(inputs_, i, "input"); }
const BlockRef& KernelContext::output(int j) const { return at_checked(outputs_, j, "output"); }
const BlockRef& KernelContext::scratch(int k) const { return at_checked(scratch_, k, "scratch"); }
DmaSemaphore& KernelContext::semaphore(int k) const {
  at_checked(*semaphores_, k, "DMA semaphore");
  return (*semaphores_)[static_cast<size_t>(k)];
}
int KernelContext::core_id() const { return core_->core_id(); }

void KernelContext::check_own_semaphore(const DmaSemaphore& sem) const {
  // As in Pallas, where DMA semaphores come from scratch_shapes: a copy on any other semaphore
  // could outlive the kernel unnoticed.
  const auto* begin = semaphores_->data();
  if (&sem < begin || &sem >= begin + semaphores_->size()) {
    throw InvalidArgumentError(
        "a kernel's copies must signal one of its own DMA semaphores (KernelContext::semaphore(k), "
        "k < num_dma_semaphores = " +
        std::to_string(semaphores_->size()) + ")");
  }
}

DmaCopy KernelContext::async_copy(const DmaRegion& src, const DmaRegion& dst,
                                  DmaSemaphore& sem) const {
  check_own_semaphore(sem);
  return core_->dma().start(src, dst, sem);
}

DmaCopy KernelContext::async_remote_copy(const DeviceBuffer& src, int64_t src_cols, int64_t row0,
                                         const BlockRef& dst, DmaSemaphore& sem) const {
  check_own_semaphore(sem);
  const uint64_t es = element_size_bytes(dst.dtype);
  // Rows compared without multiplying row0 out first (a huge row0 must not wrap).
  const uint64_t row_bytes = static_cast<uint64_t>(src_cols) * es;
  const uint64_t src_rows = row_bytes == 0 ? 0 : src.size_bytes() / row_bytes;
  if (src_cols != dst.cols() || src_cols < 1 || row0 < 0 || dst.rows() < 0 ||
      static_cast<uint64_t>(row0) > src_rows ||
      static_cast<uint64_t>(dst.rows()) > src_rows - static_cast<uint64_t>(row0)) {
    throw InvalidArgumentError(
        "remote copy of rows [" + std::to_string(row0) + ", " + std::to_string(row0 + dst.rows()) +
        ") x " + std::to_string(src_cols) + " columns from a " + std::to_string(src.size_bytes()) +
        "-byte buffer on core " + std::to_string(src.core_id()) + " into a block of shape " +
        shape_text(dst.shape) + " (expected the same columns and rows inside the source)");
  }
  auto pin = std::make_shared<BufferPin>(src.pin());
  const DmaRegion from{src.data() + static_cast<uint64_t>(row0 * src_cols) * es, dst.rows(),
                       static_cast<uint64_t>(src_cols) * es, 0};
  const DmaRegion to{dst.data, dst.rows(), static_cast<uint64_t>(dst.cols()) * es,
                     static_cast<uint64_t>(dst.row_stride) * es};
  return core_->dma().start(from, to, sem, false, std::move(pin));
}

namespace {
uint64_t scratch_logical_bytes(const ScratchSpec& s) {
  uint64_t bytes = element_size_bytes(s.dtype);
  for (int64_t d : s.shape) {
    bytes = checked_product({bytes, static_cast<uint64_t>(d)},
                            "scratch '" + s.name + "' of shape " + shape_text(s.shape));
  }
  return bytes;
}
/// VMEM scratch is tile-padded like a block; SMEM and the accumulator are charged as is.
uint64_t scratch_charged_bytes(const ScratchSpec& s) {
  return s.memory_space == MemorySpace::kVmem ? vmem_tile_padded_bytes(s.dtype, s.shape)
                                              : scratch_logical_bytes(s);
}
}  // namespace

/// Runs one pallas_call: the executor side of walk_schedule.
class PallasPipeline {
 public:
  PallasPipeline(VirtualCore& core, Plan& plan, const PallasCallOptions& o, const KernelBody& body)
      : core_(core), plan_(plan), o_(o), body_(body), n_(o.num_buffers) {}

  PallasCallStats run() {
    const auto t0 = Clock::now();
    allocate();
    try {
      walk_schedule(plan_, n_, *this);
    } catch (...) {
      // No copy may outlive the VMEM it writes, and teardown must not wait out a throttled
      // engine: drop the queued copies, cut the running one's delay short, then drain (at most
      // one memcpy).
      cancel_and_drain();
      throw;
    }
    check_end();
    stats_.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return stats_;
  }

  // Actions of walk_schedule.
  void issue_fetch(size_t i, int64_t g) {
    const OperandPlan& p = plan_.inputs[i];
    const DmaRegion src = hbm_region(p, g);
    const DmaRegion dst = slot_region(in_slots_[i], p, g);
    const bool edge = p.valid_rows(g) < p.brows || p.valid_cols(g) < p.bcols;
    in_copies_[i][static_cast<size_t>(g)] =
        core_.dma().start(src, dst, *in_sems_[i][static_cast<size_t>(g % n_)], edge);
    stats_.bytes_in += src.bytes();
    ++stats_.copies_in;
  }
  void wait_fetch(size_t i, int64_t f) {
    timed_wait(in_copies_[i][static_cast<size_t>(f)], plan_.inputs[i], "fetch", f);
  }
  void wait_writeback(size_t j, int64_t v) {
    timed_wait(out_copies_[j][static_cast<size_t>(v)], plan_.outputs[j], "writeback", v);
  }
  void start_writeback(size_t j, int64_t v) {
    const OperandPlan& p = plan_.outputs[j];
    DmaRegion src = slot_region(out_slots_[j], p, v);
    src.rows = p.valid_rows(v);
    src.row_bytes = static_cast<uint64_t>(p.valid_cols(v)) * p.es;
    const DmaRegion dst = hbm_region(p, v);
    out_copies_[j][static_cast<size_t>(v)] =
        core_.dma().start(src, dst, *out_sems_[j][static_cast<size_t>(v % n_)]);
    stats_.bytes_out += src.bytes();
    ++stats_.copies_out;
  }
  void body(int64_t s) {
    ctx_.grid_index_ = plan_.grid_index(s);
    for (size_t i = 0; i < plan_.inputs.size(); ++i)
      set_ref(ctx_.inputs_[i], plan_.inputs[i], in_slots_[i], s);
    for (size_t j = 0; j < plan_.outputs.size(); ++j)
      set_ref(ctx_.outputs_[j], plan_.outputs[j], out_slots_[j], s);
    const auto t = Clock::now();
    body_(ctx_);
    stats_.body_seconds += std::chrono::duration<double>(Clock::now() - t).count();
    stats_.total_flops += plan_.step_flops[static_cast<size_t>(s)];
    if (s == plan_.num_steps - 1) {
      // The body is over: any copy on a user semaphore still pending now was left in flight
      // (checked here, before the final writebacks queue behind it and let it finish).
      for (const DmaSemaphore& sem : *user_sems_)
        user_pending_at_end_.push_back(sem.pending_bytes());
    }
  }

 private:
  DmaRegion hbm_region(const OperandPlan& p, int64_t e) const {
    const auto& b = p.events[static_cast<size_t>(e)];
    std::byte* base = p.op->buffer->data() + p.op->offset_bytes;
    const uint64_t off =
        static_cast<uint64_t>(b[0] * p.rows * p.cols + b[1] * p.brows * p.cols + b[2] * p.bcols) *
        p.es;
    return DmaRegion{base + off, p.valid_rows(e), static_cast<uint64_t>(p.valid_cols(e)) * p.es,
                     static_cast<uint64_t>(p.cols) * p.es};
  }
  DmaRegion slot_region(const std::vector<DeviceBuffer>& slots, const OperandPlan& p,
                        int64_t e) const {
    return DmaRegion{slots[static_cast<size_t>(e % n_)].data(), p.brows,
                     static_cast<uint64_t>(p.bcols) * p.es, static_cast<uint64_t>(p.bcols) * p.es};
  }
  void set_ref(BlockRef& r, const OperandPlan& p, const std::vector<DeviceBuffer>& slots,
               int64_t s) {
    if (!p.pipelined) return;  // set once in allocate()
    const int64_t e = p.event_of_step[static_cast<size_t>(s)];
    r.data = slots[static_cast<size_t>(e % n_)].data();
    if (p.rank >= 2) {  // rank 3: the squeezed (rows, cols) block of one batch entry
      r.valid_shape = {p.valid_rows(e), p.valid_cols(e)};
    } else {
      r.valid_shape = {p.valid_cols(e)};
    }
  }
  void timed_wait(const DmaCopy& c, const OperandPlan& p, const char* what, int64_t e) {
    const auto t = Clock::now();
    try {
      c.wait();
    } catch (const DeadlineExceededError& err) {
      throw DeadlineExceededError(
          "pallas_call '" + o_.name + "' on core " + std::to_string(core_.core_id()) + ": " + what +
          " " + std::to_string(e) + " of " + p.label() + " (block " + shape_text(p.block_index(e)) +
          ", " + std::to_string(p.event_bytes(e)) + " bytes) timed out: " + err.message() +
          " (raise dma_timeout_ms, or check dma_bytes_per_second)");
    }
    stats_.dma_wait_seconds += std::chrono::duration<double>(Clock::now() - t).count();
  }
  /// Waits (bounded by the DMA timeout) for every copy; when that times out, cancels the queued
  /// ones and drains again, which takes at most one memcpy. Never throws.
  void drain_bounded() noexcept {
    try {
      core_.dma().drain(core_.dma().options().wait_timeout);
      return;
    } catch (...) {
    }
    cancel_and_drain();
  }
  void cancel_and_drain() noexcept {
    try {
      core_.dma().cancel();
    } catch (...) {
    }
    // After cancel() at most the running copy's memcpy is left. Wait it out even past the
    // timeout: freeing the VMEM slots or semaphores under it would be a use-after-free.
    for (;;) {
      try {
        core_.dma().drain(core_.dma().options().wait_timeout);
        return;
      } catch (...) {
      }
    }
  }

  void allocate();
  void check_end();

  VirtualCore& core_;
  Plan& plan_;
  const PallasCallOptions& o_;
  const KernelBody& body_;
  const int n_;
  PallasCallStats stats_;
  KernelContext ctx_;
  std::vector<BufferPin> pins_;
  std::vector<std::vector<DeviceBuffer>> in_slots_, out_slots_;
  std::vector<DeviceBuffer> scratch_;
  std::vector<std::vector<std::unique_ptr<DmaSemaphore>>> in_sems_, out_sems_;
  std::vector<std::vector<DmaCopy>> in_copies_, out_copies_;
  std::unique_ptr<std::vector<DmaSemaphore>> user_sems_;
  std::vector<uint64_t> user_pending_at_end_;  // per user semaphore, after the last body
};

void PallasPipeline::allocate() {
  stats_.name = o_.name;
  stats_.grid_steps = plan_.num_steps;
  stats_.num_buffers = n_;
  // Check every memory space's total before allocating anything (Mosaic checks the scoped VMEM
  // limit at compile time, before the kernel runs).
  struct Need {
    uint64_t bytes = 0;          // charged: tile-padded (VMEM), rounded to the arena granule
    uint64_t logical_bytes = 0;  // the elements themselves
    std::vector<std::string> parts;
  };
  std::map<MemorySpace, Need> need;
  for (const auto* list : {&plan_.inputs, &plan_.outputs}) {
    for (const auto& p : *list) {
      if (!p.pipelined) continue;
      Need& v = need[MemorySpace::kVmem];
      v.bytes += static_cast<uint64_t>(n_) * round_up(p.padded_bytes, kArenaGranule);
      v.logical_bytes += static_cast<uint64_t>(n_) * p.block_bytes;
      v.parts.push_back(
          p.op->name + ": " + std::to_string(n_) + " x " + std::to_string(p.padded_bytes) +
          " bytes tile-padded (" + std::to_string(p.block_bytes) + " logical; block " +
          shape_text(p.block_dims()) + " " + std::string(element_type_name(p.op->dtype)) + ")");
    }
  }
  for (const auto& s : o_.scratch) {
    if (s.memory_space == MemorySpace::kHbm) {
      throw InvalidArgumentError("scratch '" + s.name + "' of pallas_call '" + o_.name +
                                 "' is in hbm (expected vmem, smem or accumulator)");
    }
    if (s.shape.empty() || s.shape.size() > 2 ||
        std::any_of(s.shape.begin(), s.shape.end(), [](int64_t d) { return d < 1; })) {
      throw InvalidArgumentError("scratch '" + s.name + "' has shape " + shape_text(s.shape) +
                                 " (expected rank 1 or 2, every dim >= 1)");
    }
    const uint64_t bytes = scratch_logical_bytes(s);
    const uint64_t charged = scratch_charged_bytes(s);
    Need& v = need[s.memory_space];
    v.bytes += round_up(charged, kArenaGranule);
    v.logical_bytes += bytes;
    v.parts.push_back("scratch " + s.name + ": " + std::to_string(charged) + " bytes" +
                      (charged != bytes ? " tile-padded (" + std::to_string(bytes) + " logical)"
                                        : std::string()));
  }
  for (const auto& [space, v] : need) {
    const MemoryStats st = core_.memory(space).memory_stats();
    const uint64_t available = st.total_free_bytes;
    if (v.bytes > available) {
      const std::string name(memory_space_name(space));
      throw ScratchExhaustedError(
          space, v.bytes, available,
          "pallas_call '" + o_.name + "' on core " + std::to_string(core_.core_id()) +
              " exceeds the scoped " + name + " limit: it needs " + std::to_string(v.bytes) +
              " bytes (" + format_bytes(v.bytes) + ") of " + name + " but " +
              std::to_string(available) + " bytes (" + format_bytes(available) +
              ") are available (limit " + std::to_string(st.bytes_limit) + " bytes, " +
              std::to_string(st.bytes_in_use) + " in use) [" + join(v.parts, "; ") +
              "]; use smaller blocks or fewer buffers" +
              (space == MemorySpace::kVmem ? ", or raise vmem_limit_bytes" : ""));
    }
    if (space == MemorySpace::kVmem) {
      stats_.vmem_bytes = v.bytes;
      stats_.vmem_logical_bytes = v.logical_bytes;
    }
  }
  ctx_.core_ = &core_;
  ctx_.grid_ = plan_.grid;
  auto setup = [&](std::vector<OperandPlan>& list, std::vector<std::vector<DeviceBuffer>>& slots,
                   std::vector<std::vector<std::unique_ptr<DmaSemaphore>>>& sems,
                   std::vector<std::vector<DmaCopy>>& copies, std::vector<BlockRef>& refs) {
    for (auto& p : list) {
      pins_.push_back(p.op->buffer->pin());
      slots.emplace_back();
      sems.emplace_back();
      copies.emplace_back(p.events.size());
      BlockRef r;
      r.dtype = p.op->dtype;
      if (p.pipelined) {
        for (int b = 0; b < n_; ++b) {
          slots.back().push_back(
              core_.allocate(MemorySpace::kVmem, p.padded_bytes,
                             o_.name + "/" + p.op->name + "/" + std::to_string(b)));
          sems.back().push_back(std::make_unique<DmaSemaphore>());
        }
        r.shape =
            p.rank >= 2 ? std::vector<int64_t>{p.brows, p.bcols} : std::vector<int64_t>{p.bcols};
        r.row_stride = p.bcols;
        r.memory_space = MemorySpace::kVmem;
      } else {
        r.data = p.op->buffer->data() + p.op->offset_bytes;
        r.shape = p.op->shape;
        r.valid_shape = p.op->shape;
        r.row_stride = p.cols;
        r.memory_space = MemorySpace::kHbm;
      }
      refs.push_back(std::move(r));
    }
  };
  setup(plan_.inputs, in_slots_, in_sems_, in_copies_, ctx_.inputs_);
  setup(plan_.outputs, out_slots_, out_sems_, out_copies_, ctx_.outputs_);
  for (const auto& s : o_.scratch) {
    scratch_.push_back(
        core_.allocate(s.memory_space, scratch_charged_bytes(s), o_.name + "/" + s.name));
    BlockRef r;
    r.data = scratch_.back().data();
    r.dtype = s.dtype;
    r.shape = s.shape;
    r.valid_shape = s.shape;
    r.row_stride = s.shape.back();
    r.memory_space = s.memory_space;
    ctx_.scratch_.push_back(std::move(r));
  }
  user_sems_ =
      std::make_unique<std::vector<DmaSemaphore>>(static_cast<size_t>(o_.num_dma_semaphores));
  ctx_.semaphores_ = user_sems_.get();
}

void PallasPipeline::check_end() {
  std::vector<std::string> problems;
  for (size_t k = 0; k < user_pending_at_end_.size(); ++k) {
    if (user_pending_at_end_[k] > 0) {
      problems.push_back("DMA semaphore " + std::to_string(k) + " had " +
                         std::to_string(user_pending_at_end_[k]) +
                         " bytes of copies still in flight when the body returned");
    }
  }
  // Copies the body started complete before their VMEM is freed, whatever else happened.
  if (core_.dma().in_flight() > 0) drain_bounded();
  for (size_t k = 0; k < user_sems_->size(); ++k) {
    const uint64_t v = (*user_sems_)[k].value();
    if (v != 0) {
      problems.push_back("DMA semaphore " + std::to_string(k) + " holds " + std::to_string(v) +
                         " bytes (expected 0: every copy must be waited for)");
    }
  }
  for (const auto* sems : {&in_sems_, &out_sems_}) {
    for (const auto& per_op : *sems) {
      for (const auto& s : per_op) {
        if (s->value() != 0 || s->pending_bytes() != 0) {
          throw InternalError("pallas_call '" + o_.name + "': a pipeline semaphore holds " +
                              std::to_string(s->value()) + " bytes at the end");
        }
      }
    }
  }
  if (!problems.empty()) {
    throw FailedPreconditionError(
        "kernel '" + o_.name + "' on core " + std::to_string(core_.core_id()) + " ended with " +
        join(problems, "; ") + " (wait for every copy a kernel starts before it returns)");
  }
}

PallasCallStats pallas_call(VirtualCore& core, const std::vector<PallasOperand>& inputs,
                            const std::vector<PallasOperand>& outputs,
                            const PallasCallOptions& options, const KernelBody& body) {
  check_options(options, options.num_buffers);
  if (!body) throw InvalidArgumentError("pallas_call '" + options.name + "' has no body");
  Plan plan = make_plan(inputs, outputs, options, true);
  for (const auto* list : {&plan.inputs, &plan.outputs}) {
    for (const auto& p : *list) {
      if (p.op->buffer->core_id() != core.core_id()) {
        throw InvalidArgumentError(
            p.label() + " of pallas_call '" + options.name + "' is in the HBM of core " +
            std::to_string(p.op->buffer->core_id()) + ", not of core " +
            std::to_string(core.core_id()) +
            " (use KernelContext::async_remote_copy for another core's HBM)");
      }
    }
  }
  // No input/output aliasing (Pallas needs input_output_aliases for it; vtpu has none): an output
  // overlapping an input would be read and written in an order that depends on num_buffers.
  for (const auto& in : plan.inputs) {
    for (const auto& out : plan.outputs) {
      if (in.op->buffer != out.op->buffer) continue;
      const uint64_t a0 = in.op->offset_bytes, a1 = a0 + in.array_bytes;
      const uint64_t b0 = out.op->offset_bytes, b1 = b0 + out.array_bytes;
      if (a0 < b1 && b0 < a1) {
        throw InvalidArgumentError(
            in.label() + " (bytes [" + std::to_string(a0) + ", " + std::to_string(a1) + ")) and " +
            out.label() + " (bytes [" + std::to_string(b0) + ", " + std::to_string(b1) +
            ")) of pallas_call '" + options.name +
            "' overlap in the same buffer (input/output aliasing is not supported; use separate "
            "buffers)");
      }
    }
  }
  PallasPipeline pipeline(core, plan, options, body);
  return pipeline.run();
}

SimulatedTime simulate_pallas_call(const std::vector<PallasOperand>& inputs,
                                   const std::vector<PallasOperand>& outputs,
                                   const PallasCallOptions& options, int num_buffers,
                                   const HardwareProfile& profile) {
  check_options(options, num_buffers);
  const Plan plan = make_plan(inputs, outputs, options, false);
  return simulate(plan, num_buffers, profile, options.flops_dtype);
}

void to_json(nlohmann::json& j, const SimulatedTime& t) {
  j = nlohmann::json{{"num_buffers", t.num_buffers},
                     {"total_seconds", t.total_seconds},
                     {"compute_seconds", t.compute_seconds},
                     {"dma_seconds", t.dma_seconds},
                     {"exposed_dma_seconds", t.exposed_dma_seconds},
                     {"bound", t.dma_bound() ? "dma" : "compute"}};
}

void to_json(nlohmann::json& j, const PallasCallStats& s) {
  j = nlohmann::json{{"name", s.name},
                     {"grid_steps", s.grid_steps},
                     {"num_buffers", s.num_buffers},
                     {"vmem_bytes", s.vmem_bytes},
                     {"vmem_logical_bytes", s.vmem_logical_bytes},
                     {"bytes_in", s.bytes_in},
                     {"bytes_out", s.bytes_out},
                     {"copies_in", s.copies_in},
                     {"copies_out", s.copies_out},
                     {"total_flops", s.total_flops},
                     {"wall_seconds", s.wall_seconds},
                     {"body_seconds", s.body_seconds},
                     {"dma_wait_seconds", s.dma_wait_seconds}};
}

}  // namespace vtpu
