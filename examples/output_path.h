// Up-front checks of output-file options, shared by the `vtpu` subcommands.
#pragma once

#include <string>

namespace vtpu::examples {

/// Checks before a run that `path` (the value of the option `flag`, e.g. "--json") names a file
/// that can be created: its directory exists and it is not itself a directory, so that a typo in
/// an output path fails at once rather than after a long run. An empty path is accepted (the
/// option was not given). Throws InvalidArgumentError naming the flag and the path. Thread-safe.
void check_output_path(const char* flag, const std::string& path);

}  // namespace vtpu::examples
