#include "vtpu/bench/collective_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "vtpu/common/error.h"
#include "vtpu/common/host.h"
#include "vtpu/common/median.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/runtime/process_exchange.h"

namespace vtpu {

namespace {

using Clock = std::chrono::steady_clock;

// Folds b into a with `op`, as ReduceOp defines it.
double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kMin:
      return std::min(a, b);
  }
  return a;
}

// ---- The ops. Each is one function; list it in collective_bench_ops(). ----

// The fold of every rank's input element i in rank order 0..n-1: the sequential reference of the
// reducing ops.
double fold_inputs(ReduceOp reduce, int n, uint64_t i) {
  double acc = bench_input_value(reduce, 0, i);
  for (int r = 1; r < n; ++r) acc = combine(reduce, acc, bench_input_value(reduce, r, i));
  return acc;
}

template <typename T>
std::span<const T> send_span(const CollectiveBenchCall& call, uint64_t elements) {
  return {static_cast<const T*>(call.send), elements};
}
template <typename T>
std::span<T> recv_span(const CollectiveBenchCall& call, uint64_t elements) {
  return {static_cast<T*>(call.recv), elements};
}

// all_reduce (ncclAllReduce, lax.psum): count elements in and out on every core; nccl-tests'
// size is count * element bytes and its factor 2(n-1)/n. Every algorithm Communicator::all_reduce
// accepts; auto resolves per size with Communicator::select_algorithm.
CollectiveBenchOp make_all_reduce_bench_op() {
  CollectiveBenchOp op;
  op.name = "all_reduce";
  op.uses_reduce_op = true;
  for (Algorithm a : {Algorithm::kRing, Algorithm::kBidirectionalRing,
                      Algorithm::kRecursiveDoubling, Algorithm::kTorus2d,
                      Algorithm::kRingReduceScatter, Algorithm::kDirect, Algorithm::kHierarchical})
    op.algorithms.emplace_back(algorithm_name(a));
  op.auto_algorithm = [](const Communicator& comm, const CollectiveBenchShape& shape) {
    const Algorithm configured = comm.options().algorithm;
    return std::string(algorithm_name(
        configured != Algorithm::kAuto ? configured : comm.select_algorithm(shape.bytes)));
  };
  op.busbw_factor = [](int n) { return 2.0 * (n - 1) / n; };
  op.shape = [](uint64_t bytes, uint64_t element_bytes, int) {
    const uint64_t count = bytes / element_bytes;
    return CollectiveBenchShape{count, count, count, count * element_bytes};
  };
  op.run = [](Communicator& comm, CoreContext& ctx, const CollectiveBenchCall& call) {
    const CollectiveOptions options{parse_algorithm(call.algorithm)};
    visit_data_type(call.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const uint64_t n = call.shape.count;
      comm.all_reduce<T>(ctx, send_span<T>(call, n), recv_span<T>(call, n), call.reduce, options);
    });
  };
  op.same_output_on_every_core = true;
  op.reference = [](int, int n, ReduceOp reduce, const CollectiveBenchShape& shape,
                    std::span<double> expected) {
    for (uint64_t i = 0; i < shape.recv_elements; ++i) expected[i] = fold_inputs(reduce, n, i);
  };
  return op;
}

// all_gather (ncclAllGather, lax.all_gather tiled on axis 0): each core sends count elements and
// receives n * count, block q being rank q's input. nccl-tests: count = (bytes / element) / n,
// size = the whole output (n * count elements), factor (n-1)/n.
CollectiveBenchOp make_all_gather_bench_op() {
  CollectiveBenchOp op;
  op.name = "all_gather";
  op.algorithms = {std::string(algorithm_name(Algorithm::kDirect))};  // in process
  op.busbw_factor = [](int n) { return (n - 1.0) / n; };
  op.shape = [](uint64_t bytes, uint64_t element_bytes, int n) {
    const uint64_t count = bytes / element_bytes / static_cast<uint64_t>(n);
    const uint64_t total = count * static_cast<uint64_t>(n);
    return CollectiveBenchShape{count, count, total, total * element_bytes};
  };
  op.run = [](Communicator& comm, CoreContext& ctx, const CollectiveBenchCall& call) {
    visit_data_type(call.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t dims[] = {static_cast<int64_t>(call.shape.send_elements)};
      comm.all_gather<T>(ctx, send_span<T>(call, call.shape.send_elements),
                         recv_span<T>(call, call.shape.recv_elements), dims, /*axis=*/0,
                         /*tiled=*/true);
    });
  };
  op.same_output_on_every_core = true;
  op.reference = [](int, int n, ReduceOp reduce, const CollectiveBenchShape& shape,
                    std::span<double> expected) {
    const uint64_t c = shape.send_elements;
    for (int q = 0; q < n; ++q)
      for (uint64_t i = 0; i < c; ++i)
        expected[static_cast<uint64_t>(q) * c + i] = bench_input_value(reduce, q, i);
  };
  return op;
}

