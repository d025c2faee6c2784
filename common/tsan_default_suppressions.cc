// ThreadSanitizer suppressions, linked into every executable of a -DVTPU_SANITIZE=thread build
// (TSan calls __tsan_default_suppressions at start-up). Each entry is a false positive caused by
// a library that Debian ships without TSan instrumentation, so its synchronization is invisible:
//
// - oneTBB (libtbb.so.12): a parallel_for's completion is signalled inside libtbb, so the
//   caller's later use of stack and heap that worker threads touched in inlined TBB header code
//   (fold_tree, the partitioner) looks unsynchronized.
//   Those suppressions match only when a report's stacks contain a TBB frame; with TSan's default
//   history the worker's stack is often "[failed to restore the stack]" (seen on
//   FragmentationCheckTest, two tbb::parallel_reduce calls reusing the same stack slots), so
//   __tsan_default_options below keeps the largest history (history_size=7), which restores it.
// - libstdc++'s exception_ptr: its reference count lives in libstdc++.so, so a core dropping the
//   last reference after the host read the exception looks like a race (ArangoDB and ex-actor
//   suppress it the same way). When the release is tail-called only the destructor is named.
extern "C" const char* __tsan_default_suppressions() {
  return "race:tbb::detail::\n"
         "race:libtbb.so\n"
         "race:__exception_ptr\n"
         "race:std::logic_error::~logic_error\n"
         "race:std::runtime_error::~runtime_error\n";
}

// Default TSan options of a -DVTPU_SANITIZE=thread build (TSAN_OPTIONS still overrides them).
extern "C" const char* __tsan_default_options() { return "history_size=7"; }
