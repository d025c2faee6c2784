#include "vtpu/cli/cli_validators.h"

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/runtime/hardware_profile.h"

namespace vtpu {

// Decimal digits only, at most 2^64 - 1: CLI11's own uint64_t parsing wraps "-1" and saturates
// "2^64", which would silently replay a seed the user did not type.
uint64_t parse_seed(const std::string& text) {
  uint64_t v = 0;
  bool ok = !text.empty() && text.size() <= 20;
  for (char ch : text) {
    if (!ok) break;
    ok = ch >= '0' && ch <= '9' && !__builtin_mul_overflow(v, uint64_t{10}, &v) &&
         !__builtin_add_overflow(v, static_cast<uint64_t>(ch - '0'), &v);
  }
  if (!ok) {
    throw InvalidArgumentError("--seed '" + text +
                               "' (expected a decimal integer in [0, 18446744073709551615])");
  }
  return v;
}

int report_usage_error(const std::string& message) {
  std::fprintf(stderr, "vtpu: usage error: %s\nRun with --help for the options.\n",
               message.c_str());
  return 2;
}

bool check_usage(const std::function<void()>& parse) {
  try {
    parse();
    return true;
  } catch (const InvalidArgumentError& e) {
    report_usage_error(e.message());
    return false;
  }
}

void check_micro_batches(int64_t micro_batches, int64_t global_batch, int64_t data_shards,
                         const std::string& shard, const std::string& over) {
  if (data_shards < 1 || global_batch % data_shards != 0) return;
  const int64_t rows = global_batch / data_shards;
  if (micro_batches >= 1 && rows % micro_batches == 0) return;
  throw InvalidArgumentError("--micro-batches " + std::to_string(micro_batches) +
                             " does not divide the " + std::to_string(rows) + " rows per " + shard +
                             " (global batch " + std::to_string(global_batch) + " over " + over +
                             "; expected a divisor of " + std::to_string(rows) + ")");
}

CLI::Validator seed_validator() {
  return parse_validator([](const std::string& s) { parse_seed(s); }, "SEED", "--seed");
}

CLI::Validator parse_validator(std::function<void(const std::string&)> parse, std::string name,
                               std::string flag) {
  return CLI::Validator(
      [parse = std::move(parse), prefix = flag.empty() ? flag : flag + " "](std::string& s) {
        try {
          parse(s);
          return std::string();
        } catch (const Error& e) {
          std::string message = e.message();
          if (!prefix.empty() && message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
          return message;
        }
      },
      std::move(name));
}

CLI::Validator hardware_validator() {
  return parse_validator(
      [](const std::string& s) {
        // HardwareProfile::get reads a .json path; a name it looks up among the built-in ones.
        if (!(s.size() > 5 && s.ends_with(".json"))) HardwareProfile::get(s);
      },
      "PROFILE");
}

CLI::Validator size_validator() {
  return parse_validator([](const std::string& s) { parse_bytes(s); }, "SIZE");
}

CLI::Validator nonempty_path_validator() {
  return CLI::Validator(
      [](const std::string& path) {
        return path.empty() ? std::string("expected a file path, got an empty string")
                            : std::string();
      },
      "PATH", "non-empty path");
}

std::vector<int64_t> parse_dimension_list(const std::string& text) {
  constexpr unsigned long long kMax = 1ULL << 62;
  const std::string example = " (expected comma-separated integers in 0..2^62, e.g. 8,8,3)";
  std::vector<int64_t> dims;
  size_t begin = 0;
  for (int i = 0;; ++i) {
    const size_t comma = text.find(',', begin);
    const std::string d =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    // A dropped entry changes the array's rank: "8,,3" is not (8, 3).
    if (d.empty() && !text.empty()) {
      throw InvalidArgumentError("'" + text + "' has an empty dimension " + std::to_string(i) +
                                 " (0-based)" + example);
    }
    // Leading zeros are decimal ("08" is 8), not octal: CLI11 refused "08" with its bare
    // "Could not convert".
    const size_t first = std::min(d.find_first_not_of('0'), d.empty() ? 0 : d.size() - 1);
    const std::string digits = d.substr(first);
    const bool ok = !digits.empty() && digits.size() <= 19 &&
                    digits.find_first_not_of("0123456789") == std::string::npos &&
                    std::strtoull(digits.c_str(), nullptr, 10) <= kMax;
    if (!ok) throw InvalidArgumentError("dimension '" + d + "' is not an integer in 0..2^62");
    dims.push_back(static_cast<int64_t>(std::strtoull(digits.c_str(), nullptr, 10)));
    if (comma == std::string::npos) return dims;
    begin = comma + 1;
  }
}

CLI::Validator dimension_list_validator() {
  return CLI::Validator(
      [](std::string& s) {
        try {
          (void)parse_dimension_list(s);
          return std::string();
        } catch (const InvalidArgumentError& e) {
          return e.message();
        }
      },
      "INT>=0,...");
}

std::string learning_rate_problem(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const bool whole = !text.empty() && end == text.c_str() + text.size();
  // The trainers keep the rate as a float: 1e-320 (a double's subnormal) and 1e-40 (a float's)
  // would train with 0 or a rate that has lost its digits.
  const auto f = static_cast<float>(v);
  if (whole && errno != ERANGE && v > 0 && std::isnormal(f) && std::isfinite(f)) return {};
  char range[64];
  std::snprintf(range, sizeof range, "%g..%g", static_cast<double>(FLT_MIN),
                static_cast<double>(FLT_MAX));
  return "learning rate '" + text + "' (expected a normal number > 0, " + range + ")";
}

CLI::Validator learning_rate_validator() {
  return CLI::Validator([](std::string& s) { return learning_rate_problem(s); }, "> 0");
}

CLI::Validator hbm_bytes_validator() {
  return parse_validator(
      [](const std::string& s) {
        if (parse_bytes(s) < kMinHbmBytesFlag) {
          throw InvalidArgumentError("--hbm-bytes " + s + " (expected at least " +
                                     std::to_string(kMinHbmBytesFlag) + " bytes, e.g. 16G)");
        }
      },
      "SIZE", "--hbm-bytes");
}

}  // namespace vtpu
