#include "vtpu/planner/strategy_labels.h"

namespace vtpu::planner_dp {

void keep_smallest(std::vector<Label>& labels) {
  const auto lex_le = [](const Label& a, const Label& b) {
    return a.add_bytes < b.add_bytes || (a.add_bytes == b.add_bytes && a.time <= b.time);
  };
  std::vector<size_t> best;  // per distinct unit_key, its first lexicographically smallest label
  for (size_t k = 0; k < labels.size(); ++k) {
    const auto it = std::find_if(best.begin(), best.end(), [&](size_t b) {
      return unit_key(labels[b]) == unit_key(labels[k]);
    });
    if (it == best.end()) {
      best.push_back(k);
    } else if (!lex_le(labels[*it], labels[k])) {
      *it = k;
    }
  }
  std::vector<char> kept(labels.size(), 0);
  for (size_t b : best) {
    const bool beaten = std::any_of(best.begin(), best.end(), [&](size_t a) {
      return a != b && key_le(unit_key(labels[a]), unit_key(labels[b])) &&
             lex_le(labels[a], labels[b]);
    });
    if (!beaten) kept[b] = 1;
  }
  size_t w = 0;
  for (size_t k = 0; k < labels.size(); ++k)
    if (kept[k]) labels[w++] = labels[k];
  labels.resize(w);
}

}  // namespace vtpu::planner_dp
