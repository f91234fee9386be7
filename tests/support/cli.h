// prop_runner as a user runs it (the build's binary, KPROP_RUNNER): its exit
// code and everything it printed.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace kprop::testing {

struct CliRun {
  int code;
  std::string out;  // stdout + stderr
};

// `cwd`: the folder it runs in ("": the test's own), where a run's
// relative paths (the scratch folder .kprop/findings/) land.
inline CliRun run_cli(const std::string& args, const std::string& cwd = "") {
  std::string in = "'";
  for (const char ch : cwd) in += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  const std::string cmd =
      (cwd.empty() ? "" : "cd " + in + "' && ") + std::string(KPROP_RUNNER) + " " + args + " 2>&1";
  std::array<char, 4096> buf{};
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  while (p && fgets(buf.data(), buf.size(), p)) out += buf.data();
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace kprop::testing
