#include "vtpu/sharding/block_copy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "vtpu/common/error.h"

namespace vtpu {
namespace {

using Shape = std::vector<int64_t>;
using Box = std::vector<IndexRange>;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> iota(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

/// Unravels `flat` into an index over `shape` (row-major).
std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

TEST(BlockCopyTest, NumElements) {
  EXPECT_EQ(num_elements_of({}), 1);
  EXPECT_EQ(num_elements_of({5, 10}), 50);
  EXPECT_EQ(num_elements_of({3, 0, int64_t{1} << 62}), 0);
  // The 0 after the huge dimension counts too.
  EXPECT_EQ(num_elements_of({int64_t{1} << 62, 0}), 0);
  EXPECT_EQ(num_elements_of({int64_t{1} << 62, int64_t{1} << 62, 0}), 0);
  EXPECT_THROW(num_elements_of({int64_t{1} << 62, 0, -1}), InvalidArgumentError);
  EXPECT_THROW(num_elements_of({2, -1}), InvalidArgumentError);
  EXPECT_THROW(num_elements_of({int64_t{1} << 40, int64_t{1} << 40}), InvalidArgumentError);
  // Regression: 2^62 f32 elements made from_buffers' expected byte size wrap to 0.
  EXPECT_EQ(num_elements_of({int64_t{1} << 60}), int64_t{1} << 60);
  EXPECT_THROW(num_elements_of({int64_t{1} << 62}), InvalidArgumentError);
  // 2^60 + 1 is one past the limit; the error names the shape and the limit (it said
  // "expected fewer").
  try {
    num_elements_of({(int64_t{1} << 60) + 1});
    ADD_FAILURE() << "2^60 + 1 elements accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("shape (1152921504606846977,) has more than 2^60 elements "
                                    "(expected at most 2^60)"));
  }
  // The shapes are printed by named_sharding.h's shape_text (block_copy.cc had its own copy).
  try {
    num_elements_of({2, -1});
    ADD_FAILURE() << "a negative dimension accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("dimension 1 of shape (2, -1) is negative (expected >= 0)"));
  }
  std::vector<float> scalar(1), two(2);
  try {
    extract_block<float>(scalar, {}, {}, two);
    ADD_FAILURE() << "a 2-element block of a scalar accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("block copy (extract) of box () from shape () got a 4-byte "
                                    "source and a 8-byte destination (expected 4 and 4 bytes)"));
  }
}

TEST(BlockCopyTest, HandWorked2d) {
  // full (4, 6) = 0..23; rows [1, 3) x cols [2, 5).
  const std::vector<float> full = iota(24);
  std::vector<float> block(6);
  extract_block<float>(full, {4, 6}, {{1, 3}, {2, 5}}, block);
  EXPECT_THAT(block, ElementsAre(8, 9, 10, 14, 15, 16));
  // Whole rows: one contiguous run.
  std::vector<float> rows(12);
  extract_block<float>(full, {4, 6}, {{1, 3}, {0, 6}}, rows);
  EXPECT_THAT(rows, ElementsAre(6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17));
  // Insert writes only the box.
  std::vector<float> dst(24, -1.0f);
  insert_block<float>(block, {4, 6}, {{1, 3}, {2, 5}}, dst);
  for (int i = 0; i < 24; ++i) {
    const int r = i / 6, c = i % 6;
    const bool inside = r >= 1 && r < 3 && c >= 2 && c < 5;
    EXPECT_EQ(dst[static_cast<size_t>(i)], inside ? static_cast<float>(i) : -1.0f) << i;
  }
}

TEST(BlockCopyTest, ScalarAndEmpty) {
  const std::vector<float> one = {7.0f};
  std::vector<float> out(1);
  extract_block<float>(one, {}, {}, out);
  EXPECT_EQ(out[0], 7.0f);
  std::vector<float> none;
  extract_block<float>(iota(6), {2, 3}, {{1, 1}, {0, 3}}, none);  // empty box: no-op
  extract_block<float>({}, {0, 3}, {{0, 0}, {0, 3}}, none);
}

TEST(BlockCopyTest, RandomBoxesMatchANaiveLoop) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 500; ++iter) {
    const size_t rank = rng() % 5;  // 0..4
    Shape shape(rank);
    for (int64_t& d : shape) d = static_cast<int64_t>(1 + rng() % 5);
    Box box(rank);
    Shape block_shape(rank);
    for (size_t d = 0; d < rank; ++d) {
      const int64_t a = static_cast<int64_t>(rng() % static_cast<uint64_t>(shape[d] + 1));
      const int64_t b = static_cast<int64_t>(rng() % static_cast<uint64_t>(shape[d] + 1));
      box[d] = {std::min(a, b), std::max(a, b)};
      if (rng() % 3 == 0) box[d] = {0, shape[d]};  // exercise whole-dimension runs
      block_shape[d] = box[d].size();
    }
    const int64_t n = num_elements_of(shape);
    const int64_t m = num_elements_of(block_shape);
    const std::vector<float> full = iota(static_cast<size_t>(n));
    // Naive: the block's element k is full[start + unravel(k)].
    std::vector<float> want(static_cast<size_t>(m));
    for (int64_t k = 0; k < m; ++k) {
      const std::vector<int64_t> local = unravel(k, block_shape);
      int64_t flat = 0;
      for (size_t d = 0; d < rank; ++d) flat = flat * shape[d] + box[d].start + local[d];
      want[static_cast<size_t>(k)] = full[static_cast<size_t>(flat)];
    }
    std::vector<float> got(static_cast<size_t>(m), -1.0f);
    extract_block<float>(full, shape, box, got);
    ASSERT_EQ(got, want);
    // Insert back into a blank array: exactly the box's elements reappear.
    std::vector<float> back(static_cast<size_t>(n), -1.0f);
    insert_block<float>(got, shape, box, back);
    for (int64_t flat = 0; flat < n; ++flat) {
      const std::vector<int64_t> idx = unravel(flat, shape);
      bool inside = true;
      for (size_t d = 0; d < rank; ++d) {
        inside = inside && box[d].start <= idx[d] && idx[d] < box[d].stop;
      }
      ASSERT_EQ(back[static_cast<size_t>(flat)], inside ? full[static_cast<size_t>(flat)] : -1.0f);
    }
  }
}

TEST(BlockCopyTest, Errors) {
  const std::vector<float> full = iota(24);
  std::vector<float> block(6);
  auto expect_invalid = [](auto fn, const char* part) {
    try {
      fn();
      ADD_FAILURE() << "expected InvalidArgumentError";
    } catch (const InvalidArgumentError& e) {
      EXPECT_THAT(e.what(), HasSubstr(part));
    }
  };
  expect_invalid([&] { extract_block<float>(full, {4, 6}, {{1, 3}}, block); }, "1 ranges");
  expect_invalid(
      [&] {
        extract_block<float>(full, {4, 6}, {{1, 3}, {4, 7}}, block);
      },
      "[4, 7) on dimension 1");
  expect_invalid(
      [&] {
        extract_block<float>(full, {4, 6}, {{3, 1}, {0, 3}}, block);
      },
      "[3, 1) on dimension 0");
  expect_invalid(
      [&] {
        extract_block<float>(full, {4, 5}, {{1, 3}, {2, 5}}, block);
      },
      "expected 80 and 24 bytes");
  std::vector<float> small(5);
  expect_invalid(
      [&] {
        extract_block<float>(full, {4, 6}, {{1, 3}, {2, 5}}, small);
      },
      "20-byte destination");
}

}  // namespace
}  // namespace vtpu
