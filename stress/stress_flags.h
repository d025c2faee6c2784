// The `vtpu stress` options that need more than one field to check: the --auto-defragment list,
// the comma-separated lists, and which generator and load options a run uses. The command line
// (cli/stress_command.cc) and the Python binding (vtpu.stress.run) share them, so both refuse the
// same inputs with the same messages.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "vtpu/stress/stress_harness.h"

namespace vtpu {

/// "a,b,c" -> {"a", "b", "c"}; "" -> {""} (an empty item is the caller's error to report).
/// Pure function.
std::vector<std::string> split_comma_list(const std::string& text);

/// --auto-defragment: a comma-separated list of on, growth, off (both = on,off), each at most
/// once. Throws InvalidArgumentError naming the text and the bad or repeated mode. Pure function.
std::vector<DefragMode> parse_defrag_modes(const std::string& text);

/// Throws InvalidArgumentError for the first option that `given` says was set ("--live", as
/// `vtpu stress` spells it) but that a run with `o` would not use: a generator option with a
/// trace, a workload's knob with another workload, a load knob with the load off (o.under_load)
/// or on one core, --capacity-search-max with the search off (o.search_capacity). The message
/// names the option and what makes it inapplicable; an option is never silently ignored.
void check_stress_options_apply(const StressOptions& o,
                                const std::function<bool(std::string_view flag)>& given);

}  // namespace vtpu
