// Tests for common/element_type.h: XLA names, byte sizes and parsing.
#include "common/element_type.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace vtpu {
namespace {

TEST(ElementTypeTest, SizesFollowXla) {
  EXPECT_EQ(element_size_bytes(ElementType::kPred), 1u);
  EXPECT_EQ(element_size_bytes(ElementType::kS8), 1u);
  EXPECT_EQ(element_size_bytes(ElementType::kU8), 1u);
  EXPECT_EQ(element_size_bytes(ElementType::kS16), 2u);
  EXPECT_EQ(element_size_bytes(ElementType::kU16), 2u);
  EXPECT_EQ(element_size_bytes(ElementType::kF16), 2u);
  EXPECT_EQ(element_size_bytes(ElementType::kBf16), 2u);
  EXPECT_EQ(element_size_bytes(ElementType::kS32), 4u);
  EXPECT_EQ(element_size_bytes(ElementType::kU32), 4u);
  EXPECT_EQ(element_size_bytes(ElementType::kF32), 4u);
  EXPECT_EQ(element_size_bytes(ElementType::kS64), 8u);
  EXPECT_EQ(element_size_bytes(ElementType::kU64), 8u);
  EXPECT_EQ(element_size_bytes(ElementType::kF64), 8u);
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
