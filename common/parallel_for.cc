#include "vtpu/common/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "vtpu/common/host.h"

namespace vtpu {

void parallel_for_index(size_t n, const std::function<void(size_t)>& fn, int max_threads) {
  if (n == 0) return;
  const auto limit = static_cast<size_t>(max_threads > 0 ? max_threads : usable_cpus());
  const size_t num_threads = std::min(n, limit);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::exception_ptr first_error;  // GUARDED_BY(error_mu)
  auto work = [&] {
    try {
      for (size_t i = next.fetch_add(1); i < n && !failed.load(); i = next.fetch_add(1)) fn(i);
    } catch (...) {
      std::lock_guard lock(error_mu);
      if (!first_error) first_error = std::current_exception();
      failed.store(true);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(num_threads - 1);
  for (size_t t = 1; t < num_threads; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace vtpu
