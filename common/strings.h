// Small string helpers for error messages.
#pragma once

#include <string>
#include <string_view>

namespace vtpu {

/// Joins the strings of a range with `sep`: join({"a", "b"}, ", ") == "a, b".
template <typename Range>
std::string join(const Range& items, std::string_view sep = ", ") {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

}  // namespace vtpu