// reduce_scatter (ncclReduceScatter, lax.psum_scatter tiled on dimension 0): each core sends
// n * count elements and receives block r (count elements) of the rank-order fold. nccl-tests:
// count = (bytes / element) / n, size = the whole input (n * count elements), factor (n-1)/n.
CollectiveBenchOp make_reduce_scatter_bench_op() {
  CollectiveBenchOp op;
  op.name = "reduce_scatter";
  op.uses_reduce_op = true;
  op.algorithms = {std::string(algorithm_name(Algorithm::kDirect))};  // in process
  op.busbw_factor = [](int n) { return (n - 1.0) / n; };
  op.shape = [](uint64_t bytes, uint64_t element_bytes, int n) {
    const uint64_t count = bytes / element_bytes / static_cast<uint64_t>(n);
    const uint64_t total = count * static_cast<uint64_t>(n);
    return CollectiveBenchShape{count, total, count, total * element_bytes};
  };
  op.run = [](Communicator& comm, CoreContext& ctx, const CollectiveBenchCall& call) {
    visit_data_type(call.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t dims[] = {static_cast<int64_t>(call.shape.send_elements)};
      comm.reduce_scatter<T>(ctx, send_span<T>(call, call.shape.send_elements),
                             recv_span<T>(call, call.shape.recv_elements), dims, call.reduce,
                             /*scatter_dimension=*/0, /*tiled=*/true);
    });
  };
  op.reference = [](int rank, int n, ReduceOp reduce, const CollectiveBenchShape& shape,
                    std::span<double> expected) {
    const uint64_t c = shape.recv_elements, first = static_cast<uint64_t>(rank) * c;
    for (uint64_t i = 0; i < c; ++i) expected[i] = fold_inputs(reduce, n, first + i);
  };
  return op;
}

// all_to_all (ncclAllToAll via send/recv, lax.all_to_all with split and concat axis 0): each core
// sends and receives n * count elements; rank r's output block q is block r of rank q's input.
// nccl-tests: count = (bytes / element) / n, size = n * count elements, factor (n-1)/n.
CollectiveBenchOp make_all_to_all_bench_op() {
  CollectiveBenchOp op;
  op.name = "all_to_all";
  op.algorithms = {std::string(algorithm_name(Algorithm::kPairwise))};
  op.busbw_factor = [](int n) { return (n - 1.0) / n; };
  op.shape = [](uint64_t bytes, uint64_t element_bytes, int n) {
    const uint64_t count = bytes / element_bytes / static_cast<uint64_t>(n);
    const uint64_t total = count * static_cast<uint64_t>(n);
    return CollectiveBenchShape{count, total, total, total * element_bytes};
  };
  op.run = [](Communicator& comm, CoreContext& ctx, const CollectiveBenchCall& call) {
    visit_data_type(call.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t dims[] = {static_cast<int64_t>(call.shape.send_elements)};
      comm.all_to_all<T>(ctx, send_span<T>(call, call.shape.send_elements),
                         recv_span<T>(call, call.shape.recv_elements), dims, /*split_axis=*/0,
                         /*concat_axis=*/0);
    });
  };
  op.reference = [](int rank, int n, ReduceOp reduce, const CollectiveBenchShape& shape,
                    std::span<double> expected) {
    const uint64_t c = shape.count, first = static_cast<uint64_t>(rank) * c;
    for (int q = 0; q < n; ++q)
      for (uint64_t i = 0; i < c; ++i)
        expected[static_cast<uint64_t>(q) * c + i] = bench_input_value(reduce, q, first + i);
  };
  return op;
}

