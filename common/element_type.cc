#include "vtpu/common/element_type.h"

#include <array>
#include <cctype>
#include <string>

#include "vtpu/common/error.h"

namespace vtpu {

namespace {

struct TypeInfo {
  ElementType type;
  std::string_view name;
  uint64_t size_bytes;
};

constexpr std::array<TypeInfo, 13> kTypes = {{
    {ElementType::kPred, "pred", 1},
    {ElementType::kS8, "s8", 1},
    {ElementType::kU8, "u8", 1},
    {ElementType::kS16, "s16", 2},
    {ElementType::kU16, "u16", 2},
    {ElementType::kF16, "f16", 2},
    {ElementType::kBf16, "bf16", 2},
    {ElementType::kS32, "s32", 4},
    {ElementType::kU32, "u32", 4},
    {ElementType::kF32, "f32", 4},
    {ElementType::kS64, "s64", 8},
    {ElementType::kU64, "u64", 8},
    {ElementType::kF64, "f64", 8},
}};

// kTypes is indexed by the enum's value.
static_assert([] {
  for (size_t i = 0; i < kTypes.size(); ++i) {
    if (static_cast<size_t>(kTypes[i].type) != i) return false;
  }
  return true;
}());

constexpr std::array<ElementType, kTypes.size()> kAllTypes = [] {
  std::array<ElementType, kTypes.size()> out{};
  for (size_t i = 0; i < kTypes.size(); ++i) out[i] = kTypes[i].type;
  return out;
}();

const TypeInfo& info(ElementType type) {
  const auto i = static_cast<size_t>(type);
  if (i >= kTypes.size()) {
    throw InvalidArgumentError("element type value " + std::to_string(i) +
                               " is not an ElementType (expected 0.." +
                               std::to_string(kTypes.size() - 1) + ")");
  }
  return kTypes[i];
}

}  // namespace

std::span<const ElementType> all_element_types() { return kAllTypes; }

uint64_t element_size_bytes(ElementType type) { return info(type).size_bytes; }

std::string_view element_type_name(ElementType type) { return info(type).name; }

ElementType parse_element_type(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string valid;
  for (const TypeInfo& t : kTypes) {
    if (lower == t.name) return t.type;
    if (!valid.empty()) valid += ", ";
    valid += t.name;
  }
  throw InvalidArgumentError("unknown element type '" + std::string(name) +
                             "' (expected one of: " + valid + ")");
}

}  // namespace vtpu
