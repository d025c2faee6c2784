// ThreadSanitizer suppressions, linked into every executable of a -DVTPU_SANITIZE=thread build
// (TSan calls __tsan_default_suppressions at start-up). Each entry is a false positive caused by
// a library that Debian ships without TSan instrumentation, so its synchronization is invisible,
// and each names only that library's own functions, never a frame of vtpu's code:
//
// - libstdc++'s exception_ptr: its reference count lives in libstdc++.so, so a core dropping the
//   last reference after the host read the exception looks like a race (ArangoDB and ex-actor
//   suppress it the same way). When the release is tail-called only the destructor is named.
//
// vtpu runs no oneTBB algorithm: their completion is signalled inside libtbb, and the reports it
// caused (with the workers' stacks often lost) matched no suppression reliably. Parallel loops use
// common/parallel_for.h, whose joined std::threads TSan sees.
extern "C" const char* __tsan_default_suppressions() {
  return "race:__exception_ptr\n"
         "race:std::logic_error::~logic_error\n"
         "race:std::runtime_error::~runtime_error\n";
}

// Default TSan options of a -DVTPU_SANITIZE=thread build (TSAN_OPTIONS still overrides them):
// the largest history, so that a report keeps both stacks of a race in a long test.
extern "C" const char* __tsan_default_options() { return "history_size=7"; }
