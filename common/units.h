// Byte-size parsing and formatting shared by the options loader and the command line, and the
// duration format of the planner's tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vtpu {

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

/// Parses "4096", "64K", "16M", "16G", "1T" (suffixes are powers of 1024; an optional trailing
/// "B" or "iB" is accepted, as in "16GiB"). Throws InvalidArgumentError naming the text when it
/// is not a non-negative size or overflows 64 bits.
uint64_t parse_bytes(std::string_view text);

/// Formats a byte count for humans: "512 B", "1.50 KiB", "16.00 GiB". Exact bytes are not lost
/// where it matters: callers that need them print the integer too.
std::string format_bytes(uint64_t size_bytes);

/// Formats a duration for tables, three decimals in the largest unit not above it: "56.700 us",
/// "12.345 ms" from 1 ms, "1.500 s" from 1 s, "2.500 min" from 60 s, "1.500 h", "2.000 days",
/// "12.237 years" (365.25 days) and from 10^4 years "1.234e+05 years".
std::string format_seconds(double seconds);

}  // namespace vtpu
