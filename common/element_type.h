// Array element types with XLA's primitive-type names (xla_data.proto's PrimitiveType, printed in
// lower case as in HLO text: "f32", "bf16", "s8", "pred").
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace vtpu {

/// An array element type. The names follow XLA's PrimitiveType (PRED, S8, ..., F64).
enum class ElementType {
  kPred,  // boolean, 1 byte (XLA's ByteSizeOfPrimitiveType(PRED))
  kS8,
  kU8,
  kS16,
  kU16,
  kF16,
  kBf16,
  kS32,
  kU32,
  kF32,
  kS64,
  kU64,
  kF64,
};

/// Every element type, in declaration order (pred first, f64 last).
std::span<const ElementType> all_element_types();

/// Size in bytes of one element: 1 for pred, s8, u8; 2 for s16, u16, f16, bf16; 4 for s32, u32,
/// f32; 8 for s64, u64, f64 (as XLA's ShapeUtil::ByteSizeOfPrimitiveType).
uint64_t element_size_bytes(ElementType type);

/// XLA's lower-case name: "pred", "s8", ..., "bf16", "f32", "f64".
std::string_view element_type_name(ElementType type);

/// Parses an XLA name ("bf16"; case-insensitive, so "BF16" too). Throws InvalidArgumentError
/// naming the text and listing the valid names.
ElementType parse_element_type(std::string_view name);

}  // namespace vtpu
