#include "vtpu/stress/stress_flags.h"

#include <algorithm>

#include "vtpu/common/error.h"

namespace vtpu {
namespace {

// Options that only some runs use: `applies` is false when the run would not use `flag`, and
// `context` names the option that makes it so ("--load off").
struct OptionScope {
  const char* flag;
  const char* applies_to;  // "applies only to ..." / what it does
  bool applies;
  std::string context;
};

}  // namespace

std::vector<std::string> split_comma_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::vector<DefragMode> parse_defrag_modes(const std::string& text) {
  std::vector<DefragMode> modes;
  for (const std::string& word : split_comma_list(text)) {
    std::vector<DefragMode> add;
    if (word == "on") {
      add = {DefragMode::kOnFailure};
    } else if (word == "growth") {
      add = {DefragMode::kBeforeGrowth};
    } else if (word == "off") {
      add = {DefragMode::kOff};
    } else if (word == "both") {
      add = {DefragMode::kOnFailure, DefragMode::kOff};
    } else {
      throw InvalidArgumentError("--auto-defragment '" + text + "': unknown mode '" + word +
                                 "' (expected a comma-separated list of on, growth, off, both)");
    }
    for (DefragMode m : add) {
      if (std::find(modes.begin(), modes.end(), m) != modes.end())
        throw InvalidArgumentError("--auto-defragment '" + text + "' gives mode '" +
                                   defrag_mode_flag(m) + "' twice (each mode runs once)");
      modes.push_back(m);
    }
  }
  return modes;
}

void check_stress_options_apply(const StressOptions& o,
                                const std::function<bool(std::string_view flag)>& given) {
  const bool trace = !o.trace_path.empty();
  const std::string& w = o.workload.name;
  const bool sizes = w == "uniform" || w == "lognormal" || w == "bimodal";
  const bool layers = w == "training_step" || w == "variable_batch";
  const bool kv = w == "kv_cache";
  const bool load = o.under_load;
  const bool search = o.search_capacity;
  const std::string workload = "--workload " + w;
  const std::string load_context = !load ? "--load off" : "--cores 1";
  const char* kGenerated = "sets up a generated workload and";
  const char* kSizes = "applies only to --workload uniform, lognormal and bimodal and";
  const char* kLayers = "applies only to --workload training_step and variable_batch and";
  const char* kKv = "applies only to --workload kv_cache and";
  const char* kLoad = "sets up the load that runs alongside (--load on) and";
  const char* kCross = "hands frees to another core (--load on, --cores >= 2) and";
  const OptionScope scopes[] = {
      {"--workload", kGenerated, !trace, "--trace"},
      {"--events", kGenerated, !trace, "--trace"},
      {"--seed", kGenerated, !trace, "--trace"},
      {"--layers", trace ? kGenerated : kLayers, !trace && layers, trace ? "--trace" : workload},
      {"--activation-bytes", trace ? kGenerated : kLayers, !trace && layers,
       trace ? "--trace" : workload},
      {"--weight-bytes", trace ? kGenerated : kLayers, !trace && layers,
       trace ? "--trace" : workload},
      {"--live", trace ? kGenerated : kSizes, !trace && sizes, trace ? "--trace" : workload},
      {"--max-requests", trace ? kGenerated : kKv, !trace && kv, trace ? "--trace" : workload},
      {"--kv-block-bytes", trace ? kGenerated : kKv, !trace && kv, trace ? "--trace" : workload},
      {"--max-blocks", trace ? kGenerated : kKv, !trace && kv, trace ? "--trace" : workload},
      {"--collective-rounds", kLoad, load, "--load off"},
      {"--bucket-bytes", kLoad, load, "--load off"},
      {"--cross-core-frees", kCross, load && o.cores > 1, load_context},
      {"--cross-core-free-lag", kCross, load && o.cores > 1, load_context},
      {"--capacity-search-max", "bounds the capacity search and", search, "--capacity-search off"},
  };
  for (const OptionScope& s : scopes) {
    if (s.applies || !given(s.flag)) continue;
    std::string hint = s.context == "--trace" ? "a trace brings its own events; " : "";
    throw InvalidArgumentError(std::string(s.flag) + " " + s.applies_to + " has no effect with " +
                               s.context + " (" + hint + "remove " + s.flag + ")");
  }
}

}  // namespace vtpu
