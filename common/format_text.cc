#include "vtpu/common/format_text.h"

#include <cstdarg>
#include <cstdio>

#include "vtpu/common/error.h"

namespace vtpu {

std::string format_text(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  // First pass: the length of the text (C11 7.21.6.12: vsnprintf with size 0 writes nothing).
  const int length = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (length < 0) {
    va_end(again);
    throw InvalidArgumentError(std::string("format_text: encoding error formatting \"") + format +
                               "\"");
  }
  std::string out(static_cast<size_t>(length), '\0');
  // Second pass into the string; its buffer holds length + 1 bytes (the terminator).
  std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

}  // namespace vtpu
