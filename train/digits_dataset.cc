#include "vtpu/train/digits_dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string_view>

#include "vtpu/common/data_dir.h"
#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"

namespace vtpu {

namespace {

constexpr uint64_t kSplitSeed = 0x5eed'd161'75ULL;  // fixed: the test split never moves

constexpr size_t kMaxFileBytes = size_t{64} << 20;  // uncompressed
constexpr size_t kMaxLineBytes = 4096;              // a real line is under 200 bytes

// The shipped file's name under a data directory and its place in the source tree
// (common/data_dir.h).
constexpr const char* kDigitsName = "digits.csv.gz";
constexpr const char* kDigitsSourcePath = "data/digits.csv.gz";

/// A field for an error message: at most 24 characters, non-printable bytes as \xNN.
std::string printable(std::string_view tok) {
  std::string out;
  for (size_t i = 0; i < tok.size() && i < 24; ++i) {
    const auto c = static_cast<unsigned char>(tok[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (tok.size() > 24) out += "...";
  return out;
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

}  // namespace

std::string default_digits_path() { return find_data_file(kDigitsName, kDigitsSourcePath); }

DigitsDataset load_digits_csv(const std::string& path) {
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  // A file that exists but may not be read is PermissionDenied, not "run fetch-data.sh".
  if (!file && errno != ENOENT && errno != ENOTDIR && errno != 0) {
    throw_file_open_error("digits data file", path, errno);
  }
  if (!file) {
    throw NotFoundError("cannot open digits data file '" + path + "'" +
                        data_file_lookup_note(path, kDigitsName, kDigitsSourcePath) +
                        " (run scripts/fetch-data.sh to fetch it from Debian's python3-sklearn, "
                        "or pass --data PATH)");
  }
  // Read everything (decompressing if gzipped) with a cap, so that a gzip bomb or /dev/zero fails
  // fast instead of filling RAM or looping forever. The real file is about 300 KB.
  std::string text;
  char buf[1 << 16];
  while (true) {
    const int n = gzread(file.get(), buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      throw InvalidArgumentError("corrupt digits file '" + path +
                                 "': " + gzerror(file.get(), &err));
    }
    if (n == 0) {
      int err = 0;
      const char* msg = gzerror(file.get(), &err);
      if (err != Z_OK && err != Z_STREAM_END) {
        throw InvalidArgumentError("corrupt digits file '" + path + "': " + msg);
      }
      break;
    }
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxFileBytes) {
      throw InvalidArgumentError("digits file '" + path + "' is larger than " +
                                 std::to_string(kMaxFileBytes) +
                                 " bytes uncompressed (the real file is about 300 KB)");
    }
  }
  DigitsDataset ds;
  int64_t line_no = 0;
  auto bad = [&](const std::string& why) {
    throw InvalidArgumentError("corrupt digits file '" + path + "' at line " +
                               std::to_string(line_no) + ": " + why +
                               " (expected 64 pixel values 0..16 then a label 0..9, "
                               "comma-separated)");
  };
  std::string_view all = text;
  while (!all.empty()) {
    const size_t nl = all.find('\n');
    std::string_view line = all.substr(0, nl);
    all.remove_prefix(nl == std::string_view::npos ? all.size() : nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) bad("empty line");
    if (line.size() > kMaxLineBytes) {
      bad("line is " + std::to_string(line.size()) + " bytes long (at most " +
          std::to_string(kMaxLineBytes) + ")");
    }
    if (line.find('\0') != std::string_view::npos) bad("contains a NUL byte (binary data)");
    std::string_view rest = line;
    int field = 0;
    int values[DigitsDataset::kNumFeatures + 1];
    while (true) {
      const size_t comma = rest.find(',');
      std::string_view tok = rest.substr(0, comma);
      if (field > DigitsDataset::kNumFeatures) bad("more than 65 fields");
      // Accept "5" and "5.0" (some exports write floats), nothing else.
      double v = 0.0;
      auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
      if (ec != std::errc() || ptr != tok.data() + tok.size() || tok.empty() || !std::isfinite(v)) {
        bad("field " + std::to_string(field + 1) + " is '" + printable(tok) + "', not a number");
      }
      if (v < -1e6 || v > 1e6 || v != std::floor(v)) {  // range first: the cast below is then safe
        bad("field " + std::to_string(field + 1) + " is " + printable(tok) +
            ", not a small integer");
      }
      values[field++] = static_cast<int>(v);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (field != DigitsDataset::kNumFeatures + 1) {
      bad("has " + std::to_string(field) + " fields");
    }
    for (int i = 0; i < DigitsDataset::kNumFeatures; ++i) {
      if (values[i] < 0 || values[i] > 16) {
        bad("pixel " + std::to_string(i) + " is " + std::to_string(values[i]));
      }
      ds.pixels.push_back(static_cast<float>(values[i]) / 16.0f);
    }
    const int label = values[DigitsDataset::kNumFeatures];
    if (label < 0 || label >= DigitsDataset::kNumClasses) bad("label is " + std::to_string(label));
    ds.labels.push_back(label);
  }
  if (ds.num_rows() < 10) {
    throw InvalidArgumentError("digits file '" + path + "' has " + std::to_string(ds.num_rows()) +
                               " rows (expected at least 10; the real file has 1797)");
  }
  return ds;
}

DigitsSplit split_digits(const DigitsDataset& all, double train_fraction) {
  if (!(train_fraction > 0.0 && train_fraction < 1.0)) {
    throw InvalidArgumentError("train fraction " + format_text("%g", train_fraction) +
                               " (expected strictly between 0 and 1)");
  }
  if (all.num_rows() < 2) {
    throw InvalidArgumentError("cannot split " + std::to_string(all.num_rows()) +
                               " rows into train and test (expected at least 2)");
  }
  std::vector<int64_t> order(static_cast<size_t>(all.num_rows()));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 gen(kSplitSeed);
  for (size_t i = order.size() - 1; i > 0; --i) {  // Fisher-Yates with a portable draw
    std::swap(order[i], order[gen() % (i + 1)]);
  }
  const auto num_train = static_cast<size_t>(static_cast<double>(order.size()) * train_fraction);
  DigitsSplit split;
  for (size_t k = 0; k < order.size(); ++k) {
    DigitsDataset& dst = k < num_train ? split.train : split.test;
    const auto row = static_cast<size_t>(order[k]);
    dst.pixels.insert(dst.pixels.end(), all.pixels.begin() + static_cast<std::ptrdiff_t>(row * 64),
                      all.pixels.begin() + static_cast<std::ptrdiff_t>((row + 1) * 64));
    dst.labels.push_back(all.labels[row]);
  }
  return split;
}

}  // namespace vtpu
