// Runs a shell command for the end-to-end tests and returns its exit code and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace vtpu {

struct CommandRun {
  int exit_code;       // the command's exit status; 128 + signal if a signal ended it; -1: popen
  std::string output;  // what it wrote to stdout (add 2>&1 to the command for stderr too)
};

/// Runs `shell_command` with /bin/sh (popen) and waits for it. Wrap a command that could hang in
/// `timeout N` so that a hang becomes exit code 124 instead of a stuck test. Thread-compatible.
inline CommandRun run_command(const std::string& shell_command) {
  FILE* pipe = popen(shell_command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace vtpu
