// The `vtpu` program's entry points: --version, bare `vtpu` and the command groups without a
// subcommand print and exit 0; an unknown subcommand is a usage error.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "tests/run_command.h"

namespace {

// What the command wrote to stdout (stderr dropped) and its exit code.
vtpu::CommandRun run_stdout(const std::string& args) {
  return vtpu::run_command("timeout 60 " + std::string(VTPU_CLI_PATH) + " " + args +
                           " 2>/dev/null");
}

// What the command wrote to stderr (stdout dropped).
std::string run_stderr(const std::string& args) {
  return vtpu::run_command("timeout 60 " + std::string(VTPU_CLI_PATH) + " " + args +
                           " 2>&1 >/dev/null")
      .output;
}

// True when `help` lists `name` as an entry: the name first on an indented line.
bool lists(const std::string& help, const std::string& name) {
  return std::regex_search(help, std::regex("(^|\n) +" + name + "( |\n)"));
}

TEST(CliBasicsTest, VersionPrintsTheProjectVersion) {
  const vtpu::CommandRun r = run_stdout("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, std::string("vtpu ") + VTPU_PROJECT_VERSION + "\n");
  EXPECT_EQ(run_stderr("--version"), "");
}

TEST(CliBasicsTest, BareVtpuPrintsItsHelpListingEverySubcommand) {
  const vtpu::CommandRun bare = run_stdout("");
  EXPECT_EQ(bare.exit_code, 0);
  EXPECT_EQ(run_stderr(""), "");
  for (const char* name : {"train", "bench", "reshard", "stress", "plan"}) {
    EXPECT_TRUE(lists(bare.output, name)) << name << " missing from:\n" << bare.output;
  }
  // The same text as --help.
  const vtpu::CommandRun help = run_stdout("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(bare.output, help.output);
}

TEST(CliBasicsTest, GroupWithoutSubcommandPrintsItsHelp) {
  const std::pair<const char*, std::vector<const char*>> groups[] = {
      {"train", {"mlp", "transformer", "fsdp"}},
      {"bench", {"memory", "fragmentation", "collectives", "kernel", "hardware"}}};
  for (const auto& [group, names] : groups) {
    const vtpu::CommandRun r = run_stdout(group);
    EXPECT_EQ(r.exit_code, 0) << group;
    EXPECT_EQ(run_stderr(group), "") << group;
    for (const char* name : names) {
      EXPECT_TRUE(lists(r.output, name)) << name << " missing from vtpu " << group << ":\n"
                                         << r.output;
    }
    EXPECT_EQ(r.output, run_stdout(std::string(group) + " --help").output) << group;
  }
}

TEST(CliBasicsTest, UnknownSubcommandIsAUsageError) {
  for (const char* args : {"nope", "train nope", "bench nope"}) {
    const vtpu::CommandRun r = run_stdout(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_NE(run_stderr(args).find("nope"), std::string::npos) << args;
  }
}

}  // namespace
