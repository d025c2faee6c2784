// The UCI handwritten digits (scikit-learn's load_digits): 1797 images of 8x8 pixels with values
// 0..16, ten classes. The file is Debian python3-sklearn's digits.csv.gz: one image per line, 64
// pixel values then the label, comma-separated. scripts/fetch-data.sh extracts it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vtpu {

/// Rows of scaled pixels and labels. Plain data, thread-compatible.
struct DigitsDataset {
  static constexpr int kNumFeatures = 64;  // 8x8 pixels
  static constexpr int kNumClasses = 10;
  std::vector<float> pixels;  // num_rows x 64, row-major, each value pixel / 16 in [0, 1]
  std::vector<int> labels;    // num_rows, each 0..9
  int64_t num_rows() const { return static_cast<int64_t>(labels.size()); }
};

/// Reads a digits CSV, gzipped or plain (zlib reads both). Throws NotFoundError if the file cannot
/// be opened (the message says how to fetch it) and InvalidArgumentError naming the line and the
/// field for a corrupt file: wrong field count, a pixel outside 0..16, a label outside 0..9, a
/// non-integer, a truncated gzip stream, or fewer than 10 rows.
DigitsDataset load_digits_csv(const std::string& path);

/// The fixed held-out split: rows are shuffled with a constant seed (not the training seed), the
/// first 80% (rounded down) train and the rest test. Same file, same split, every run.
struct DigitsSplit {
  DigitsDataset train;
  DigitsDataset test;
};
DigitsSplit split_digits(const DigitsDataset& all, double train_fraction = 0.8);

/// Default location: digits.csv.gz in $VTPU_DATA_DIR, <prefix>/share/vtpu or the source tree's
/// data/, the first that holds it (common/data_dir.h).
std::string default_digits_path();

}  // namespace vtpu
