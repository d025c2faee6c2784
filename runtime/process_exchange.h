// Host-side exchanges between the processes of a run (runtime/process_group.h) for what every
// process needs whole: per-core figures (HBM stats, collective stats), verdicts, small arrays.
// Every process calls each exchange in the same order, as it calls every collective; with one
// process they copy and exchange nothing.
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/runtime/process_group.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {

/// Every process's `mine`, concatenated in process order (JAX's process_allgather of a flat
/// array). T must be trivially copyable. Throws InternalError when a process sent a partial
/// element, and as ProcessGroup::all_gather.
template <typename T>
std::vector<T> all_gather_values(ProcessGroup& group, std::span<const T> mine) {
  static_assert(std::is_trivially_copyable_v<T>, "all_gather_values sends raw bytes");
  if (group.process_count() == 1) return {mine.begin(), mine.end()};
  const std::vector<std::vector<std::byte>> parts = group.all_gather(std::as_bytes(mine));
  std::vector<T> out;
  for (size_t p = 0; p < parts.size(); ++p) {
    if (parts[p].size() % sizeof(T) != 0) {
      throw InternalError("process " + std::to_string(p) + " sent " +
                          std::to_string(parts[p].size()) + " bytes (expected a multiple of " +
                          std::to_string(sizeof(T)) + ")");
    }
    const size_t n = parts[p].size() / sizeof(T);
    out.resize(out.size() + n);
    if (n > 0) std::memcpy(out.data() + out.size() - n, parts[p].data(), parts[p].size());
  }
  return out;
}

/// Every core's figure, in core order: `of_local_core(c)` for each core c of this process, the
/// other processes' from theirs (process p hosts cores [p K, (p + 1) K), so process order is core
/// order). T must be trivially copyable. Throws as all_gather_values.
template <typename Fn>
auto all_gather_per_core(const Runtime& runtime, Fn&& of_local_core) {
  using T = std::decay_t<decltype(of_local_core(0))>;
  std::vector<T> mine;
  for (int c : runtime.local_core_ids()) mine.push_back(of_local_core(c));
  return all_gather_values(runtime.process_group(), std::span<const T>(mine));
}

/// Every process's `mine`, indexed by process. Throws as ProcessGroup::all_gather.
inline std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& mine) {
  if (group.process_count() == 1) return {mine};
  const std::vector<std::vector<std::byte>> parts =
      group.all_gather(std::as_bytes(std::span<const char>(mine)));
  std::vector<std::string> out;
  for (const std::vector<std::byte>& p : parts) {
    out.emplace_back(reinterpret_cast<const char*>(p.data()), p.size());
  }
  return out;
}

}  // namespace vtpu
