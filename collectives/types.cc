#include "vtpu/collectives/types.h"

#include <sstream>

#include "vtpu/common/error.h"

namespace vtpu {

namespace {
constexpr std::array<std::pair<Algorithm, std::string_view>, 12> kAlgorithmNames = {{
    {Algorithm::kAuto, "auto"},
    {Algorithm::kRing, "ring"},
    {Algorithm::kBidirectionalRing, "bidirectional_ring"},
    {Algorithm::kRecursiveDoubling, "recursive_doubling"},
    {Algorithm::kTorus2d, "torus_2d"},
    {Algorithm::kRingReduceScatter, "ring_reduce_scatter"},
    {Algorithm::kDirect, "direct"},
    {Algorithm::kHierarchical, "hierarchical"},
    {Algorithm::kPairwise, "pairwise"},
    {Algorithm::kChain, "chain"},
    {Algorithm::kDissemination, "dissemination"},
    {Algorithm::kLocal, "local"},
}};
}  // namespace

bool is_collective_data_type(DataType t) {
  return t == ElementType::kF32 || t == ElementType::kF64 || t == ElementType::kBf16 ||
         t == ElementType::kF16 || t == ElementType::kS32 || t == ElementType::kS64;
}

void throw_unsupported_data_type(DataType t) {
  const auto i = static_cast<size_t>(t);
  std::string name = i < all_element_types().size() ? std::string(element_type_name(t))
                                                    : "value " + std::to_string(i);
  throw InvalidArgumentError("collectives do not support element type " + name +
                             " (expected f32, f64, bf16, f16, s32 or s64)");
}

std::string_view data_type_name(DataType t) {
  if (static_cast<size_t>(t) >= all_element_types().size()) return "?";
  return element_type_name(t);
}

uint64_t data_type_bytes(DataType t) {
  if (!is_collective_data_type(t)) throw_unsupported_data_type(t);
  return element_size_bytes(t);
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kProd:
      return "prod";
  }
  return "?";
}

std::string_view collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kCollectivePermute:
      return "collective_permute";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kReduce:
      return "reduce";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "?";
}

std::string_view algorithm_name(Algorithm a) {
  for (const auto& [alg, name] : kAlgorithmNames)
    if (alg == a) return name;
  return "?";
}

Algorithm parse_algorithm(std::string_view name) {
  std::string valid;
  for (const auto& [alg, n] : kAlgorithmNames) {
    if (n == name) return alg;
    if (!valid.empty()) valid += ", ";
    valid += n;
  }
  throw InvalidArgumentError("unknown collective algorithm '" + std::string(name) +
                             "' (expected one of: " + valid + ")");
}

Shape Shape::of(std::span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(kMaxDims)) {
    throw InvalidArgumentError("shape has " + std::to_string(dims.size()) +
                               " dimensions (expected at most " + std::to_string(kMaxDims) + ")");
  }
  Shape s;
  s.num_dims = static_cast<int32_t>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      throw InvalidArgumentError("shape dimension " + std::to_string(i) + " is " +
                                 std::to_string(dims[i]) + " (expected >= 0)");
    }
    s.dims[i] = dims[i];
  }
  // Bound the element count so that elements x element bytes x group size never wraps (an
  // overflowed count could match an empty buffer and pass the size checks).
  bool has_zero = false;
  for (int64_t d : dims) has_zero |= d == 0;
  if (!has_zero) {
    uint64_t n = 1;
    for (int64_t d : dims) {
      if (static_cast<uint64_t>(d) > kMaxElements / n) {
        throw InvalidArgumentError("shape " + s.to_string() + " has more than 2^48 elements");
      }
      n *= static_cast<uint64_t>(d);
    }
  }
  return s;
}

uint64_t Shape::num_elements() const {
  uint64_t n = 1;
  for (int i = 0; i < num_dims; ++i) n *= static_cast<uint64_t>(dims[static_cast<size_t>(i)]);
  return n;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < num_dims; ++i) {
    if (i) s += ',';
    s += std::to_string(dims[static_cast<size_t>(i)]);
  }
  return s + "]";
}

void Fingerprint::set_shape(const Shape& s) {
  num_dims = s.num_dims;
  dims = s.dims;
  num_elements = s.num_elements();
}

Shape Fingerprint::shape() const {
  Shape s;
  s.num_dims = num_dims;
  s.dims = dims;
  // A fingerprint built with only num_elements set (1-D default) shows that count.
  if (num_dims == 1 && dims[0] == 0 && num_elements != 0)
    s.dims[0] = static_cast<int64_t>(num_elements);
  return s;
}

std::string Fingerprint::to_string() const {
  std::ostringstream os;
  os << collective_name(kind);
  switch (kind) {
    case CollectiveKind::kAllReduce:
      os << '(' << reduce_op_name(reduce_op) << ')';
      break;
    case CollectiveKind::kAllGather:
      os << "(axis=" << axis << (tiled ? ", tiled" : ", stacked") << ')';
      break;
    case CollectiveKind::kReduceScatter:
      os << '(' << reduce_op_name(reduce_op) << ", scatter_dimension=" << axis
         << (tiled ? ", tiled" : "") << ')';
      break;
    case CollectiveKind::kAllToAll:
      os << "(split_axis=" << axis << ", concat_axis=" << concat_axis << ')';
      break;
    case CollectiveKind::kCollectivePermute:
      os << "(pairs#" << std::hex << pairs_hash << std::dec << ')';
      break;
    case CollectiveKind::kBroadcast:
      os << "(root=" << root << ')';
      break;
    case CollectiveKind::kReduce:
      os << '(' << reduce_op_name(reduce_op) << ", root=" << root << ')';
      break;
    case CollectiveKind::kBarrier:
      break;
  }
  if (kind != CollectiveKind::kBarrier) os << ' ' << data_type_name(dtype) << shape().to_string();
  os << " at sequence " << sequence;
  if (algorithm != Algorithm::kAuto) os << " via " << algorithm_name(algorithm);
  return os.str();
}

}  // namespace vtpu
