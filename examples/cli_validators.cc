#include "examples/cli_validators.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "common/units.h"
#include "runtime/hardware_profile.h"

namespace vtpu::examples {

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

bool check_usage(const std::function<void()>& parse) {
  try {
    parse();
    return true;
  } catch (const InvalidArgumentError& e) {
    std::fprintf(stderr, "vtpu: usage error: %s\nRun with --help for the options.\n",
                 e.message().c_str());
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

CLI::Validator dimension_validator() {
  return CLI::Validator(
      [](std::string& s) {
        constexpr unsigned long long kMax = 1ULL << 62;
        const bool digits =
            !s.empty() && s.size() <= 19 && s.find_first_not_of("0123456789") == std::string::npos;
        if (digits && std::strtoull(s.c_str(), nullptr, 10) <= kMax) return std::string();
        return "dimension '" + s + "' is not an integer in 0..2^62";
      },
      "INT>=0");
}

CLI::Validator learning_rate_validator() {
  return CLI::Validator(
      [](std::string& s) {
        const double v = std::strtod(s.c_str(), nullptr);
        return v > 0.0 && std::isfinite(v) ? std::string()
                                           : "learning rate " + s + " must be a finite number > 0";
      },
      "> 0");
}

}  // namespace vtpu::examples
