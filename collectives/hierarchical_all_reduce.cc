#include "vtpu/collectives/hierarchical_all_reduce.h"

#include <algorithm>

namespace vtpu {

namespace {

std::string placement_text(std::span<const int> rank_process) {
  std::string s = "[";
  for (size_t i = 0; i < rank_process.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(rank_process[i]);
  }
  return s + "]";
}

}  // namespace

ProcessRuns ProcessRuns::of(std::span<const int> rank_process, int nranks) {
  ProcessRuns runs;
  runs.ranks_per_process = nranks;
  if (rank_process.empty()) return runs;
  std::vector<int> run_process;  // process of each run, in rank order
  std::vector<int> run_length;
  for (size_t r = 0; r < rank_process.size(); ++r) {
    if (r > 0 && rank_process[r] == rank_process[r - 1]) {
      ++run_length.back();
      continue;
    }
    if (std::find(run_process.begin(), run_process.end(), rank_process[r]) != run_process.end()) {
      runs.error = "rank placement " + placement_text(rank_process) + " puts process " +
                   std::to_string(rank_process[r]) +
                   "'s ranks in more than one run (the hierarchical all_reduce expected each "
                   "process's ranks contiguous)";
      return runs;
    }
    run_process.push_back(rank_process[r]);
    run_length.push_back(1);
  }
  for (size_t k = 1; k < run_length.size(); ++k) {
    if (run_length[k] != run_length[0]) {
      runs.error = "rank placement " + placement_text(rank_process) + " gives process " +
                   std::to_string(run_process[0]) + " " + std::to_string(run_length[0]) +
                   " ranks but process " + std::to_string(run_process[k]) + " " +
                   std::to_string(run_length[k]) +
                   " (the hierarchical all_reduce expected the same number in every process)";
      return runs;
    }
  }
  runs.num_processes = static_cast<int>(run_length.size());
  runs.ranks_per_process = run_length[0];
  return runs;
}

}  // namespace vtpu
