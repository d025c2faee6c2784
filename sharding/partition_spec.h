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
//   wrapped := ("P" | "PartitionSpec") "(" [entries] ["," keywords] ")" | ... "(" keywords ")"
//   entries := entry ("," entry)* [","]          (an empty string is P())
//   keywords:= keyword ("," keyword)* [","]      (only inside P(...), after the entries)
//   keyword := "unreduced" "=" "{" [name ("," name)* [","]] "}"
//            | "reduce_op" "=" ("'sum'" | "'max'" | "'min'" | "'prod'")   (quotes optional)
//   entry   := "None" | name | "(" [name ("," name)* [","]] ")"
//   name    := 'text' | "text" | identifier       (identifier: [A-Za-z_][A-Za-z0-9_]*, not None)
// Whitespace may appear between tokens. A parenthesised group at top level is always one tuple
// entry: "('x', 'y')" is P(('x', 'y')), not P('x', 'y'); write "P('x', 'y')" or "x, y" for that.
// An empty tuple "()" is None, and a 1-tuple ('x',) is the same entry as 'x'. Quoted names have no
// escapes. to_string() prints JAX's style: "P('x', None, ('x', 'y'))", then
// ", unreduced={'y'}" when there are unreduced axes (sorted by name) and ", reduce_op='max'" when
// the op is not sum.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vtpu/collectives/types.h"

namespace vtpu {

/// An immutable list of per-dimension entries. Thread-safe (immutable).
///
/// C++ construction:
///   PartitionSpec{}                    P()
///   PartitionSpec({{"x"}, {"y"}})      P('x', 'y')
///   PartitionSpec({{}, {"y"}})         P(None, 'y')
///   PartitionSpec({{"x", "y"}})        P(('x', 'y'))
///   PartitionSpec::parse("P('x', None)")
///   P("x", None, {"x", "y"})          P('x', None, ('x', 'y'))  (the builder below)
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
  /// With partial (unreduced) mesh axes and their reduction. `unreduced` is a set: it is stored
  /// sorted by name (so P(unreduced={'y','x'}) == P(unreduced={'x','y'})); a name listed twice is
  /// kept twice, so that NamedSharding can reject it. Throws like the form above for a bad name.
  PartitionSpec(std::vector<Entry> entries, std::vector<std::string> unreduced,
                ReduceOp reduce_op = ReduceOp::kSum);
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
  /// Every axis name the entries use, in order of appearance (duplicates kept; unreduced axes
  /// are not included).
  std::vector<std::string> axes() const;
  /// Partial (unreduced) mesh axes, sorted by name; empty for an ordinary (reduced) array.
  const std::vector<std::string>& unreduced() const { return unreduced_; }
  /// How the addends over unreduced() combine (sum unless set; meaningless without unreduced
  /// axes, and then normalized to sum).
  ReduceOp reduce_op() const { return reduce_op_; }
  bool is_partial() const { return !unreduced_.empty(); }
  /// The same entries with other unreduced axes / op.
  PartitionSpec with_unreduced(std::vector<std::string> unreduced,
                               ReduceOp reduce_op = ReduceOp::kSum) const;

  /// JAX style without the 1-tuple comma: "P()", "P('x')", "P('x', None)", "P(('x', 'y'))".
  std::string to_string() const;

  /// Entry-by-entry equality. P('x') and P('x', None) differ here (as in JAX) though they shard
  /// the same way; compare normalized() specs to ignore trailing Nones.
  friend bool operator==(const PartitionSpec& a, const PartitionSpec& b) {
    return a.entries_ == b.entries_ && a.unreduced_ == b.unreduced_ && a.reduce_op_ == b.reduce_op_;
  }
  /// The spec without trailing None entries (unreduced axes kept).
  PartitionSpec normalized() const;

 private:
  std::vector<Entry> entries_;
  std::vector<std::string> unreduced_;  // sorted by name
  ReduceOp reduce_op_ = ReduceOp::kSum;
};

/// JAX's None in a PartitionSpec entry: P("data", None) leaves dimension 1 unsplit.
struct NoneType {
  explicit constexpr NoneType(int) {}
};
inline constexpr NoneType None{0};

/// One argument of P(): a name ("x"), None, or a braced tuple of names ({"x", "y"}). Implicit
/// conversions only, so that P("data", None, {"x", "y"}) reads as in JAX.
class PEntry {
 public:
  PEntry(NoneType) {}                                                  // NOLINT
  PEntry(const char* name) : entry_{name} {}                           // NOLINT
  PEntry(std::string name) : entry_{std::move(name)} {}                // NOLINT
  PEntry(std::initializer_list<std::string> names) : entry_(names) {}  // NOLINT
  const PartitionSpec::Entry& entry() const { return entry_; }
  bool present() const { return present_; }
  /// The default of P's unused parameters.
  static PEntry absent() {
    PEntry e(None);
    e.present_ = false;
    return e;
  }

 private:
  PartitionSpec::Entry entry_;
  bool present_ = true;
};

/// jax.sharding.PartitionSpec's short form: P("data", None, {"x", "y"}) is P('data', None,
/// ('x', 'y')); P() replicates. Up to 8 entries (the collectives' maximum rank). Throws like the
/// PartitionSpec constructor.
inline PartitionSpec P(PEntry e0 = PEntry::absent(), PEntry e1 = PEntry::absent(),
                       PEntry e2 = PEntry::absent(), PEntry e3 = PEntry::absent(),
                       PEntry e4 = PEntry::absent(), PEntry e5 = PEntry::absent(),
                       PEntry e6 = PEntry::absent(), PEntry e7 = PEntry::absent()) {
  std::vector<PartitionSpec::Entry> entries;
  for (const PEntry* e : {&e0, &e1, &e2, &e3, &e4, &e5, &e6, &e7}) {
    if (!e->present()) break;
    entries.push_back(e->entry());
  }
  return PartitionSpec(std::move(entries));
}

/// Parses "sum", "max", "min", "prod" (reduce_op_name's output). Throws InvalidArgumentError
/// naming the text and the valid names.
ReduceOp parse_reduce_op(std::string_view name);

}  // namespace vtpu
