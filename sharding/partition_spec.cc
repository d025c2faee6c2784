#include "vtpu/sharding/partition_spec.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"

namespace vtpu {

namespace {

void check_name(const std::string& name, size_t dim) {
  if (name.empty()) {
    throw InvalidArgumentError("PartitionSpec entry " + std::to_string(dim) +
                               " has an empty axis name (expected a mesh axis name)");
  }
  if (name.find_first_of("'\"") != std::string::npos) {
    throw InvalidArgumentError("PartitionSpec axis name <" + abbreviate(name) + "> in entry " +
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

  struct Parsed {
    std::vector<PartitionSpec::Entry> entries;
    std::vector<std::string> unreduced;
    ReduceOp reduce_op = ReduceOp::kSum;
  };

  Parsed parse() {
    skip_ws();
    Parsed out;
    const size_t save = pos_;
    const std::string_view word = peek_identifier();
    if (word == "P" || word == "PartitionSpec") {
      pos_ += word.size();
      skip_ws();
      if (peek() == '(') {
        ++pos_;
        out.entries = parse_entries(')');
        if (at_keyword() && !out.entries.empty() && !after_comma()) fail("',' before the keyword");
        const bool keywords = parse_keywords(out);
        skip_ws();
        if (keywords && peek() != ')') {  // P(unreduced={'x'}, 'y'), as Python rejects it
          fail("')' (entries come before unreduced= and reduce_op=)");
        }
        expect(')', "',' or ')'");
        skip_ws();
        if (!at_end()) fail("end of text after the closing ')'");
        return out;
      }
      pos_ = save;  // a bare axis named P or PartitionSpec
    }
    out.entries = parse_entries('\0');
    if (!at_end()) {
      if (at_keyword()) fail("an entry (unreduced= and reduce_op= are allowed only inside P(...))");
      fail("',' or end of text");
    }
    return out;
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
    const std::string found = pos >= text_.size() ? "end of text" : character_at(pos);
    // Regression: a long spec was quoted whole (a 150 KB line);
    // the message now quotes the part around the position.
    throw InvalidArgumentError("cannot parse PartitionSpec \"" + excerpt_around(text_, pos) +
                               "\": expected " + expected + " at position " + std::to_string(pos) +
                               ", found " + found);
  }
  // The character at byte `pos` for an error message: quoted when printable ASCII or a whole,
  // valid UTF-8 sequence (so 'é' is not cut in half), else "byte 0xNN". Regression: the
  // message used to hold the first byte of 'é' alone, invalid UTF-8.
  std::string character_at(size_t pos) const {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text_[i]); };
    const unsigned char b = byte(pos);
    size_t len = 0;
    if (b >= 0x20 && b < 0x7f)
      len = 1;
    else if (b >= 0xc2 && b <= 0xdf)
      len = 2;
    else if (b >= 0xe0 && b <= 0xef)
      len = 3;
    else if (b >= 0xf0 && b <= 0xf4)
      len = 4;
    bool valid = len > 0 && pos + len <= text_.size();
    for (size_t i = 1; valid && i < len; ++i) valid = (byte(pos + i) & 0xc0) == 0x80;
    if (b == '\'') return "\"'\"";  // not '''
    if (valid) return "'" + std::string(text_.substr(pos, len)) + "'";
    char hex[16];
    std::snprintf(hex, sizeof hex, "byte 0x%02X", static_cast<unsigned>(b));
    return hex;
  }
  void expect(char c, const std::string& expected) {
    skip_ws();
    if (peek() != c) fail(expected);
    ++pos_;
  }

  /// True when the last non-space character before the cursor is ','.
  bool after_comma() const {
    size_t p = pos_;
    while (p > 0 && std::isspace(static_cast<unsigned char>(text_[p - 1]))) --p;
    return p > 0 && text_[p - 1] == ',';
  }

  /// True at "unreduced =" or "reduce_op =".
  bool at_keyword() const {
    const std::string_view word = peek_identifier();
    if (word != "unreduced" && word != "reduce_op") return false;
    size_t p = pos_ + word.size();
    while (p < text_.size() && std::isspace(static_cast<unsigned char>(text_[p]))) ++p;
    return p < text_.size() && text_[p] == '=';
  }

  /// Keyword arguments after the entries (the ',' before the first was consumed).
  /// True when at least one keyword was parsed.
  bool parse_keywords(Parsed& out) {
    bool seen_unreduced = false, seen_op = false;
    size_t op_at = 0;
    const auto done = [&] {
      // A reduce op names how pending partial values combine; with no unreduced axis there is
      // nothing pending (DTensor's Partial(reduce_op) is a placement of its own, never beside
      // Shard or Replicate alone). Regression: it was accepted and dropped.
      if (seen_op && out.unreduced.empty()) {
        fail_at(op_at,
                "unreduced={...} with at least one axis beside reduce_op= (a reduce op applies "
                "to the pending partial sums over unreduced axes; this spec has none)");
      }
      return seen_unreduced || seen_op;
    };
    while (true) {
      skip_ws();
      if (!at_keyword()) return done();
      const size_t start = pos_;
      const std::string word(peek_identifier());
      pos_ += word.size();
      expect('=', "'='");
      skip_ws();
      if (word == "unreduced") {
        if (seen_unreduced) fail_at(start, "unreduced= at most once");
        seen_unreduced = true;
        expect('{', "'{' opening the set of unreduced axes");
        skip_ws();
        while (peek() != '}') {
          skip_ws();
          out.unreduced.push_back(parse_name());
          skip_ws();
          if (peek() == '}') break;
          expect(',', "',' or '}' in the set of unreduced axes");
          skip_ws();
        }
        ++pos_;
      } else {
        if (seen_op) fail_at(start, "reduce_op= at most once");
        seen_op = true;
        op_at = start;
        const size_t at = pos_;
        const std::string name = parse_name();
        try {
          out.reduce_op = parse_reduce_op(name);
        } catch (const InvalidArgumentError&) {
          fail_at(at, "a reduce op ('sum', 'max', 'min' or 'prod')");
        }
      }
      skip_ws();
      if (peek() != ',') return done();
      ++pos_;
    }
  }

  /// entries up to (not including) `close` ('\0' = end of text) or a keyword argument, trailing
  /// comma allowed.
  std::vector<PartitionSpec::Entry> parse_entries(char close) {
    std::vector<PartitionSpec::Entry> entries;
    skip_ws();
    if (peek() == close) return entries;
    while (true) {
      if (at_keyword()) return entries;
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

PartitionSpec::PartitionSpec(std::vector<Entry> entries, std::vector<std::string> unreduced,
                             ReduceOp reduce_op)
    : PartitionSpec(std::move(entries)) {
  for (const std::string& name : unreduced) {
    if (name.empty() || name.find_first_of("'\"") != std::string::npos) {
      throw InvalidArgumentError("PartitionSpec unreduced axis name <" + abbreviate(name) +
                                 "> is empty or contains a quote character (expected a mesh "
                                 "axis name)");
    }
  }
  std::sort(unreduced.begin(), unreduced.end());
  unreduced_ = std::move(unreduced);
  reduce_op_ = unreduced_.empty() ? ReduceOp::kSum : reduce_op;
}

PartitionSpec PartitionSpec::parse(std::string_view text) {
  SpecParser::Parsed p = SpecParser(text).parse();
  return PartitionSpec(std::move(p.entries), std::move(p.unreduced), p.reduce_op);
}

PartitionSpec PartitionSpec::with_unreduced(std::vector<std::string> unreduced,
                                            ReduceOp reduce_op) const {
  return PartitionSpec(entries_, std::move(unreduced), reduce_op);
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    if (reduce_op_name(op) == name) return op;
  }
  throw InvalidArgumentError("unknown reduce op '" + abbreviate(name) +
                             "' (expected sum, max, min or prod)");
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
  if (!unreduced_.empty()) {
    s += entries_.empty() ? "unreduced={" : ", unreduced={";
    for (size_t i = 0; i < unreduced_.size(); ++i) s += (i ? ", " : "") + quoted(unreduced_[i]);
    s += "}";
    if (reduce_op_ != ReduceOp::kSum)
      s += ", reduce_op='" + std::string(reduce_op_name(reduce_op_)) + "'";
  }
  return s + ")";
}

PartitionSpec PartitionSpec::normalized() const {
  std::vector<Entry> e = entries_;
  while (!e.empty() && e.back().empty()) e.pop_back();
  return PartitionSpec(std::move(e), unreduced_, reduce_op_);
}

}  // namespace vtpu
