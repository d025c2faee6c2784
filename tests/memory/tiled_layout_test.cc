// Tests for memory/tiled_layout.h: XLA notation, the TPU default layouts and padded bytes, against
// sizes worked out by hand from XLA's docs/tiled_layout.md.
#include "vtpu/memory/tiled_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/sharding/expect_invalid.h"
#include "vtpu/common/error.h"

namespace vtpu {
namespace {

using testing::expect_invalid;
using Dims = std::vector<int64_t>;

constexpr ElementType kF32 = ElementType::kF32;
constexpr ElementType kBf16 = ElementType::kBf16;
constexpr ElementType kS8 = ElementType::kS8;

// Expects the logical and padded bytes of `dims` under the TPU default layout.
void expect_default_bytes(ElementType type, const Dims& dims, uint64_t logical, uint64_t padded) {
  const ArrayBytes b = array_bytes(type, dims);
  const std::string shape =
      shape_to_string(type, dims, tpu_default_layout(type, static_cast<int64_t>(dims.size())));
  EXPECT_EQ(b.logical_bytes, logical) << shape;
  EXPECT_EQ(b.padded_bytes, padded) << shape;
}

TEST(TiledLayoutTest, DefaultLayoutsPerElementType) {
  EXPECT_EQ(tpu_default_layout(kF32, 2).to_string(), "{1,0:T(8,128)}");
  EXPECT_EQ(tpu_default_layout(ElementType::kS32, 2).to_string(), "{1,0:T(8,128)}");
  EXPECT_EQ(tpu_default_layout(ElementType::kU32, 3).to_string(), "{2,1,0:T(8,128)}");
  for (ElementType t : {kBf16, ElementType::kF16, ElementType::kS16, ElementType::kU16}) {
    EXPECT_EQ(tpu_default_layout(t, 2).to_string(), "{1,0:T(8,128)(2,1)}");
  }
  for (ElementType t : {kS8, ElementType::kU8, ElementType::kPred}) {
    EXPECT_EQ(tpu_default_layout(t, 4).to_string(), "{3,2,1,0:T(8,128)(4,1)}");
  }
  for (ElementType t : {ElementType::kS64, ElementType::kU64, ElementType::kF64}) {
    EXPECT_EQ(tpu_default_layout(t, 2).to_string(), "{1,0:T(8,128)}");
  }
  // Vectors as XLA TPU's HLO lays them out: f32[1024]{0:T(1024)}, bf16[6144]{0:T(1024)(128)(2,1)}.
  EXPECT_EQ(tpu_default_layout(kF32, 1).to_string(), "{0:T(1024)}");
  EXPECT_EQ(tpu_default_layout(ElementType::kS64, 1).to_string(), "{0:T(1024)}");
  EXPECT_EQ(tpu_default_layout(kBf16, 1).to_string(), "{0:T(1024)(128)(2,1)}");
  EXPECT_EQ(tpu_default_layout(kS8, 1).to_string(), "{0:T(1024)(128)(4,1)}");
  EXPECT_EQ(tpu_default_layout(kF32, 0).to_string(), "{}");  // scalars are untiled
  expect_invalid([] { tpu_default_layout(kF32, -1); }, {"rank -1"});
}

TEST(TiledLayoutTest, F32Rank4MinorDimensionOf2Pads64x) {
  // Physical (256,512,128,2): T(8,128) covers (128,2) -> 16 x 1 tiles of 8x128, so each
  // (128,2) block of 256 elements takes 16 * 1024 = 16384: 64x.
  const Dims dims = {256, 512, 128, 2};
  const ArrayBytes b = array_bytes(kF32, dims);
  EXPECT_EQ(b.logical_bytes, 134'217'728u);
  EXPECT_EQ(b.padded_bytes, 8'589'934'592u);
  EXPECT_DOUBLE_EQ(b.expansion, 64.0);
  EXPECT_EQ(tiled_physical_dimensions(dims, tpu_default_layout(kF32, 4)),
            (std::vector<uint64_t>{256, 512, 16, 1, 8, 128}));
}

TEST(TiledLayoutTest, F32ColumnVectorPads128x) {
  // (1024,1): 128 row tiles x 1 column tile of 8x128 = 131072 elements.
  const ArrayBytes b = array_bytes(kF32, Dims{1024, 1});
  EXPECT_EQ(b.logical_bytes, 4096u);
  EXPECT_EQ(b.padded_bytes, 524'288u);
  EXPECT_DOUBLE_EQ(b.expansion, 128.0);
}

TEST(TiledLayoutTest, NonDefaultMinorToMajor) {
  // f32[1024,1]{0,1}: dimension 0 (1024) is most minor, so the physical shape is (1,1024) and
  // T(8,128) pads only the 1 to 8: (1,8,8,128) = 8192 elements = 32768 bytes, 8x.
  const Layout layout = parse_layout("{0,1:T(8,128)}");
  const ArrayBytes b = array_bytes(kF32, Dims{1024, 1}, layout);
  EXPECT_EQ(b.logical_bytes, 4096u);
  EXPECT_EQ(b.padded_bytes, 32'768u);
  EXPECT_DOUBLE_EQ(b.expansion, 8.0);
  EXPECT_EQ(tiled_physical_dimensions(Dims{1024, 1}, layout),
            (std::vector<uint64_t>{1, 8, 8, 128}));
  // f32[2,3,5]{0,2,1}: physical order (d1, d2, d0) = (3,5,2); (5,2) pads to (8,128):
  // 3 * 1024 elements = 12288 bytes for 120 logical.
  EXPECT_EQ(padded_bytes(kF32, Dims{2, 3, 5}, parse_layout("{0,2,1:T(8,128)}")), 12'288u);
  EXPECT_EQ(logical_bytes(kF32, Dims{2, 3, 5}), 120u);
}

TEST(TiledLayoutTest, Bf16PacksRowPairsWithoutExtraPadding) {
  // (8,128)(2,1): the second tile splits the 8x128 tile into (4,128,2,1), no padding.
  EXPECT_EQ(tiled_physical_dimensions(Dims{8, 128}, tpu_default_layout(kBf16, 2)),
            (std::vector<uint64_t>{1, 1, 4, 128, 2, 1}));
  expect_default_bytes(kBf16, {8, 128}, 2048, 2048);
  expect_default_bytes(kBf16, {512, 1024}, 1'048'576, 1'048'576);
  // bf16[9,130]: 2 x 2 tiles of 1024 elements, 2 bytes each.
  expect_default_bytes(kBf16, {9, 130}, 2340, 8192);
  // bf16[3,5]: one tile.
  expect_default_bytes(kBf16, {3, 5}, 30, 2048);
}

TEST(TiledLayoutTest, S8AndPredPackFourRows) {
  EXPECT_EQ(tiled_physical_dimensions(Dims{3, 5}, tpu_default_layout(kS8, 2)),
            (std::vector<uint64_t>{1, 1, 2, 128, 4, 1}));
  expect_default_bytes(kS8, {3, 5}, 15, 1024);
  expect_default_bytes(kS8, {32, 256}, 8192, 8192);
  // s8[33,100]: 5 row tiles x 1 column tile of 1024 one-byte elements.
  expect_default_bytes(kS8, {33, 100}, 3300, 5120);
  expect_default_bytes(ElementType::kPred, {3, 5}, 15, 1024);
}

TEST(TiledLayoutTest, SixtyFourBitTypesUseEightByteElements) {
  expect_default_bytes(ElementType::kS64, {8, 128}, 8192, 8192);
  expect_default_bytes(ElementType::kU64, {8, 129}, 8256, 16384);
  expect_default_bytes(ElementType::kF64, {3, 5}, 120, 8192);
}

TEST(TiledLayoutTest, RankZeroAndRankOne) {
  // A scalar is untiled by default: 4 bytes.
  ArrayBytes b = array_bytes(kF32, Dims{});
  EXPECT_EQ(b.logical_bytes, 4u);
  EXPECT_EQ(b.padded_bytes, 4u);
  // With a tile, the scalar counts as (1,1) and fills one 8x128 tile.
  EXPECT_EQ(padded_bytes(kF32, Dims{}, parse_layout("{:T(8,128)}")), 4096u);
  // Rank 1 under the default T(1024): [1000] -> (1, 1024) = 1024 elements.
  b = array_bytes(kF32, Dims{1000});
  EXPECT_EQ(b.logical_bytes, 4000u);
  EXPECT_EQ(b.padded_bytes, 4096u);
  EXPECT_EQ(tiled_physical_dimensions(Dims{1000}, tpu_default_layout(kF32, 1)),
            (std::vector<uint64_t>{1, 1024}));
  // bf16[3000]: T(1024) -> (3, 1024), (128) -> (3, 8, 128), (2,1) -> (3, 4, 128, 2, 1): no more
  // padding, 3072 elements of 2 bytes.
  EXPECT_EQ(tiled_physical_dimensions(Dims{3000}, tpu_default_layout(kBf16, 1)),
            (std::vector<uint64_t>{3, 4, 128, 2, 1}));
  EXPECT_EQ(array_bytes(kBf16, Dims{3000}).padded_bytes, 6144u);
  // The 2-D tile on a vector counts it as [1, n]: (1,8,8,128) = 8192 elements.
  EXPECT_EQ(padded_bytes(kF32, Dims{1000}, parse_layout("{0:T(8,128)}")), 32'768u);
  // A 1-D tile as XLA TPU uses for vectors: [1000]{0:T(1024)} -> 1024 elements.
  EXPECT_EQ(padded_bytes(kF32, Dims{1000}, parse_layout("{0:T(1024)}")), 4096u);
  EXPECT_EQ(padded_bytes(kF32, Dims{128}, parse_layout("{0:T(256)}")), 1024u);
  // Untiled layouts take exactly the logical bytes.
  EXPECT_EQ(padded_bytes(kF32, Dims{3, 5}, parse_layout("{1,0}")), 60u);
}

TEST(TiledLayoutTest, ExamplesFromXlaTiledLayoutDoc) {
  // Figure 1: f32[3,5]{1,0:T(2,2)} -> tile bounds (2,3), tile (2,2).
  EXPECT_EQ(tiled_physical_dimensions(Dims{3, 5}, parse_layout("{1,0:T(2,2)}")),
            (std::vector<uint64_t>{2, 3, 2, 2}));
  EXPECT_EQ(padded_bytes(kF32, Dims{3, 5}, parse_layout("{1,0:T(2,2)}")), 96u);
  // Figure 2: 4x8 by (2,4)(2,1), no padding.
  EXPECT_EQ(tiled_physical_dimensions(Dims{4, 8}, parse_layout("{1,0:T(2,4)(2,1)}")),
            (std::vector<uint64_t>{2, 2, 1, 4, 2, 1}));
  // Alternative 16-bit packing: bf16[32,256]{1,0:T(8,128)(2,1,1,1)} -> (2,2,8,128,2,1,1,1).
  const Layout pairs = parse_layout("{1,0:T(8,128)(2,1,1,1)}");
  EXPECT_EQ(tiled_physical_dimensions(Dims{32, 256}, pairs),
            (std::vector<uint64_t>{2, 2, 8, 128, 2, 1, 1, 1}));
  EXPECT_EQ(padded_bytes(kBf16, Dims{32, 256}, pairs), 16'384u);
  // A later tile that pads: bf16[8,256] has one row of tiles, and (2,1,1,1) pairs rows of tiles,
  // so the tile count pads from 1 to 2: 8192 bytes for 4096 logical. (XLA's ArraySize, which
  // rounds by the first tile only, would say 4096.)
  EXPECT_EQ(padded_bytes(kBf16, Dims{8, 256}, pairs), 8192u);
  EXPECT_EQ(logical_bytes(kBf16, Dims{8, 256}), 4096u);
}

TEST(TiledLayoutTest, EmptyArraysTakeNoBytes) {
  const ArrayBytes b = array_bytes(kF32, Dims{0, 128});
  EXPECT_EQ(b.logical_bytes, 0u);
  EXPECT_EQ(b.padded_bytes, 0u);
  EXPECT_DOUBLE_EQ(b.expansion, 1.0);
  // A zero dimension wins over dimensions whose product alone would overflow.
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(logical_bytes(kF32, Dims{big, big, 0}), 0u);
  EXPECT_EQ(padded_bytes(kF32, Dims{big, big, 0}, tpu_default_layout(kF32, 3)), 0u);
}

TEST(TiledLayoutTest, OverflowPast64BitsNamesTheShape) {
  const int64_t two32 = int64_t{1} << 32;
  expect_invalid(
      [&] {
        logical_bytes(kF32, Dims{two32, two32});
      },
      {"f32[4294967296,4294967296]", "overflows 2^64"});
  // Logical 2^60 bytes fits; padding the minor 1 to 128 needs 2^67.
  const Dims dims = {int64_t{1} << 40, int64_t{1} << 20, 1};
  EXPECT_EQ(logical_bytes(kS8, dims), uint64_t{1} << 60);
  expect_invalid([&] { array_bytes(kS8, dims); },
                 {"s8[1099511627776,1048576,1]{2,1,0:T(8,128)(4,1)}", "overflows 2^64"});
  // Exactly 2^64 - 1 elements of one byte is fine, 2^64 is not.
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(logical_bytes(kS8, Dims{max}), static_cast<uint64_t>(max));
  expect_invalid([&] { logical_bytes(kS8, Dims{max, 2, 2}); }, {"overflows 2^64"});
}

TEST(TiledLayoutTest, RejectsNegativeDimensionsNamingThem) {
  expect_invalid([] { logical_bytes(kF32, Dims{3, -5}); }, {"dimension 1", "f32[3,-5]", "-5"});
  expect_invalid([] { array_bytes(kF32, Dims{-1, 5}); }, {"dimension 0", "-1"});
}

TEST(TiledLayoutTest, RejectsLayoutsThatDoNotFitTheShape) {
  Layout repeat{{1, 1}, {}};
  expect_invalid(
      [&] {
        padded_bytes(kF32, Dims{3, 5}, repeat);
      },
      {"{1,1}", "not a permutation", "dimension 1 repeats"});
  Layout out_of_range{{0, 2}, {}};
  expect_invalid(
      [&] {
        padded_bytes(kF32, Dims{3, 5}, out_of_range);
      },
      {"{0,2}", "dimension 2 is out of range"});
  Layout negative{{-3, 0}, {}};
  expect_invalid([&] { padded_bytes(kF32, Dims{3, 5}, negative); }, {"dimension -3"});
  expect_invalid(
      [&] {
        padded_bytes(kF32, Dims{3, 5}, Layout{{0}, {}});
      },
      {"1 minor_to_major entries for a rank-2 shape"});
  Layout zero_tile{{1, 0}, {Tile{{8, 0}}}};
  expect_invalid(
      [&] {
        padded_bytes(kF32, Dims{3, 5}, zero_tile);
      },
      {"tile (8,0)", "dimension 0", "expected >= 1"});
  Layout empty_tile{{1, 0}, {Tile{}}};
  expect_invalid([&] { padded_bytes(kF32, Dims{3, 5}, empty_tile); }, {"no dimensions"});
}

TEST(TiledLayoutTest, ParserRoundTrips) {
  for (ElementType t : all_element_types()) {
    for (int64_t rank = 0; rank <= 5; ++rank) {
      const Layout layout = tpu_default_layout(t, rank);
      EXPECT_EQ(parse_layout(layout.to_string()), layout) << layout.to_string();
    }
  }
  for (const char* text : {"{1,0:T(8,128)(2,1)}", "{0,1}", "{}", "{:T(8,128)}", "{2,0,1:T(4)}",
                           "{1,0:T(8,128)(2,1,1,1)}"}) {
    EXPECT_EQ(parse_layout(text).to_string(), text);
  }
  EXPECT_EQ(parse_layout(" { 1 , 0 : T( 8,128 ) (2, 1) } "), parse_layout("{1,0:T(8,128)(2,1)}"));
  const Layout parsed = parse_layout("{1,0:T(8,128)(2,1)}");
  EXPECT_EQ(parsed.minor_to_major, (std::vector<int64_t>{1, 0}));
  ASSERT_EQ(parsed.tiles.size(), 2u);
  EXPECT_EQ(parsed.tiles[0].dimensions, (std::vector<int64_t>{8, 128}));
  EXPECT_EQ(parsed.tiles[1].dimensions, (std::vector<int64_t>{2, 1}));
}

TEST(TiledLayoutTest, ParserRejectsBadText) {
  expect_invalid([] { parse_layout("1,0}"); }, {"'1,0}'", "position 0", "expected '{'"});
  expect_invalid([] { parse_layout("{1,0"); }, {"expected '}'"});
  expect_invalid([] { parse_layout("{1,0}x"); }, {"unexpected text after '}'"});
  expect_invalid([] { parse_layout("{1,0:T(8,*)}"); }, {"combined dimension"});
  expect_invalid([] { parse_layout("{1,0:T(8,-1)}"); }, {"combined dimension"});
  expect_invalid([] { parse_layout("{1,0:T(8,0)}"); }, {"tile (8,0)", "dimension 0"});
  expect_invalid([] { parse_layout("{1,0:T(8,-2)}"); }, {"dimension -2"});
  expect_invalid([] { parse_layout("{1,1}"); }, {"not a permutation"});
  expect_invalid([] { parse_layout("{1,0:S(1)}"); }, {"unsupported layout attribute 'S'"});
  expect_invalid([] { parse_layout("{1,0:T}"); }, {"expected '(' after 'T'"});
  expect_invalid([] { parse_layout("{1,0:T()}"); }, {"expected a tile dimension"});
  expect_invalid([] { parse_layout("{1,0:T(8,128"); }, {"expected ')'"});
  expect_invalid([] { parse_layout("{99999999999999999999}"); }, {"does not fit int64"});
  expect_invalid([] { parse_layout(""); }, {"expected '{'"});
  expect_invalid([] { parse_layout("{1,,0}"); }, {"expected a minor_to_major entry"});
}

TEST(TiledLayoutTest, ShapeToString) {
  EXPECT_EQ(shape_to_string(kBf16, Dims{9, 130}, tpu_default_layout(kBf16, 2)),
            "bf16[9,130]{1,0:T(8,128)(2,1)}");
  EXPECT_EQ(shape_to_string(kF32, Dims{}, tpu_default_layout(kF32, 0)), "f32[]{}");
}

// The parser throws InvalidArgumentError and nothing else for any text: hand-written garbage and
// 5000 random strings over the layout alphabet; whatever it accepts round-trips. Regression: a NUL
// inside the text was read as its end, so "{1,0}\0junk" was accepted.
TEST(TiledLayoutTest, ParserRejectsGarbageWithInvalidArgumentOnly) {
  std::vector<std::string> cases = {"",
                                    "{",
                                    "}",
                                    "{}}",
                                    "{1,0",
                                    "{1,,0}",
                                    "{,}",
                                    "{1,0:T}",
                                    "{1,0:T(}",
                                    "{1,0:T()}",
                                    "{1,0:T(0,128)}",
                                    "{1,0:T(-1,128)}",
                                    "{1,0:T(-2,128)}",
                                    "{1,0:T(*,128)}",
                                    "{99999999999999999999}",
                                    "{1,0:T(99999999999999999999)}",
                                    "{1,0}x",
                                    "{0,0}",
                                    "{2,0}",
                                    "{1,0:S(1)}",
                                    "{+1,0}",
                                    "{0x10}",
                                    "{1.5}",
                                    "{\xff}",
                                    std::string("{1,0}\0junk", 10),
                                    std::string("{1,0:T(8,128)}\0", 15),
                                    std::string("{1,\0"
                                                "0}",
                                                6)};
  const size_t num_bad = cases.size();  // the hand-written cases above are all invalid
  std::mt19937 rng(1);
  const std::string alphabet = "{}(),:T0123456789-* E";
  for (int i = 0; i < 5000; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) s += alphabet[rng() % alphabet.size()];
    cases.push_back(s);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string& c = cases[i];
    try {
      const Layout l = parse_layout(c);
      EXPECT_GE(i, num_bad) << "case " << i << " was accepted";
      EXPECT_EQ(parse_layout(l.to_string()), l) << c;
    } catch (const InvalidArgumentError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "'" << c << "' threw " << e.what();
    }
  }
  EXPECT_EQ(parse_layout(" { 1 , 0 : T ( 8 , 128 ) ( 2 , 1 ) } ").to_string(),
            "{1,0:T(8,128)(2,1)}");
}

// Shapes whose padded size passes 2^64 bytes are an InvalidArgumentError for every element type;
// every other shape has padded >= logical bytes.
TEST(TiledLayoutTest, PaddedBytesOverflowIsAnInvalidArgument) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  const std::vector<std::vector<int64_t>> shapes = {{big},
                                                    {big, big},
                                                    {big, 1},
                                                    {1, big},
                                                    {0, big, big},
                                                    {1, 1, 1, 1, 1, 1, 1, 1},
                                                    {big, 0},
                                                    {3, 5, 7, 11, 13, 17, 19, 23},
                                                    {},
                                                    {int64_t{1} << 40, int64_t{1} << 21}};
  for (ElementType t : all_element_types()) {
    for (const auto& dims : shapes) {
      try {
        const ArrayBytes b = array_bytes(t, dims);
        EXPECT_GE(b.padded_bytes, b.logical_bytes);
      } catch (const InvalidArgumentError& e) {
        EXPECT_NE(e.message().find("2^64"), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace vtpu
