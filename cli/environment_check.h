// The environment variables `vtpu` reads, checked once before anything else runs.
//
//   VTPU_COLLECTIVE_TIMEOUT_MS  every collective wait, whole milliseconds (runtime_options.h)
//   VTPU_PIN_THREADS            auto | on | off (runtime_options.h)
//   VTPU_DATA_DIR               where shipped data files are looked up first (common/data_dir.h)
//
// A bad value is a usage error (exit 2) naming the variable and its value, whatever the command:
// the runtime options read the first two as their defaults, so a bad value used to throw while
// the commands were being set up, before main could catch it ("terminate called", exit 134).
#pragma once

namespace vtpu {

/// Checks every variable above that is set and not empty. Throws InvalidArgumentError
/// "<NAME> is '<value>' (expected ...)" for the first bad one. Thread-safe as getenv.
void check_environment_variables();

}  // namespace vtpu
