// Tests for common/element_type.h: XLA names, byte sizes and parsing.
#include "vtpu/common/element_type.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "vtpu/common/error.h"

namespace vtpu {
namespace {

TEST(ElementTypeTest, SizesFollowXla) {
  const struct {
    ElementType type;
    uint64_t bytes;
  } want[] = {{ElementType::kPred, 1}, {ElementType::kS8, 1},  {ElementType::kU8, 1},
              {ElementType::kS16, 2},  {ElementType::kU16, 2}, {ElementType::kF16, 2},
              {ElementType::kBf16, 2}, {ElementType::kS32, 4}, {ElementType::kU32, 4},
              {ElementType::kF32, 4},  {ElementType::kS64, 8}, {ElementType::kU64, 8},
              {ElementType::kF64, 8}};
  for (const auto& w : want) {
    EXPECT_EQ(element_size_bytes(w.type), w.bytes) << element_type_name(w.type);
  }
}

TEST(ElementTypeTest, NamesAreXlaLowerCase) {
  EXPECT_EQ(element_type_name(ElementType::kPred), "pred");
  EXPECT_EQ(element_type_name(ElementType::kBf16), "bf16");
  EXPECT_EQ(element_type_name(ElementType::kF32), "f32");
  EXPECT_EQ(element_type_name(ElementType::kU64), "u64");
  EXPECT_EQ(all_element_types().size(), 13u);
  EXPECT_EQ(all_element_types().front(), ElementType::kPred);
  EXPECT_EQ(all_element_types().back(), ElementType::kF64);
}

TEST(ElementTypeTest, ParseRoundTripsEveryName) {
  for (ElementType t : all_element_types()) {
    EXPECT_EQ(parse_element_type(element_type_name(t)), t) << element_type_name(t);
  }
  EXPECT_EQ(parse_element_type("BF16"), ElementType::kBf16);
  EXPECT_EQ(parse_element_type("F32"), ElementType::kF32);
}

TEST(ElementTypeTest, ParseRejectsUnknownNamesListingValidOnes) {
  for (const char* bad : {"", "float32", "bfloat16", "f32 ", "i32"}) {
    try {
      parse_element_type(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgumentError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("'" + std::string(bad) + "'"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("pred, s8, u8, s16, u16, f16, bf16, s32, u32, "
                                                 "f32, s64, u64, f64"));
    }
  }
}

TEST(ElementTypeTest, OutOfRangeValueThrows) {
  EXPECT_THROW(element_size_bytes(static_cast<ElementType>(99)), InvalidArgumentError);
}

}  // namespace
}  // namespace vtpu
