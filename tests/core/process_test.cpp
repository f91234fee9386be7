// kprop::run_process (src/kprop/process.h): the child processes the runner
// starts itself (libFuzzer, a finding's replay re-run).
#include "kprop/process.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
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

// wait_for_exit: reaps a child that exits in time, with its status; says
// false for one that does not (and leaves it to the caller).
TEST(Process, WaitForExitReapsAChildOrSaysItIsStillThere) {
  const pid_t quick = fork();
  if (quick == 0) {
    usleep(20000);
    _exit(3);
  }
  int status = 0;
  ASSERT_TRUE(kprop::wait_for_exit(quick, &status, 10));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  const pid_t stays = fork();
  if (stays == 0) {
    pause();
    _exit(0);
  }
  EXPECT_FALSE(kprop::wait_for_exit(stays, &status, 0.05));
  EXPECT_EQ(kill(stays, 0), 0);  // not reaped
  kill(stays, SIGKILL);
  ASSERT_TRUE(kprop::wait_for_exit(stays, &status, 10));
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

// fork_on_this_cpu pins only the child's first placement: afterwards the
// caller and the child may each run on every CPU the caller could.
TEST(Process, ForkOnThisCpuLeavesBothTheCallersCpus) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  const pid_t pid = kprop::fork_on_this_cpu();
  ASSERT_GE(pid, 0);
  cpu_set_t now;
  const bool same = sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(&now, &before);
  if (pid == 0) _exit(same ? 0 : 1);
  EXPECT_TRUE(same) << "the caller's CPUs changed";
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's CPUs are not the caller's";
}

TEST(Process, AProgramThatCannotStartThrows) {
  EXPECT_THROW(lines_of({"/nonexistent/kprop-no-such-program"}, {}), std::runtime_error);
}

}  // namespace
