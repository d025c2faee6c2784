// Small string helpers for error messages.
#pragma once

#include <algorithm>
#include <cstddef>
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

/// `n` and a noun, singular for 1 and plural otherwise: count_text(1, "core") == "1 core",
/// count_text(8, "core") == "8 cores", count_text(2, "micro-batch", "micro-batches"). `plural`
/// defaults to singular + "s". Thread-safe (pure).
inline std::string count_text(long long n, std::string_view singular,
                              std::string_view plural = {}) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out.append(singular);
  return plural.empty() ? out.append(singular).append("s") : out.append(plural);
}

/// Characters an error message quotes of one user-given text (a spec, a --mesh) before
/// abbreviate() shortens it.
inline constexpr size_t kMaxQuotedChars = 300;

/// `text` when it has at most `max_chars` bytes; else its first and last bytes around
/// "... (N bytes omitted) ...", max_chars in all (about 2/3 head, 1/3 tail), never cutting a
/// UTF-8 sequence. For error messages that quote user input (a 150 KB spec
/// once made a 150 KB error line). Thread-safe (pure).
inline std::string abbreviate(std::string_view text, size_t max_chars = kMaxQuotedChars) {
  if (text.size() <= max_chars) return std::string(text);
  const auto continuation = [&](size_t i) {
    return i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  size_t head = max_chars * 2 / 3;
  size_t tail_start = text.size() - (max_chars - head);
  while (head > 0 && continuation(head)) --head;  // cut before a lead byte
  while (tail_start < text.size() && continuation(tail_start)) ++tail_start;
  return std::string(text.substr(0, head)) + "... (" + std::to_string(tail_start - head) +
         " bytes omitted) ..." + std::string(text.substr(tail_start));
}

/// Up to `max_chars` bytes of `text` around byte `pos` (the whole text when it is short), with
/// "..." where it was cut, never cutting a UTF-8 sequence; for parse errors that point at a
/// position in a long input. Thread-safe (pure).
inline std::string excerpt_around(std::string_view text, size_t pos,
                                  size_t max_chars = kMaxQuotedChars) {
  if (text.size() <= max_chars) return std::string(text);
  const auto continuation = [&](size_t i) {
    return i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  size_t begin = pos > max_chars / 2 ? pos - max_chars / 2 : 0;
  size_t end = std::min(text.size(), begin + max_chars);
  if (end == text.size()) begin = text.size() - max_chars;
  while (begin > 0 && continuation(begin)) --begin;
  while (end < text.size() && continuation(end)) ++end;
  return (begin > 0 ? "..." : "") + std::string(text.substr(begin, end - begin)) +
         (end < text.size() ? "..." : "");
}

}  // namespace vtpu
