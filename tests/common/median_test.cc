// median_of (common/median.h), the one median of the trainers and benchmarks.
#include "vtpu/common/median.h"

#include <gtest/gtest.h>

#include <vector>

namespace vtpu {
namespace {

TEST(MedianTest, HandWorkedOddEvenAndEmpty) {
  EXPECT_EQ(median_of({}), 0.0);
  EXPECT_EQ(median_of({7.5}), 7.5);
  EXPECT_EQ(median_of({3, 1, 2}), 2.0);            // sorted 1, 2, 3
  EXPECT_EQ(median_of({4, 1, 3, 2}), 2.5);         // sorted 1, 2, 3, 4: (2 + 3) / 2
  EXPECT_EQ(median_of({10, -5, 10, 0, 1e9}), 10);  // sorted -5, 0, 10, 10, 1e9
  // The argument is a copy: the caller's order is kept.
  const std::vector<double> v = {9, 1, 5};
  EXPECT_EQ(median_of(v), 5.0);
  EXPECT_EQ(v, (std::vector<double>{9, 1, 5}));
}

}  // namespace
}  // namespace vtpu
