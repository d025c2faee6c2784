#include "vtpu/train/digits_dataset.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "vtpu/common/error.h"
#include "tests/test_data.h"
#include "tests/temp_path.h"

namespace vtpu {
namespace {

std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path = test_temp_path(name);
  std::ofstream(path) << content;
  return path;
}

std::string row(int label, int pixel = 0) {
  std::string s;
  for (int i = 0; i < 64; ++i) s += std::to_string(pixel) + ",";
  return s + std::to_string(label) + "\n";
}

// scikit-learn's documentation of load_digits: 1797 samples; the per-class counts below are
// those of the UCI test set it ships (sklearn/datasets/descr/digits.rst, np.bincount(y)).
TEST(DigitsDatasetTest, RealFileHasThePublishedShapeAndClassCounts) {
  VTPU_REQUIRE_DIGITS();
  const DigitsDataset ds = load_digits_csv(testing::digits_path());
  ASSERT_EQ(ds.num_rows(), 1797);
  ASSERT_EQ(ds.pixels.size(), 1797u * 64u);
  std::array<int, 10> counts{};
  for (int l : ds.labels) counts[static_cast<size_t>(l)]++;
  EXPECT_EQ(counts, (std::array<int, 10>{178, 182, 177, 183, 181, 182, 181, 179, 174, 180}));
  // First image of the file: 0,0,5,13,9,1,0,0,... label 0; pixels are scaled by 1/16.
  EXPECT_EQ(ds.labels[0], 0);
  EXPECT_FLOAT_EQ(ds.pixels[2], 5.0f / 16.0f);
  EXPECT_FLOAT_EQ(ds.pixels[3], 13.0f / 16.0f);
}

TEST(DigitsDatasetTest, SplitIsFixedDisjointAndCoversEveryRow) {
  VTPU_REQUIRE_DIGITS();
  const DigitsDataset ds = load_digits_csv(testing::digits_path());
  const DigitsSplit a = split_digits(ds), b = split_digits(ds);
  EXPECT_EQ(a.train.num_rows(), 1437);
  EXPECT_EQ(a.test.num_rows(), 360);
  EXPECT_EQ(a.test.pixels, b.test.pixels);
  EXPECT_EQ(a.test.labels, b.test.labels);
  // Every original row appears exactly once across the two halves.
  std::multiset<std::vector<float>> original, split;
  for (int64_t i = 0; i < ds.num_rows(); ++i)
    original.insert(
        std::vector<float>(ds.pixels.begin() + i * 64, ds.pixels.begin() + (i + 1) * 64));
  for (const DigitsDataset* d : {&a.train, &a.test})
    for (int64_t i = 0; i < d->num_rows(); ++i)
      split.insert(
          std::vector<float>(d->pixels.begin() + i * 64, d->pixels.begin() + (i + 1) * 64));
  EXPECT_EQ(original, split);
}

TEST(DigitsDatasetTest, MissingFileIsNotFoundWithTheFix) {
  try {
    load_digits_csv("/nonexistent/digits.csv.gz");
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("scripts/fetch-data.sh"), std::string::npos);
  }
}

void expect_corrupt(const std::string& content, const std::string& needle) {
  std::string all;
  for (int i = 0; i < 12; ++i) all += row(i % 10);
  const std::string path = write_temp("vtpu_digits_corrupt.csv", all + content);
  try {
    load_digits_csv(path);
    FAIL() << "expected InvalidArgumentError for " << needle;
  } catch (const InvalidArgumentError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("line 13"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(DigitsDatasetTest, CorruptFilesNameTheLineAndField) {
  expect_corrupt(row(10), "label is 10");
  expect_corrupt(row(3, 17), "pixel 0 is 17");
  expect_corrupt("1,2,3\n", "has 3 fields");
  expect_corrupt(row(3).substr(0, 4) + "x," + row(3).substr(4), "not a number");
  expect_corrupt(row(3).replace(0, 1, "1.5"), "not a small integer");
  expect_corrupt(row(3).replace(0, 1, "2147483648"), "not a small integer");  // no UB cast
  expect_corrupt(row(3).replace(0, 1, "nan"), "not a number");
  // Regression: NUL bytes were silently dropped and could glue two half lines together.
  expect_corrupt(std::string("1,2\0junk\n", 10), "NUL byte");
  expect_corrupt(std::string(5000, '1') + "\n", "bytes long");
  expect_corrupt("\n", "empty line");
}

// Regression: /dev/zero made the reader loop forever; endless input now stops at a size cap.
TEST(DigitsDatasetTest, EndlessInputStopsAtTheSizeCap) {
  try {
    load_digits_csv("/dev/zero");
    FAIL();
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than"), std::string::npos) << e.what();
  }
  DigitsDataset empty;
  EXPECT_THROW(split_digits(empty), InvalidArgumentError);  // was a division by zero
}

TEST(DigitsDatasetTest, TooFewRowsAndTruncatedGzip) {
  EXPECT_THROW(load_digits_csv(write_temp("vtpu_digits_short.csv", row(1) + row(2))),
               InvalidArgumentError);
  VTPU_REQUIRE_DIGITS();
  // A truncated gzip stream must fail loudly, never load a prefix silently.
  std::ifstream in(testing::digits_path(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string path = test_temp_path("vtpu_trunc.csv.gz");
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_THROW(load_digits_csv(path), InvalidArgumentError);
}

}  // namespace
}  // namespace vtpu
