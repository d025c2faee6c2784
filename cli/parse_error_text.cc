#include "vtpu/cli/parse_error_text.h"

#include <regex>
#include <string>
#include <vector>

#include "vtpu/common/strings.h"

namespace vtpu {

namespace {

/// CLI11's list of unexpected words, last first ("2x4 --mesh"), in command-line order. The list
/// is the reverse of a subsequence of argv, so take the words of argv, first to last, that the
/// list ends with. `text` unchanged when it is not such a list.
std::string extras_in_command_line_order(const std::string& text, int argc, char** argv) {
  for (const std::string lead : {"The following arguments were not expected: ",
                                 "The following argument was not expected: "}) {
    if (!text.starts_with(lead)) continue;
    std::string rest = text.substr(lead.size());
    std::vector<std::string> words;
    for (int i = 1; i < argc && !rest.empty(); ++i) {
      const std::string word = argv[i];
      if (word.empty() || !rest.ends_with(word)) continue;
      if (rest.size() == word.size()) {
        rest.clear();
      } else if (rest[rest.size() - word.size() - 1] == ' ') {
        rest.resize(rest.size() - word.size() - 1);
      } else {
        continue;
      }
      words.push_back(word);
    }
    if (rest.empty()) return lead + join(words, " ");
  }
  return text;
}

/// What to give instead, for the unexpected arguments users give most: a mesh to the digits
/// trainers (as train transformer and vtpu plan take), a core count to vtpu plan, and a file name
/// after --json (as `vtpu stress --json FILE` takes). "" when none applies.
std::string extras_hint(const std::string& text, int argc, char** argv) {
  const auto given = [&](const std::string& flag) {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == flag || a.starts_with(flag + "=")) return true;
    }
    return false;
  };
  const std::string command = argc > 2 ? std::string(argv[1]) + " " + argv[2] : "";
  if ((command == "train mlp" || command == "train fsdp") && given("--mesh")) {
    return " (vtpu " + command +
           " takes no --mesh: give --cores N for an N-core 1-D run, or a mesh through a plan: "
           "vtpu plan examples/models/mlp.json --mesh 2x4 --emit PLAN.json, then vtpu " +
           command + " --plan PLAN.json)";
  }
  if (argc > 1 && std::string(argv[1]) == "plan" && given("--cores")) {
    return " (vtpu plan takes no --cores: give --mesh N for N devices on one axis, or "
           "--mesh 2x4 for a 2-D mesh)";
  }
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string next = argv[i + 1];
    if (std::string(argv[i]) == "--json" && !next.empty() && next[0] != '-' &&
        text.find(next) != std::string::npos)
      return " (here --json takes no file name: it prints the JSON on stdout; redirect "
             "it: --json > " +
             next + ")";
  }
  return "";
}

}  // namespace

std::string parse_error_text(const CLI::ParseError& e, int argc, char** argv) {
  const std::string text = e.what();
  static const std::regex kTwice(R"(^(-[^:]+): At Most 1 required but received (\d+)$)");
  if (std::smatch m; std::regex_match(text, m, kTwice))
    return m[1].str() + " given " + m[2].str() + " times (expected at most once)";
  if (dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) return text;
  const std::string ordered = extras_in_command_line_order(text, argc, argv);
  return ordered + extras_hint(ordered, argc, argv);
}

}  // namespace vtpu
