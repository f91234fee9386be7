// The --jobs process pool (kprop/jobs.h). Hand-rolled on fork and pipes:
// the items are checks that must run in their own processes (see jobs.h),
// and no Debian-packaged library offers an ordered, speculative process pool.
#include "kprop/jobs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace kprop {
namespace {

// The frame on both pipes: index (or allowance), payload length, payload.
struct Header {
  int64_t index;
  uint64_t size;
};

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= size_t(n);
  }
  return true;
}

// Reads exactly `size` bytes; `patient` false gives up on Ctrl-C (the
// caller), true waits regardless (a worker ignores SIGINT).
bool read_all(int fd, void* data, size_t size, bool patient) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    if (!patient) {
      pollfd pf{fd, POLLIN, 0};
      const int ready = poll(&pf, 1, 50);
      if (ready < 0 && errno != EINTR) return false;
      if (ready <= 0) {
        if (interrupted()) return false;
        continue;
      }
    }
    const ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= size_t(n);
  }
  return true;
}

bool send_frame(int fd, int64_t index, const std::string& payload) {
  const Header h{index, payload.size()};
  return write_all(fd, &h, sizeof h) && write_all(fd, payload.data(), payload.size());
}

std::optional<std::pair<int64_t, std::string>> read_frame(int fd, bool patient) {
  Header h{};
  if (!read_all(fd, &h, sizeof h, patient)) return std::nullopt;
  std::string payload(h.size, '\0');
  if (!read_all(fd, payload.data(), payload.size(), patient)) return std::nullopt;
  return std::pair{h.index, std::move(payload)};
}

// A worker's life: compute items w, w + jobs, ... while the caller allows
// them, send each back, exit when done or when the caller hangs up.
[[noreturn]] void worker_main(int w, int jobs, int64_t count, int64_t limit, std::string note, int results,
                              int control, const WorkerPool::Setup& setup) {
  try {
    const WorkerPool::Work work = setup();
    for (int64_t n = w; n < count; n += jobs) {
      // The latest note and allowance: wait while n is beyond what is allowed.
      for (;;) {
        pollfd pf{control, POLLIN, 0};
        const bool waiting = n > limit;
        if (!waiting && poll(&pf, 1, 0) <= 0) break;
        auto frame = read_frame(control, true);
        if (!frame) _exit(0);  // the caller is done with us
        limit = frame->first;
        note = std::move(frame->second);
      }
      if (!send_frame(results, n, work(n, note))) _exit(0);
    }
  } catch (...) {
    // Quietly: the caller redoes the item and reports what it finds.
  }
  std::fflush(nullptr);
  _exit(0);
}

}  // namespace

int default_jobs() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

WorkerPool::WorkerPool(int jobs, int64_t count, int64_t window, const Setup& setup, const std::string& note)
    : jobs_(std::max(1, jobs)), window_(std::max<int64_t>(window, jobs)), note_(note) {
  workers_.resize(size_t(jobs_));
  if (jobs_ == 1 || count <= 1) return;
  allowed_ = window_;
  // A dead worker is an EPIPE on its control pipe, not the caller's death.
  signal(SIGPIPE, SIG_IGN);
  std::fflush(nullptr);
  for (int w = 1; w < jobs_ && w < count; ++w) {
    int to_caller[2], to_worker[2];
    if (pipe2(to_caller, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe: {}", strerror(errno)));
    if (pipe2(to_worker, O_CLOEXEC) != 0) {
      close(to_caller[0]), close(to_caller[1]);
      throw std::runtime_error(fmt::format("pipe: {}", strerror(errno)));
    }
    const pid_t pid = fork();
    if (pid < 0) {
      for (int fd : {to_caller[0], to_caller[1], to_worker[0], to_worker[1]}) close(fd);
      break;  // fewer jobs: the caller computes the rest
    }
    if (pid == 0) {
      // Our own process group: the pool stops a worker with everything it
      // started (an --isolate child), and Ctrl-C at the terminal reaches
      // the caller only, which decides.
      setpgid(0, 0);
      signal(SIGINT, SIG_IGN);
      signal(SIGTERM, SIG_DFL);
      // Only our own pipes: a sibling's results must reach EOF when it dies.
      for (const Worker& other : workers_)
        if (other.pid > 0) close(other.results), close(other.control);
      close(to_caller[0]), close(to_worker[1]);
      enter_worker_process();
      worker_main(w, jobs_, count, allowed_, note_, to_caller[1], to_worker[0], setup);
    }
    setpgid(pid, pid);  // either side may win the race; both set the same group
    close(to_caller[1]), close(to_worker[0]);
    workers_[size_t(w)] = {pid, to_caller[0], to_worker[1], false};
  }
}

WorkerPool::~WorkerPool() {
  for (Worker& w : workers_)
    if (w.pid > 0) retire(w);
}

void WorkerPool::retire(Worker& w) {
  if (w.pid <= 0) return;
  close(w.results), close(w.control);
  kill(-w.pid, SIGKILL);
  int status = 0;
  while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
  }
  w = {-1, -1, -1, true};
}

void WorkerPool::allow(int64_t limit) {
  allowed_ = limit;
  for (Worker& w : workers_)
    if (w.pid > 0 && !send_frame(w.control, limit, note_)) retire(w);
}

void WorkerPool::broadcast(const std::string& note) {
  if (note == note_) return;
  note_ = note;
  allow(allowed_);
}

std::optional<std::string> WorkerPool::take(int64_t n) {
  // Keep the workers `window` items ahead; renew when half is used.
  if (jobs_ > 1 && n + window_ / 2 >= allowed_) allow(n + window_);
  Worker& w = workers_[size_t(n % jobs_)];
  if (w.pid <= 0) return std::nullopt;
  auto frame = read_frame(w.results, false);
  if (frame && frame->first == n) return std::move(frame->second);
  // Died (or Ctrl-C, or out of step, which cannot happen): the caller takes over its items.
  retire(w);
  return std::nullopt;
}

}  // namespace kprop