// The root of the rooted ops (broadcast, reduce), as nccl-tests' default --root 0.
constexpr int kBenchRoot = 0;

// The memory traffic of the rooted ops: broadcast reads one input (the root's) and writes n
// outputs, reduce reads n inputs and writes one output (the root's); both (n + 1) * S.
double rooted_traffic_bytes(const CollectiveBenchShape& shape, uint64_t element_bytes, int n) {
  return (n + 1.0) * static_cast<double>(shape.count * element_bytes);
}

// broadcast (ncclBroadcast, root 0): count elements; every core's recv gets the root's send.
// nccl-tests: size = count * element bytes, factor 1.
CollectiveBenchOp make_broadcast_bench_op() {
  CollectiveBenchOp op;
  op.name = "broadcast";
  op.algorithms = {std::string(algorithm_name(Algorithm::kChain))};
  op.busbw_factor = [](int) { return 1.0; };
  op.shape = [](uint64_t bytes, uint64_t element_bytes, int) {
    const uint64_t count = bytes / element_bytes;
    return CollectiveBenchShape{count, count, count, count * element_bytes};
  };
  op.traffic_bytes = rooted_traffic_bytes;
  op.run = [](Communicator& comm, CoreContext& ctx, const CollectiveBenchCall& call) {
    visit_data_type(call.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const uint64_t n = call.shape.count;
      comm.broadcast<T>(ctx, send_span<T>(call, n), recv_span<T>(call, n), kBenchRoot);
    });
  };
  op.same_output_on_every_core = true;
  op.reference = [](int, int, ReduceOp reduce, const CollectiveBenchShape& shape,
                    std::span<double> expected) {
    for (uint64_t i = 0; i < shape.recv_elements; ++i)
      expected[i] = bench_input_value(reduce, kBenchRoot, i);
  };
  return op;
}

// reduce (ncclReduce, root 0): count elements in on every core; the root's recv gets the
// rank-order fold (the others' recv is not written and not checked). nccl-tests: size = count *
// element bytes, factor 1.
CollectiveBenchOp make_reduce_bench_op() {
  CollectiveBenchOp op;
  op.name = "reduce";
  op.uses_reduce_op = true;
  // In process the links have direct access, so reduce runs direct (chain on other transports).
  op.algorithms = {std::string(algorithm_name(Algorithm::kDirect))};
  op.busbw_factor = [](int) { return 1.0; };
  op.shape = [](uint64_t bytes, uint64_t element_bytes, int) {
    const uint64_t count = bytes / element_bytes;
    return CollectiveBenchShape{count, count, count, count * element_bytes};
  };
  op.traffic_bytes = rooted_traffic_bytes;
  op.run = [](Communicator& comm, CoreContext& ctx, const CollectiveBenchCall& call) {
    visit_data_type(call.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const uint64_t n = call.shape.count;
      comm.reduce<T>(ctx, send_span<T>(call, n), recv_span<T>(call, n), kBenchRoot, call.reduce);
    });
  };
  op.checked_rank = kBenchRoot;
  op.reference = [](int, int n, ReduceOp reduce, const CollectiveBenchShape& shape,
                    std::span<double> expected) {
    for (uint64_t i = 0; i < shape.recv_elements; ++i) expected[i] = fold_inputs(reduce, n, i);
  };
  return op;
}

// Counts the elements of `actual` (dtype T) that differ from `expected`.
template <typename T>
uint64_t count_wrong(const void* actual, std::span<const double> expected) {
  const T* a = static_cast<const T*>(actual);
  uint64_t wrong = 0;
  for (size_t i = 0; i < expected.size(); ++i) wrong += a[i] != static_cast<T>(expected[i]);
  return wrong;
}

}  // namespace

double bench_input_value(ReduceOp reduce, int rank, uint64_t i) {
  const uint64_t r = static_cast<uint64_t>(rank);
  if (reduce == ReduceOp::kProd) {
    // Factors of 2 only on the first kProdTwosRanks ranks, so |product| <= 2^6 for any N (with a 2
    // on every fifth rank, 256 cores made 2^51, which wraps in s32 and failed the check); the
    // other ranks contribute signs, so that every rank still changes the result.
    constexpr uint64_t kProdTwosRanks = 30;
    if (r < kProdTwosRanks) return (r * 3 + i) % 5 == 0 ? 2.0 : 1.0;
    return (r + i) % 5 == 0 ? -1.0 : 1.0;
  }
  return static_cast<double>(((r + 1) * 7 + i) % 13) - 6.0;  // -6..6
}

