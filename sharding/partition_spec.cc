#include "sharding/partition_spec.h"

#include <cctype>
#include <utility>

#include "common/error.h"

namespace vtpu {

namespace {

void check_name(const std::string& name, size_t dim) {
  if (name.empty()) {
    throw InvalidArgumentError("PartitionSpec entry " + std::to_string(dim) +
                               " has an empty axis name (expected a mesh axis name)");
  }
  if (name.find_first_of("'\"") != std::string::npos) {
    throw InvalidArgumentError("PartitionSpec axis name <" + name + "> in entry " +
                               std::to_string(dim) + " contains a quote character (expected none)");
  }
}

std::string quoted(const std::string& name) { return "'" + name + "'"; }

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// Recursive-descent parser for the grammar in partition_spec.h.
class SpecParser {
 public:
  explicit SpecParser(std::string_view text) : text_(text) {}

  std::vector<PartitionSpec::Entry> parse() {
    skip_ws();
    std::vector<PartitionSpec::Entry> entries;
    const size_t save = pos_;
    const std::string_view word = peek_identifier();
    if (word == "P" || word == "PartitionSpec") {
      pos_ += word.size();
      skip_ws();
      if (peek() == '(') {
        ++pos_;
        entries = parse_entries(')');
        expect(')', "',' or ')'");
        skip_ws();
        if (!at_end()) fail("end of text after the closing ')'");
        return entries;
      }
      pos_ = save;  // a bare axis named P or PartitionSpec
    }
    entries = parse_entries('\0');
    if (!at_end()) fail("',' or end of text");
    return entries;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  void skip_ws() {
    while (!at_end() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  std::string_view peek_identifier() const {
    if (at_end() || !is_ident_start(text_[pos_])) return {};
    size_t end = pos_ + 1;
    while (end < text_.size() && is_ident_char(text_[end])) ++end;
    return text_.substr(pos_, end - pos_);
  }

  [[noreturn]] void fail(const std::string& expected) const { fail_at(pos_, expected); }
  [[noreturn]] void fail_at(size_t pos, const std::string& expected) const {
    std::string found =
        pos >= text_.size() ? "end of text" : "'" + std::string(1, text_[pos]) + "'";
    throw InvalidArgumentError("cannot parse PartitionSpec \"" + std::string(text_) +
                               "\": expected " + expected + " at position " + std::to_string(pos) +
                               ", found " + found);
  }
  void expect(char c, const std::string& expected) {
    skip_ws();
    if (peek() != c) fail(expected);
    ++pos_;
  }

  /// entries up to (not including) `close` ('\0' = end of text), trailing comma allowed.
  std::vector<PartitionSpec::Entry> parse_entries(char close) {
    std::vector<PartitionSpec::Entry> entries;
    skip_ws();
    if (peek() == close) return entries;
    while (true) {
      entries.push_back(parse_entry());
      skip_ws();
      if (peek() != ',') return entries;
      ++pos_;
      skip_ws();
      if (peek() == close) return entries;  // trailing comma
    }
  }

  PartitionSpec::Entry parse_entry() {
    skip_ws();
    if (peek() == '(') {
      ++pos_;
      PartitionSpec::Entry names;
      skip_ws();
      if (peek() == ')') {
        ++pos_;
        return names;  // () is None
      }
      while (true) {
        skip_ws();
        if (peek() == '(') fail("an axis name (tuples do not nest)");
        if (peek_identifier() == "None") fail("an axis name (None cannot appear inside a tuple)");
        names.push_back(parse_name());
        skip_ws();
        if (peek() == ')') {
          ++pos_;
          return names;
        }
        expect(',', "',' or ')' in a tuple of axis names");
        skip_ws();
        if (peek() == ')') {
          ++pos_;
          return names;
        }
      }
    }
    if (peek_identifier() == "None") {
      pos_ += 4;
      return {};
    }
    return {parse_name()};
  }

  std::string parse_name() {
    const char c = peek();
    if (c == '\'' || c == '"') {
      const size_t open = pos_;
      const size_t close = text_.find(c, open + 1);
      if (close == std::string_view::npos) fail_at(open, "a closing " + std::string(1, c));
      if (close == open + 1) fail_at(open, "a non-empty axis name");
      pos_ = close + 1;
      return std::string(text_.substr(open + 1, close - open - 1));
    }
    const std::string_view word = peek_identifier();
    if (word.empty()) fail("an axis name, None or '('");
    pos_ += word.size();
    return std::string(word);
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

PartitionSpec::PartitionSpec(std::vector<Entry> entries) : entries_(std::move(entries)) {
  for (size_t d = 0; d < entries_.size(); ++d) {
    for (const std::string& name : entries_[d]) check_name(name, d);
  }
}

PartitionSpec PartitionSpec::parse(std::string_view text) {
  return PartitionSpec(SpecParser(text).parse());
}

const PartitionSpec::Entry& PartitionSpec::entry(size_t dim) const {
  static const Entry kNone;
  return dim < entries_.size() ? entries_[dim] : kNone;
}

std::vector<std::string> PartitionSpec::axes() const {
  std::vector<std::string> all;
  for (const Entry& e : entries_) all.insert(all.end(), e.begin(), e.end());
  return all;
}

std::string PartitionSpec::to_string() const {
  std::string s = "P(";
  for (size_t d = 0; d < entries_.size(); ++d) {
    if (d > 0) s += ", ";
    const Entry& e = entries_[d];
    if (e.empty()) {
      s += "None";
    } else if (e.size() == 1) {
      s += quoted(e[0]);
    } else {
      s += "(";
      for (size_t i = 0; i < e.size(); ++i) s += (i ? ", " : "") + quoted(e[i]);
      s += ")";
    }
  }
  return s + ")";
}

PartitionSpec PartitionSpec::normalized() const {
  std::vector<Entry> e = entries_;
  while (!e.empty() && e.back().empty()) e.pop_back();
  return PartitionSpec(std::move(e));
}

}  // namespace vtpu
