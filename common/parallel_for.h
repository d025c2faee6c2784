// Index-parallel loops on plain std::threads: fn(i) for every i in [0, n), the caller's thread
// taking part. The workers are joined before the call returns, so everything fn did happens-
// before the return in a way ThreadSanitizer sees. (oneTBB's parallel_for and parallel_reduce
// signal completion inside libtbb, which Debian ships uninstrumented: TSan then reports the
// caller's later use of memory the workers touched, with the workers' stacks often lost, so no
// suppression can match it reliably.) Meant for a few coarse tasks per call: it starts its
// threads each time.
#pragma once

#include <cstddef>
#include <functional>

namespace vtpu {

/// Runs fn(i) for every i in [0, n) on min(n, max_threads) threads (max_threads 0: usable_cpus(),
/// common/host.h), each taking the next index from a shared counter. Returns when every call has
/// returned; if any threw, the indices not yet started are skipped and the first exception is
/// rethrown. fn must be safe to call concurrently for distinct indices. Thread-safe.
void parallel_for_index(size_t n, const std::function<void(size_t)>& fn, int max_threads = 0);

}  // namespace vtpu
