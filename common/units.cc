#include "vtpu/common/units.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <limits>

#include "vtpu/common/error.h"

namespace vtpu {

uint64_t parse_bytes(std::string_view text) {
  auto fail = [&](const char* why) -> uint64_t {
    throw InvalidArgumentError("invalid byte size '" + std::string(text) + "': " + why +
                               " (expected a non-negative integer with an optional K, M, G or T "
                               "suffix, powers of 1024, e.g. 16G)");
  };
  std::string_view s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.empty()) return fail("empty");
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec == std::errc::result_out_of_range) return fail("too large");
  if (ec != std::errc() || ptr == s.data()) return fail("no leading number");
  std::string suffix(ptr, s.data() + s.size());
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.size() >= 3 && suffix.substr(suffix.size() - 2) == "IB")
    suffix.resize(suffix.size() - 2);
  else if (suffix.size() >= 2 && suffix.back() == 'B')
    suffix.pop_back();
  else if (suffix == "B")
    suffix.clear();
  unsigned shift = 0;
  if (suffix.empty())
    shift = 0;
  else if (suffix == "K")
    shift = 10;
  else if (suffix == "M")
    shift = 20;
  else if (suffix == "G")
    shift = 30;
  else if (suffix == "T")
    shift = 40;
  else
    return fail("unknown suffix");
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift))
    return fail("too large");
  return value << shift;
}

std::string format_bytes(uint64_t size_bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (size_bytes < 1024) return std::to_string(size_bytes) + " B";
  double v = static_cast<double>(size_bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  return buf;
}

std::string format_seconds(double seconds) {
  char buf[48];
  constexpr double kMinute = 60, kHour = 3600, kDay = 86400, kYear = 365.25 * kDay;
  if (seconds >= 1e4 * kYear)
    std::snprintf(buf, sizeof buf, "%.3e years", seconds / kYear);
  else if (seconds >= kYear)
    std::snprintf(buf, sizeof buf, "%.3f years", seconds / kYear);
  else if (seconds >= kDay)
    std::snprintf(buf, sizeof buf, "%.3f days", seconds / kDay);
  else if (seconds >= kHour)
    std::snprintf(buf, sizeof buf, "%.3f h", seconds / kHour);
  else if (seconds >= kMinute)
    std::snprintf(buf, sizeof buf, "%.3f min", seconds / kMinute);
  else if (seconds >= 1)
    std::snprintf(buf, sizeof buf, "%.3f s", seconds);
  else if (seconds >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3f us", seconds * 1e6);
  return buf;
}

}  // namespace vtpu
