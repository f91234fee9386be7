#include "kprop/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "kprop/runner.h"

extern char** environ;

namespace kprop {

namespace {

// Waits, up to a quarter of a second, until no other thread of this process
// is on a CPU or waiting for one (its /proc state R, or D). fork() copies a
// lock that another thread holds, held, into the child, which then waits for
// it forever: LLVM 14's ASan takes no lock of its allocator around fork(),
// and libFuzzer starts its RSS thread just before the first input, which
// allocates as it starts, while that input forked the plugin host of a
// plugin: mutant. The host hung on its first allocation and each such run stalled
// for case_timeout_s, then reported the input as a crash that did not
// reproduce. A thread off the CPU (asleep, as that one is once started, or as
// the runner's watchdog is) holds none of those locks. A process with one
// thread reads one folder and waits for nothing; one with a thread that never
// stops computing (none of kprop's) waits the whole quarter second before
// each fork, and forks then all the same.
void settle_other_threads() {
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
  for (;;) {
    bool busy = false;
    DIR* tasks = opendir("/proc/self/task");
    if (!tasks) return;
    while (const dirent* e = readdir(tasks)) {
      const pid_t tid = static_cast<pid_t>(std::atoi(e->d_name));
      if (tid <= 0 || tid == self) continue;
      char path[64], stat[512];
      std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
      const int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;  // it ended
      const ssize_t n = read(fd, stat, sizeof stat - 1);
      close(fd);
      if (n <= 0) continue;
      stat[n] = 0;
      // "tid (comm) S ...": the state follows the last ')' (comm may hold one).
      const char* close_paren = std::strrchr(stat, ')');
      if (close_paren && close_paren[1] == ' ' && (close_paren[2] == 'R' || close_paren[2] == 'D'))
        busy = true;
    }
    closedir(tasks);
    if (!busy || std::chrono::steady_clock::now() > deadline) return;
    usleep(1000);
  }
}

}  // namespace

ForkSignals::ForkSignals() {
  settle_other_threads();
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, &old_);
}

void ForkSignals::release() {
  if (!held_) return;
  held_ = false;
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

pid_t fork_on_this_cpu() {
  // The child inherits the caller's affinity at fork(): the one CPU for its
  // first placement, then back to all the caller may use (a CPU that gets
  // busy later is not forced on it). Any step refused: a plain fork().
  cpu_set_t allowed, here;
  CPU_ZERO(&allowed);
  CPU_ZERO(&here);
  const int cpu = sched_getcpu();
  bool pinned = cpu >= 0 && sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 1 &&
                CPU_ISSET(cpu, &allowed);
  if (pinned) {
    CPU_SET(cpu, &here);
    pinned = sched_setaffinity(0, sizeof here, &here) == 0;
  }
  const pid_t pid = fork();
  // In the caller and in the child. Refused (the cpuset shrank meanwhile):
  // every CPU, which the kernel narrows to what is allowed now, rather than
  // a process held to one core.
  if (pinned && sched_setaffinity(0, sizeof allowed, &allowed) != 0) {
    cpu_set_t every;
    std::memset(&every, 0xff, sizeof every);
    sched_setaffinity(0, sizeof every, &every);
  }
  return pid;
}

bool wait_for_exit(pid_t pid, int* status, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::max(timeout_s, 0.0)));
#ifdef SYS_pidfd_open
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  const int fd = -1;
#endif
  for (;;) {
    const pid_t got = waitpid(pid, status, WNOHANG);
    if (got == pid) break;
    if (got < 0 && errno != EINTR) break;  // not our child (reaped already)
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      if (fd >= 0) close(fd);
      return false;
    }
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};  // readable once the process has exited
      poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)) + 1);
    } else {
      usleep(1000);
    }
  }
  if (fd >= 0) close(fd);
  return true;
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options,
                          const std::function<void(const std::string&)>& on_line) {
  using Clock = std::chrono::steady_clock;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  if (options.stderr_too)
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  else
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  for (const auto& e : options.extra_env) env_strings.push_back(e);
  std::vector<char*> env, args;
  for (auto& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  std::vector<std::string> arg_strings = argv;
  for (auto& a : arg_strings) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // our Ctrl-C handling decides
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    throw std::runtime_error(fmt::format("cannot start {}: {}", argv[0], std::strerror(rc)));
  }
  FILE* out = fdopen(pipe_fds[0], "r");
  char buf[8192];
  ProcessResult result;
  const auto started = Clock::now();
  int stop_level = 0;
  Clock::time_point stop_sent{};
  fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  std::string partial;
  auto flush_lines = [&] {
    size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      on_line(partial.substr(0, nl));
      partial.erase(0, nl + 1);
    }
  };
  for (;;) {
    if (interrupted()) {
      const double waited = std::chrono::duration<double>(Clock::now() - stop_sent).count();
      if (stop_level == 0 || (stop_level < 3 && waited > 5)) {
        static const int signals[] = {SIGINT, SIGTERM, SIGKILL};
        kill(-pid, signals[stop_level++]);
        stop_sent = Clock::now();
      }
    }
    if (options.timeout_s > 0 && !result.timed_out &&
        std::chrono::duration<double>(Clock::now() - started).count() > options.timeout_s) {
      kill(-pid, SIGKILL);
      result.timed_out = true;
    }
    const ssize_t n = read(pipe_fds[0], buf, sizeof buf);
    if (n > 0) {
      partial.append(buf, static_cast<size_t>(n));
      flush_lines();
      continue;
    }
    if (n == 0) break;
    if (errno != EAGAIN && errno != EINTR) break;
    if (waitpid(pid, &result.status, WNOHANG) == pid) {
      // Drain what is left, then report.
      fcntl(pipe_fds[0], F_SETFL, 0);
      while ((fgets(buf, sizeof buf, out)) != nullptr) partial += buf;
      flush_lines();
      if (!partial.empty()) on_line(partial);
      fclose(out);
      return result;
    }
    usleep(result.timed_out ? 1000 : 20000);
  }
  if (!partial.empty()) on_line(partial);
  fclose(out);
  waitpid(pid, &result.status, 0);
  return result;
}

}  // namespace kprop
