// Up-front checks of output-file options, shared by the `vtpu` subcommands.
#pragma once

#include <string>
#include <vector>

namespace vtpu {

/// Checks before a run that `path` (the value of the option `flag`, e.g. "--json") names a file
/// that can be written: its directory exists, it is not itself a directory, and opening it for
/// writing succeeds (a new file is created and removed again; an existing one is opened for
/// append, not truncated) and so does a write of zero bytes to it (which changes nothing, but fails
/// on a device that refuses every write: /dev/full), so that a typo, a permission problem or a
/// full device fails at once rather than after a long run. An empty path is accepted (the option
/// was not given; a caller that sees the option given with an empty value rejects it itself).
/// Throws InvalidArgumentError naming the flag and the path (a usage error); a file the system
/// refuses for a full device or a permission is ResourceExhaustedError or PermissionDeniedError
/// "<flag> '<path>' cannot be written: <the system's reason>" (an error of the run). Thread-safe.
void check_output_path(const char* flag, const std::string& path);

/// Checks that two output options name different files: `path_a` (the value of `flag_a`) and
/// `path_b` (of `flag_b`) are compared as the file system resolves them (weakly_canonical, and
/// std::filesystem::equivalent for hard links); an empty path (option not given) never clashes.
/// Throws InvalidArgumentError "<flag_a> '<path_a>' and <flag_b> '<path_b>' are the same file
/// (<why>; give two paths)", where `why` says what would be lost, e.g. "the HTML page would
/// overwrite the JSON". Thread-safe.
/// (`vtpu stress --json --html`, `vtpu train mlp --memory-profile/--memory-snapshot` once wrote
/// both outputs to one file.)
void check_distinct_outputs(const char* flag_a, const std::string& path_a, const char* flag_b,
                            const std::string& path_b, const std::string& why);

/// One file option of a command: its name as the user gives it ("--data", or for a positional
/// argument a phrase such as "the model file") and its value (empty: not given).
struct FileOption {
  const char* flag;
  std::string path;
};

/// Checks that no output option names the same file as an input option: each (output, input)
/// pair is compared with std::filesystem::equivalent when both files exist (so a symbolic or hard
/// link to the input is caught) and by weakly_canonical path otherwise; an empty path never
/// clashes. Throws InvalidArgumentError "<output flag> '<path>' and <input flag> '<path>' are the
/// same file (writing <output flag> would replace the input; give another output path)" for the
/// first clash, before anything is read or written; report it with check_usage (exit 2).
/// Thread-safe. Without it, `vtpu plan m.json --emit m.json`
/// replaced the model, `train mlp --data D --memory-snapshot D` the data set, exit 0.
void check_outputs_not_inputs(const std::vector<FileOption>& outputs,
                              const std::vector<FileOption>& inputs);

/// Writes `text` to `path` (the value of the option `flag`, e.g. "--emit"), replacing the file
/// atomically (common/atomic_file.h): a write that fails or is killed leaves the old file as it
/// was and no temporary behind. Throws the errors of throw_file_write_error (common/error.h),
/// "cannot write <flag> output to '<path>': <the system's reason>": ResourceExhaustedError for a
/// full disk or /dev/full, PermissionDeniedError, NotFoundError. Thread-safe for distinct paths.
/// Truncating first would lose the old file on a failed write, and an unchecked flush once let
/// `vtpu plan --emit /dev/full` print "wrote /dev/full" and exit 0.
void write_output_file(const char* flag, const std::string& path, const std::string& text);

}  // namespace vtpu
