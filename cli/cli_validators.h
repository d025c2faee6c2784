// CLI11 validators shared by the `vtpu` subcommands, so that every command words the same
// mistake the same way.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace vtpu {

/// A validator named `name` that runs `parse` on the text and reports the message of the
/// vtpu::Error it throws (the text is valid when it throws nothing). CLI11 puts the option's name
/// before the message ("--seed: ..."), so a message that starts with `flag` and a space (parse
/// functions that are also called outside CLI11 name their option) loses that prefix, and the
/// option is named once (not "--auto-defragment: --auto-defragment 'on,on' ...").
CLI::Validator parse_validator(std::function<void(const std::string&)> parse, std::string name,
                               std::string flag = {});

/// Prints "vtpu: usage error: MESSAGE" and the pointer to --help to stderr, as CLI11's own usage
/// errors read, and returns 2, the exit code of a usage error.
int report_usage_error(const std::string& message);

/// Runs `parse` (which reads command-line values); an InvalidArgumentError it throws is a usage
/// error: its message is printed to stderr as "vtpu: usage error: MESSAGE", as CLI11's are, and
/// the result is false (the command then exits 2). Other errors pass through. For checks that
/// need several options at once (--axes against --mesh), which a per-option validator cannot do.
bool check_usage(const std::function<void()>& parse);

/// Checks --micro-batches `micro_batches` of `vtpu train mlp` against the rows of one data shard:
/// it must divide global_batch / data_shards. `shard` names a shard ("core", "data shard") and
/// `over` the group the batch is split over ("4 cores", "the 2-way data axis"). Throws
/// InvalidArgumentError (report it with check_usage: exit 2) "--micro-batches 3 does not divide
/// the 32 rows per data shard (global batch 64 over the 2-way data axis)". A global batch that
/// data_shards does not divide is left to MlpConfig::validate. It names the flag and the data
/// shards as such: a dp+tp plan's 2 data shards are not "2 cores".
void check_micro_batches(int64_t micro_batches, int64_t global_batch, int64_t data_shards,
                         const std::string& shard, const std::string& over);

/// A byte size with an optional K/M/G/T suffix (powers of 1024), as parse_bytes (common/units.h)
/// reads it; the error is parse_bytes' message, which names the text and what was expected.
CLI::Validator size_validator();

/// An output file path that is not empty ("--emit: expected a file path, got an empty string"):
/// an option given with an empty value is a usage error, not the option left out
/// (`bench collectives --calibrate ""` would run a plain sweep, `plan --emit ""` write nothing).
CLI::Validator nonempty_path_validator();

/// An array shape "8,8,3": comma-separated decimal integers in 0..2^62 (NamedSharding's limit),
/// no sign, suffix or exponent; leading zeros are decimal ("08" is 8). Throws
/// InvalidArgumentError "dimension 'abc' is not an integer in 0..2^62", or for an empty entry
/// "'8,,3' has an empty dimension 1 (0-based) (expected comma-separated integers ...)".
std::vector<int64_t> parse_dimension_list(const std::string& text);
/// parse_dimension_list as a CLI11 check: a usage error (exit 2) with its message after the
/// option's name ("--shape: dimension 'abc' is not an integer in 0..2^62").
CLI::Validator dimension_list_validator();

/// A --hardware value: a built-in profile name (HardwareProfile::builtin_names()) or a path ending
/// in .json (read later: a missing or bad file is an error of the run, exit 1). Anything else is a
/// usage error (exit 2) naming the value and listing the names ("unknown hardware profile 'v6e'
/// (expected one of: this_machine, v4, v5e, v5p, or a path ending in .json)").
CLI::Validator hardware_validator();

/// The problem with the learning rate `text`, or "" when it is valid: the whole text a number
/// whose float is normal and > 0 (FLT_MIN..FLT_MAX; the trainers keep the rate as a float, so
/// 1e-320 would be 0 and 1e-40 a rate without its digits). "learning rate '<text>' (expected a
/// normal number > 0, 1.17549e-38..3.40282e+38)".
std::string learning_rate_problem(const std::string& text);
/// learning_rate_problem as a CLI11 check (a usage error, exit 2).
CLI::Validator learning_rate_validator();

/// The least --hbm-bytes of a training command: the runtime's least HBM per core
/// (RuntimeOptions::validate), which 0 or 100 would fail only once the run had started, exit 1.
inline constexpr uint64_t kMinHbmBytesFlag = 256;
/// --hbm-bytes of the training commands: a byte size (size_validator) of at least
/// kMinHbmBytesFlag, a usage error (exit 2) otherwise.
CLI::Validator hbm_bytes_validator();

/// A seed: decimal digits only, 0 .. 2^64 - 1 (CLI11's own uint64_t parsing wraps "-1" and
/// saturates past 2^64 - 1, which would silently use a seed the user did not type). Throws
/// InvalidArgumentError naming the text.
uint64_t parse_seed(const std::string& text);
CLI::Validator seed_validator();

}  // namespace vtpu