const std::vector<CollectiveBenchOp>& collective_bench_ops() {
  // Plug-in point: one make_<op>_bench_op() per collective Communicator offers.
  static const std::vector<CollectiveBenchOp> ops = {
      make_all_reduce_bench_op(), make_all_gather_bench_op(), make_reduce_scatter_bench_op(),
      make_all_to_all_bench_op(), make_broadcast_bench_op(),  make_reduce_bench_op()};
  return ops;
}

const CollectiveBenchOp* find_collective_bench_op(const std::string& name) {
  for (const CollectiveBenchOp& op : collective_bench_ops())
    if (op.name == name) return &op;
  return nullptr;
}

MemcpyBandwidth measure_memcpy_bandwidth(int threads, uint64_t bytes_per_thread, int passes) {
  MemcpyBandwidth result{threads, bytes_per_thread, 0.0};
  std::vector<std::vector<std::byte>> src(static_cast<size_t>(threads)),
      dst(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    src[static_cast<size_t>(t)].assign(bytes_per_thread, std::byte{1});  // touch every page
    dst[static_cast<size_t>(t)].assign(bytes_per_thread, std::byte{0});
  }
  for (int p = 0; p < passes; ++p) {
    const auto t0 = Clock::now();
    std::vector<std::thread> workers;
    for (int t = 1; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::memcpy(dst[static_cast<size_t>(t)].data(), src[static_cast<size_t>(t)].data(),
                    bytes_per_thread);
      });
    }
    std::memcpy(dst[0].data(), src[0].data(), bytes_per_thread);
    for (auto& w : workers) w.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    result.bytes_per_second = std::max(result.bytes_per_second,
                                       2.0 * static_cast<double>(bytes_per_thread) * threads / s);
  }
  return result;
}

namespace {

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

std::string check_options_for(const CollectiveBenchOptions& o, const CollectiveBenchOp* op) {
  if (o.algorithm != "auto" && std::find(op->algorithms.begin(), op->algorithms.end(),
                                         o.algorithm) == op->algorithms.end()) {
    std::string known = "auto";
    for (const auto& a : op->algorithms) known += ", " + a;
    return "--algorithm " + o.algorithm + " is not available for " + o.op +
           " (expected one of: " + known + ")";
  }
  if (o.link_slot_bytes % 64 != 0) {
    return "--link-slot-bytes " + std::to_string(o.link_slot_bytes) +
           " is not a multiple of 64 (every element type must divide a slot)";
  }
  if (o.min_bytes > o.max_bytes) {
    // Says "(the default)" because a user who set only --max-bytes never typed --min-bytes.
    return "--min-bytes " + std::to_string(o.min_bytes) +
           (o.min_bytes == CollectiveBenchOptions{}.min_bytes ? " (the default)" : "") +
           " is larger than --max-bytes " + std::to_string(o.max_bytes);
  }
  const uint64_t elem = data_type_bytes(o.dtype);
  // Sizes that give a core less than one element are skipped, a --min-bytes below one element
  // included (nccl-tests takes any -b); the sweep needs one size that does not.
  const CollectiveBenchShape largest = op->shape(o.max_bytes, elem, o.cores);
  if (largest.count == 0) {
    return "--max-bytes " + std::to_string(o.max_bytes) + " gives no " + o.op + " on " +
           count_text(o.cores, "core") + " a whole element of " +
           std::string(data_type_name(o.dtype)) + " per core (" + std::to_string(elem) +
           " bytes each)";
  }
  // Every core's send and recv buffers are written, so they must fit in the machine's memory
  // (--cores 1024 --max-bytes 64M asked for 128 GiB and would be killed by the OOM killer).
  const double buffer_bytes = static_cast<double>(o.cores) *
                              static_cast<double>(largest.send_elements + largest.recv_elements) *
                              static_cast<double>(elem);
  const double ram = physical_memory_bytes();
  if (ram > 0 && buffer_bytes > 0.75 * ram) {
    return "--max-bytes " + std::to_string(o.max_bytes) + " on " + count_text(o.cores, "core") +
           " needs " + format_bytes(static_cast<uint64_t>(buffer_bytes)) + " of " + o.op +
           " buffers (every core's send and recv), more than 3/4 of this machine's " +
           format_bytes(static_cast<uint64_t>(ram)) + " of memory";
  }
  return {};
}

const CollectiveBenchOp& checked_op(const CollectiveBenchOptions& o) {
  if (const std::string problem = check_collective_bench_options(o); !problem.empty())
    throw InvalidArgumentError(problem);
  return *find_collective_bench_op(o.op);
}

}  // namespace

