// The environment variables every command reads for its runtime options' defaults:
// $VTPU_COLLECTIVE_TIMEOUT_MS and $VTPU_PIN_THREADS (RuntimeOptions). The input up to its first
// NUL is the value of both.
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_input.h"
#include "vtpu/runtime/runtime_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string value(reinterpret_cast<const char*>(data), size);  // setenv stops at a NUL
  ::setenv("VTPU_COLLECTIVE_TIMEOUT_MS", value.c_str(), 1);
  ::setenv("VTPU_PIN_THREADS", value.c_str(), 1);
  const auto timeout = vtpu::fuzz::accept_or_refuse(
      [] { return vtpu::RuntimeOptions::collective_timeout_from_env(); });
  if (timeout && *timeout) {
    vtpu::fuzz::check(**timeout >= std::chrono::milliseconds(1) &&
                          **timeout <= vtpu::RuntimeOptions::kMaxCollectiveTimeout,
                      "timeout out of range");
  }
  vtpu::fuzz::refuse_cleanly([] { vtpu::RuntimeOptions::default_pin_threads(); });
  return 0;
}
