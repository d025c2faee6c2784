// PartitionSpec: how each dimension of an array is split over mesh axes, after
// jax.sharding.PartitionSpec (P).
//
// One entry per array dimension, from dimension 0:
//   None          the dimension is not split (every device holds all of it);
//   'x'           split over mesh axis x;
//   ('x', 'y')    split over x and y together, x major: the shard index is i_x * |y| + i_y.
// Dimensions past the last entry are not split, so P('x') on a 2-d array means P('x', None), and
// P() replicates the array on every device. Mesh axes that no entry names replicate the array.
//
// Text form (parse() and to_string()):
//   spec    := wrapped | entries
//   wrapped := ("P" | "PartitionSpec") "(" [entries] ")"
//   entries := entry ("," entry)* [","]          (an empty string is P())
//   entry   := "None" | name | "(" [name ("," name)* [","]] ")"
//   name    := 'text' | "text" | identifier       (identifier: [A-Za-z_][A-Za-z0-9_]*, not None)
// Whitespace may appear between tokens. A parenthesised group at top level is always one tuple
// entry: "('x', 'y')" is P(('x', 'y')), not P('x', 'y'); write "P('x', 'y')" or "x, y" for that.
// An empty tuple "()" is None, and a 1-tuple ('x',) is the same entry as 'x'. Quoted names have no
// escapes. to_string() prints JAX's style: "P('x', None, ('x', 'y'))".
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace vtpu {

/// An immutable list of per-dimension entries. Thread-safe (immutable).
///
/// C++ construction:
///   PartitionSpec{}                    P()
///   PartitionSpec({{"x"}, {"y"}})      P('x', 'y')
///   PartitionSpec({{}, {"y"}})         P(None, 'y')
///   PartitionSpec({{"x", "y"}})        P(('x', 'y'))
///   PartitionSpec::parse("P('x', None)")
class PartitionSpec {
 public:
  /// Axis names of one dimension, major to minor. Empty means None (not split).
  using Entry = std::vector<std::string>;

  /// P(): no entries, fully replicated.
  PartitionSpec() = default;
  /// One entry per dimension. Throws InvalidArgumentError for an empty axis name or one that
  /// contains a quote character (' or "), which could not be printed and parsed back. Repeated
  /// axes are accepted here and rejected by NamedSharding, as in JAX.
  explicit PartitionSpec(std::vector<Entry> entries);
  /// The same from a braced list, so that PartitionSpec({{"x", "y"}}) means one tuple entry
  /// (with only the vector form it would be ambiguous with a copy from {"x", "y"}). Implicit, so
  /// that a NamedSharding can take {{"x"}, {}} directly.
  PartitionSpec(std::initializer_list<Entry> entries)
      : PartitionSpec(std::vector<Entry>(entries)) {}

  /// Parses the text form in the header comment. Throws InvalidArgumentError quoting the text,
  /// the 0-based character position and what was expected there.
  static PartitionSpec parse(std::string_view text);

  /// Number of entries (<= the rank of any array it shards).
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }
  /// Entry `dim`, or an empty (None) entry for dim >= size(): dimensions past the end are not
  /// split.
  const Entry& entry(size_t dim) const;
  /// Every axis name the spec uses, in order of appearance (duplicates kept).
  std::vector<std::string> axes() const;

  /// JAX style without the 1-tuple comma: "P()", "P('x')", "P('x', None)", "P(('x', 'y'))".
  std::string to_string() const;

  /// Entry-by-entry equality. P('x') and P('x', None) differ here (as in JAX) though they shard
  /// the same way; compare normalized() specs to ignore trailing Nones.
  friend bool operator==(const PartitionSpec& a, const PartitionSpec& b) {
    return a.entries_ == b.entries_;
  }
  /// The spec without trailing None entries.
  PartitionSpec normalized() const;

 private:
  std::vector<Entry> entries_;
};

}  // namespace vtpu