std::string check_collective_bench_options(const CollectiveBenchOptions& o) {
  const CollectiveBenchOp* op = find_collective_bench_op(o.op);
  if (op == nullptr) {
    std::string known;
    for (const auto& k : collective_bench_ops()) known += (known.empty() ? "" : ", ") + k.name;
    return "--op " + o.op + " is not a benchmarked collective (expected one of: " + known + ")";
  }
  return check_options_for(o, op);
}

CollectiveBenchmark::CollectiveBenchmark(CollectiveBenchOptions options)
    : CollectiveBenchmark(options, checked_op(options)) {}

CollectiveBenchmark::CollectiveBenchmark(CollectiveBenchOptions options, CollectiveBenchOp op)
    : options_(std::move(options)), op_(std::move(op)) {
  options_.op = op_.name;
  if (const std::string problem = check_options_for(options_, &op_); !problem.empty())
    throw InvalidArgumentError(problem);
}

uint64_t default_link_slot_bytes(const std::vector<CollectiveBenchShape>& shapes,
                                 uint64_t element_bytes, int n) {
  uint64_t largest = 0;
  for (const auto& s : shapes)
    largest = std::max(largest, std::max(s.send_elements, s.recv_elements) * element_bytes);
  // No message of any algorithm exceeds n x the largest buffer (Bruck's last step moves < n
  // blocks), so smaller slots change nothing but the memory: links are committed lazily in 2 MiB
  // huge pages, and with 1 MiB slots a 64-byte sweep on 1024 cores (10 links per rank for
  // recursive doubling) committed 22 GiB.
  const uint64_t cap = (largest * static_cast<uint64_t>(n) + 63) / 64 * 64;
  return std::max<uint64_t>(64, std::min(RuntimeOptions{}.link_slot_bytes, cap));
}

std::vector<CollectiveBenchShape> CollectiveBenchmark::sweep_shapes() const {
  const uint64_t elem = data_type_bytes(options_.dtype);
  std::vector<CollectiveBenchShape> shapes;
  for (uint64_t bytes = options_.min_bytes;; bytes *= 2) {
    const CollectiveBenchShape shape = op_.shape(bytes, elem, options_.cores);
    if (shape.count > 0) shapes.push_back(shape);  // else less than an element per core: skip
    if (bytes > options_.max_bytes / 2) break;
  }
  return shapes;
}

uint64_t CollectiveBenchmark::link_slot_bytes() const {
  if (options_.link_slot_bytes) return options_.link_slot_bytes;
  return default_link_slot_bytes(sweep_shapes(), data_type_bytes(options_.dtype), options_.cores);
}

std::string CollectiveBenchmark::algorithm_for(const Communicator& comm,
                                               const CollectiveBenchShape& shape) const {
  if (comm.size() == 1) return std::string(algorithm_name(Algorithm::kLocal));
  if (options_.algorithm != "auto") return options_.algorithm;
  return op_.auto_algorithm ? op_.auto_algorithm(comm, shape) : op_.algorithms.front();
}

Runtime& CollectiveBenchmark::runtime() {
  if (!runtime_) {
    RuntimeOptions ro = options_.runtime;
    ro.num_cores = options_.cores;
    ro.link_slot_bytes = link_slot_bytes();
    if (options_.link_num_slots) ro.link_num_slots = options_.link_num_slots;
    ro.validate();
    runtime_ = options_.processes ? std::make_unique<Runtime>(ro, options_.processes)
                                  : std::make_unique<Runtime>(ro);
  }
  return *runtime_;
}

