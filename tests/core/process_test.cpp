// kprop::run_process (src/kprop/process.h): the child processes the runner
// starts itself (libFuzzer, a finding's replay re-run).
#include "kprop/process.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::vector<std::string> lines_of(const std::vector<std::string>& argv, const kprop::ProcessOptions& options,
                                  kprop::ProcessResult* result = nullptr) {
  std::vector<std::string> lines;
  const auto r = kprop::run_process(argv, options, [&](const std::string& line) { lines.push_back(line); });
  if (result) *result = r;
  return lines;
}

TEST(Process, GivesEachLineAndTheExitStatus) {
  kprop::ProcessResult r;
  const auto lines = lines_of({"/bin/sh", "-c", "echo one; printf 'two\\nthree'; exit 7"}, {}, &r);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three"}));
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 7);
  EXPECT_FALSE(r.timed_out);
}

TEST(Process, StderrJoinsTheLinesOnlyWhenAsked) {
  const std::vector<std::string> argv = {"/bin/sh", "-c", "echo out; echo err >&2"};
  kprop::ProcessOptions quiet;
  quiet.stderr_too = false;
  EXPECT_EQ(lines_of(argv, quiet), (std::vector<std::string>{"out"}));
  EXPECT_EQ(lines_of(argv, {}).size(), 2u);
}

TEST(Process, PassesTheExtraEnvironment) {
  kprop::ProcessOptions options;
  options.extra_env = {"KPROP_PROCESS_TEST=seen"};
  EXPECT_EQ(lines_of({"/bin/sh", "-c", "echo $KPROP_PROCESS_TEST"}, options),
            (std::vector<std::string>{"seen"}));
}

// A child that outlives its limit is killed with its whole group (the
// grandchild too: it holds the pipe, and the call returns only once the
// pipe is closed).
TEST(Process, KillsAChildGroupThatOutlivesItsLimit) {
  kprop::ProcessOptions options;
  options.timeout_s = 0.2;
  kprop::ProcessResult r;
  const auto lines = lines_of({"/bin/sh", "-c", "echo started; sleep 600 & sleep 600"}, options, &r);
  EXPECT_TRUE(r.timed_out);
  ASSERT_TRUE(WIFSIGNALED(r.status));
  EXPECT_EQ(WTERMSIG(r.status), SIGKILL);
  EXPECT_EQ(lines, (std::vector<std::string>{"started"}));
}

TEST(Process, AProgramThatCannotStartThrows) {
  EXPECT_THROW(lines_of({"/nonexistent/kprop-no-such-program"}, {}), std::runtime_error);
}

}  // namespace
