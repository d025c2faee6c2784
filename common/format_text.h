// printf-style formatting into a std::string that is as long as the text: for table rows and
// description lines whose fields (a strategy's "why it lost", a profile name, a file path) have no
// length limit, where a fixed char buffer and snprintf cut the text silently.
#pragma once

#include <string>

namespace vtpu {

/// The text std::snprintf(buffer, size, format, ...) would write with a buffer large enough, as
/// absl::StrFormat and Chromium's base::StringPrintf return it: never truncated. The arguments
/// are checked against `format` at compile time (GCC and Clang's format attribute). Throws
/// InvalidArgumentError when vsnprintf reports an encoding error. Thread-safe (pure).
[[gnu::format(printf, 1, 2)]] std::string format_text(const char* format, ...);

}  // namespace vtpu