const ThreadPinning& CollectiveBenchmark::thread_pinning() { return runtime().thread_pinning(); }

const MemcpyBandwidth& CollectiveBenchmark::memcpy_bandwidth() {
  if (memcpy_.threads == 0) {
    ProcessGroup* processes = options_.processes.get();
    // Several processes share the CPUs: one measures while the others wait, or each would see a
    // fraction of the bandwidth.
    if (processes == nullptr || processes->process_index() == 0) {
      const int cpus = usable_cpus();
      memcpy_ = measure_memcpy_bandwidth(cpus, uint64_t{64} << 20);  // beyond the caches
    }
    if (processes != nullptr && processes->process_count() > 1) {
      memcpy_ = all_gather_values(*processes, std::span<const MemcpyBandwidth>(&memcpy_, 1))[0];
    }
  }
  return memcpy_;
}

void CollectiveBenchmark::run(const std::function<void(const CollectiveBenchRow&)>& on_row) {
  const MemcpyBandwidth bw = options_.measure_bound ? memcpy_bandwidth() : MemcpyBandwidth{};
  const int n = options_.cores;
  const uint64_t elem = data_type_bytes(options_.dtype);
  // Every size of the sweep, then buffers big enough for the largest.
  const std::vector<CollectiveBenchShape> shapes = sweep_shapes();
  uint64_t max_send = 0, max_recv = 0;
  for (const auto& s : shapes) {
    max_send = std::max(max_send, s.send_elements);
    max_recv = std::max(max_recv, s.recv_elements);
  }

  Runtime& runtime = this->runtime();
  std::vector<int> group(static_cast<size_t>(n));
  std::iota(group.begin(), group.end(), 0);
  Communicator comm(runtime, group);

  const size_t nc = static_cast<size_t>(n);
  std::vector<DeviceBuffer> send(nc), recv(nc);  // this process's cores' (empty for the others)
  std::vector<BufferPin> pins;
  runtime.run_spmd([&](CoreContext& ctx) {
    const size_t c = static_cast<size_t>(ctx.core_id());
    send[c] = ctx.allocate(std::max<uint64_t>(max_send, 1) * elem, "bench/send");
    recv[c] = ctx.allocate(std::max<uint64_t>(max_recv, 1) * elem, "bench/recv");
    // Inputs are the same for every size (a row uses a prefix), so fill them once.
    visit_data_type(options_.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* s = reinterpret_cast<T*>(send[c].data());
      for (uint64_t i = 0; i < max_send; ++i)
        s[i] = static_cast<T>(bench_input_value(options_.reduce, ctx.core_id(), i));
    });
  });
  // One untimed call of the first size, whatever --warmup says: it creates the links the
  // algorithm uses (first use) and touches their slots, which otherwise made the first row's
  // median 50-600x the second's with --warmup 1.
  {
    const CollectiveBenchCall first{
        options_.dtype, options_.reduce, algorithm_for(comm, shapes.front()),
        nullptr,        nullptr,         shapes.front()};
    runtime.run_spmd([&](CoreContext& ctx) {
      CollectiveBenchCall call = first;
      call.send = send[static_cast<size_t>(ctx.core_id())].data();
      call.recv = recv[static_cast<size_t>(ctx.core_id())].data();
      op_.run(comm, ctx, call);
    });
  }
  for (int c : runtime.local_core_ids()) {
    pins.push_back(send[static_cast<size_t>(c)].pin());
    pins.push_back(recv[static_cast<size_t>(c)].pin());
  }

  const size_t iters = static_cast<size_t>(options_.iters);
  std::vector<std::vector<double>> seconds(nc, std::vector<double>(iters));
  std::vector<double> expected;
  for (const CollectiveBenchShape& shape : shapes) {
    const std::string algorithm = algorithm_for(comm, shape);
    CollectiveBenchCall base{options_.dtype, options_.reduce, algorithm, nullptr, nullptr, shape};
    runtime.run_spmd([&](CoreContext& ctx) {
      const size_t c = static_cast<size_t>(ctx.core_id());
      CollectiveBenchCall call = base;
      call.send = send[c].data();
      call.recv = recv[c].data();
      std::memset(call.recv, 0, shape.recv_elements * elem);
      for (int w = 0; w < options_.warmup; ++w) op_.run(comm, ctx, call);
      for (size_t k = 0; k < iters; ++k) {
        const auto t0 = Clock::now();
        op_.run(comm, ctx, call);
        seconds[c][k] = std::chrono::duration<double>(Clock::now() - t0).count();
      }
    });
    // Each call's slowest core: this process's, then over the processes (process p's iters
    // values follow process p - 1's).
    std::vector<double> local_slowest(iters, 0.0);
    for (size_t k = 0; k < iters; ++k)
      for (int c : runtime.local_core_ids())
        local_slowest[k] = std::max(local_slowest[k], seconds[static_cast<size_t>(c)][k]);
    const std::vector<double> every =
        all_gather_values(runtime.process_group(), std::span<const double>(local_slowest));
    std::vector<double> slowest(iters, 0.0);
    CollectiveBenchRow row;
    for (size_t p = 0; p < every.size() / iters; ++p) {
      const auto first = every.begin() + static_cast<std::ptrdiff_t>(p * iters);
      for (size_t k = 0; k < iters; ++k) slowest[k] = std::max(slowest[k], first[k]);
      row.process_time_us.push_back(median_of(std::vector<double>(first, first + iters)) * 1e6);
    }
    row.shape = shape;
    row.algorithm = algorithm;
    const double t = median_of(slowest);
    row.time_us = t * 1e6;
    row.min_time_us = *std::min_element(slowest.begin(), slowest.end()) * 1e6;
    row.max_time_us = *std::max_element(slowest.begin(), slowest.end()) * 1e6;
    row.algbw_gbps = static_cast<double>(shape.bytes) / t * 1e-9;
    row.busbw_gbps = row.algbw_gbps * op_.busbw_factor(n);
    row.traffic_bytes =
        op_.traffic_bytes
            ? op_.traffic_bytes(shape, elem, n)
            : static_cast<double>(n) *
                  static_cast<double>((shape.send_elements + shape.recv_elements) * elem);
    row.dram_bound_us =
        bw.bytes_per_second > 0 ? row.traffic_bytes / bw.bytes_per_second * 1e6 : 0.0;

    expected.resize(shape.recv_elements);
    bool have_reference = false;
    uint64_t wrong = 0;  // this process's cores'; rank r is core r (the group is 0..n-1)
    for (int r : runtime.local_core_ids()) {
      if (op_.checked_rank >= 0 && r != op_.checked_rank) continue;
      if (!have_reference || op_.checked_rank >= 0 || !op_.same_output_on_every_core)
        op_.reference(r, n, options_.reduce, shape, expected);
      have_reference = true;
      wrong += visit_data_type(options_.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return count_wrong<T>(recv[static_cast<size_t>(r)].data(), expected);
      });
    }
    for (uint64_t w :
         all_gather_values(runtime.process_group(), std::span<const uint64_t>(&wrong, 1)))
      row.wrong += w;
    on_row(row);
  }
}

