// The message of a command-line parse error, in vtpu's words where CLI11's trip users up.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace vtpu {

/// The text of `e` for "vtpu: usage error: TEXT". CLI11's wording made plain where a user trips
/// on it: an option given twice ("--cores given 2 times (expected at most once)" for "--cores: At
/// Most 1 required but received 2"); unexpected arguments in command-line order (CLI11 lists them
/// last first), with a hint for the mistakes users make most: --mesh to `train mlp|fsdp`,
/// --cores to `plan`, and a file name after a --json that prints on stdout. `argc` and `argv` are
/// main's. Thread-safe.
std::string parse_error_text(const CLI::ParseError& e, int argc, char** argv);

}  // namespace vtpu
