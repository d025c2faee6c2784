#include "collectives/types.h"

#include <sstream>

namespace vtpu {

std::string_view data_type_name(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "f32";
    case DataType::kF64:
      return "f64";
    case DataType::kS32:
      return "s32";
    case DataType::kS64:
      return "s64";
  }
  return "?";
}

uint64_t data_type_bytes(DataType t) {
  switch (t) {
    case DataType::kF32:
      return 4;
    case DataType::kF64:
      return 8;
    case DataType::kS32:
      return 4;
    case DataType::kS64:
      return 8;
  }
  return 0;
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
  }
  return "?";
}

std::string Fingerprint::to_string() const {
  std::ostringstream os;
  os << collective_name(kind);
  if (kind == CollectiveKind::kAllReduce) os << '(' << reduce_op_name(reduce_op) << ')';
  os << ' ' << data_type_name(dtype) << '[' << num_elements << "] at sequence " << sequence;
  return os.str();
}

}  // namespace vtpu