nlohmann::json collective_bench_row_json(const CollectiveBenchmark& bench,
                                         const CollectiveBenchRow& row) {
  const CollectiveBenchOptions& o = bench.options();
  return {{"bytes", row.shape.bytes},
          {"count", row.shape.count},
          {"dtype", data_type_name(o.dtype)},
          {"op", o.op},
          {"reduce", bench.op().uses_reduce_op ? std::string(reduce_op_name(o.reduce)) : "none"},
          {"algorithm", row.algorithm},
          {"cores", o.cores},
          {"time_us", row.time_us},
          {"min_time_us", row.min_time_us},
          {"max_time_us", row.max_time_us},
          {"algbw_GBps", row.algbw_gbps},
          {"busbw_GBps", row.busbw_gbps},
          {"busbw_factor", bench.busbw_factor()},
          {"traffic_bytes", row.traffic_bytes},
          {"dram_bound_us", row.dram_bound_us},
          {"time_over_dram_bound", row.dram_bound_us > 0
                                       ? nlohmann::json(row.time_us / row.dram_bound_us)
                                       : nlohmann::json(nullptr)},
          {"wrong", row.wrong},
          {"check", row.wrong == 0 ? "ok" : "WRONG"},
          {"process_time_us", row.process_time_us}};
}

}  // namespace vtpu
