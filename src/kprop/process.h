#pragma once
// Child processes the runner starts itself (libFuzzer, a finding's replay
// re-run): one policy for spawning, reading and stopping them.
#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace kprop {

struct ProcessOptions {
  std::vector<std::string> extra_env;  // NAME=VALUE added to ours
  bool stderr_too = true;              // its stderr into the same lines; else to /dev/null
  double timeout_s = 0;                // killed (its whole group) after this long; 0: no limit
};

struct ProcessResult {
  int status = 0;          // waitpid's status
  bool timed_out = false;  // killed at ProcessOptions::timeout_s
};

// Runs argv (argv[0] a path) in a process group of its own, each line of its
// output to `on_line`. Ctrl-C (kprop's interrupt flag) stops it: SIGINT, then
// SIGTERM after 5 s and SIGKILL after 10 s, to the whole group (libFuzzer's
// fork-mode parent takes a job killed by SIGINT for a crash and goes on).
// Throws std::runtime_error when it cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options,
                          const std::function<void(const std::string&)>& on_line);

// Waits up to `timeout_s` for child `pid` to exit and reaps it (its
// waitpid status in *status): true when it did, or when `pid` is not (or
// no longer) a child of ours, *status then untouched. Woken by the exit itself
// (a pidfd), not by a nap: a nap of 5 ms per child stopped added 10 ms to
// the end of every --jobs 2 run. Where pidfds are missing (Linux before
// 5.3), it looks every millisecond.
bool wait_for_exit(pid_t pid, int* status, double timeout_s);

// fork(), with the child started on the CPU the caller runs on (both then
// keep the caller's allowed CPUs). For a child the caller waits for (an
// --isolate check): the scheduler otherwise starts a new process on the
// idlest CPU, away from the caches and page tables it shares with its
// parent, which on 2 cores made attention_bwd --mutants --jobs 1 take 20%
// more CPU (1,600 migrations a run), and --jobs 2 bimodal.
pid_t fork_on_this_cpu();

// First waits (up to 250 ms) until no other thread of this process is
// running, so that none holds a lock the child needs (process.cpp,
// settle_other_threads). Then holds SIGINT and SIGTERM back across a fork()
// until the child has set its own handlers, then releases them (a signal held
// back is delivered then, to the new handler). Without it a signal in between
// ran the runner's interrupt handler in the child: a job worker the pool
// stopped as soon as it started printed "kprop: interrupted" though no one
// pressed Ctrl-C. The parent releases right after fork() returns, so that its
// own waits see Ctrl-C; the destructor releases what is still held (fork()
// failed).
class ForkSignals {
 public:
  ForkSignals();
  ~ForkSignals() { release(); }
  ForkSignals(const ForkSignals&) = delete;
  ForkSignals& operator=(const ForkSignals&) = delete;
  void release();

 private:
  sigset_t old_{};
  bool held_ = true;
};

}  // namespace kprop
