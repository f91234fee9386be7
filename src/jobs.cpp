// The --jobs process pool (kprop/jobs.h). Hand-rolled on fork and pipes:
// the items are checks that must run in their own processes (see jobs.h),
// and no Debian-packaged library offers an ordered, speculative process pool.
#include "kprop/jobs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <stdexcept>
#include <thread>
#include <type_traits>

#include "kprop/external.h"
#include "kprop/process.h"
#include "kprop/target_call.h"

namespace kprop {
namespace {

// The frame on both pipes: index (or allowance), payload length, payload.
struct Header {
  int64_t index;
  uint64_t size;
};

static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "shared across processes");

// owner[n % ring] once worker w has claimed item n (0: not yet published):
// the item above the worker's 10 bits (WorkerPool::kMaxJobs < 1024).
constexpr int64_t kWorkerSlots = 1024;
int64_t owner_tag(int64_t n, int w) {
  return n * kWorkerSlots + w + 1;
}
int64_t tag_item(int64_t tag) {
  return (tag - 1) / kWorkerSlots;
}
size_t tag_worker(int64_t tag) {
  return size_t((tag - 1) % kWorkerSlots);
}

// Moves exactly `size` bytes through `io` (::write or ::read), again after
// EINTR; false on an error or at EOF.
template <typename Byte, typename Io>
bool transfer_all(Io io, int fd, Byte* p, size_t size) {
  while (size > 0) {
    const ssize_t n = io(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= size_t(n);
  }
  return true;
}

bool write_all(int fd, const void* data, size_t size) {
  return transfer_all(::write, fd, static_cast<const char*>(data), size);
}

// Reads exactly `size` bytes, waiting as long as it takes (a worker reading
// its control pipe; it ignores SIGINT, and EOF means the caller is gone).
bool read_all(int fd, void* data, size_t size) {
  return transfer_all(::read, fd, static_cast<char*>(data), size);
}

bool send_frame(int fd, int64_t index, const std::string& payload) {
  const Header h{index, payload.size()};
  std::string frame(reinterpret_cast<const char*>(&h), sizeof h);  // one write per frame
  frame += payload;
  return write_all(fd, frame.data(), frame.size());
}

// The caller's read of a worker's results: whatever the pipe holds at once
// into `inbox` (a worker ahead of the caller has sent several frames), then
// the frames from there, so a frame costs no system call of its own.
//
// While nothing is there it waits in one of two ways. `nap`: sleeps 1 ms
// between looks rather than block in poll. A caller woken by every frame (a
// context switch per case, on a machine whose cores all run workers) cost
// the cheap specs a fifth of the speed-up (2 cores, 20000 trials: beam 1.74x
// with a blocking poll, 1.84x with 1 ms naps); the workers are a window of
// items ahead, so the caller's lateness costs them nothing in a long run.
// Otherwise it blocks in poll and wakes with the first byte: a short run (a
// mutant killed in a few cases) would spend most of its time napping.
std::optional<std::pair<int64_t, std::string>> read_buffered_frame(int fd, std::string& inbox, bool nap) {
  constexpr useconds_t kNap = 1000;
  for (;;) {
    if (inbox.size() >= sizeof(Header)) {
      Header h{};
      std::memcpy(&h, inbox.data(), sizeof h);
      if (inbox.size() - sizeof h >= h.size) {
        std::pair<int64_t, std::string> frame{h.index, inbox.substr(sizeof h, h.size)};
        inbox.erase(0, sizeof h + h.size);
        return frame;
      }
    }
    pollfd pf{fd, POLLIN, 0};
    const int ready = poll(&pf, 1, nap ? 0 : 50);
    if (ready < 0 && errno != EINTR) return std::nullopt;
    if (ready <= 0) {
      if (interrupted()) return std::nullopt;
      if (nap) usleep(kNap);
      continue;
    }
    char chunk[1 << 16];
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    inbox.append(chunk, size_t(n));
  }
}

std::optional<std::pair<int64_t, std::string>> read_frame(int fd) {
  Header h{};
  if (!read_all(fd, &h, sizeof h)) return std::nullopt;
  std::string payload(h.size, '\0');
  if (!read_all(fd, payload.data(), payload.size())) return std::nullopt;
  return std::pair{h.index, std::move(payload)};
}

// A worker's exit, at once (no destructors: the caller owns what the
// process inherited), its children first: an exec: worker whose pipes
// closed before it died would fail its write and could print a traceback.
// Also the worker's SIGTERM handler (WorkerPool::retire).
[[noreturn]] void leave(bool in_handler = false) {
  // Out of a handler, each child's whole tree, as its transport stops it,
  // with the caller's SIGTERM held until that is done (the caller retires
  // a worker as soon as its last result is in, so the handler cut it
  // short); in one, their process groups only (what is safe there).
  if (!in_handler) {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, nullptr);
    external::stop_children();
  }
  external::kill_children();
  // ... and reaped: an --isolate child, in our process group, has the
  // caller's SIGTERM too. The caller goes on once it has reaped us, so
  // nothing of ours is left dying (or a zombie of init's) beside the next
  // pool's workers.
  while (waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
  }
  _exit(0);
}
void on_stop(int) {
  leave(true);
}

// A worker's life: claim the next unclaimed item while the caller allows
// it, compute it, send it back; exit when every item is claimed or when the
// caller hangs up.
[[noreturn]] void worker_main(int w, int64_t count, int64_t limit, std::string note, int results, int control,
                              WorkerPool::Shared* shared, int64_t ring, const WorkerPool::Setup& setup) {
  try {
    const WorkerPool::Work work = setup();
    for (;;) {
      int64_t n = shared->next.load(std::memory_order_relaxed);
      if (n >= count) break;
      // The latest note and allowance: wait while n is beyond what is
      // allowed, or while the caller holds the pool paused (looking at the
      // control pipe every millisecond, so a caller that died is noticed).
      for (;;) {
        pollfd pf{control, POLLIN, 0};
        const bool paused = shared->paused.load(std::memory_order_relaxed);
        const bool waiting = n > limit;
        if (!waiting) {
          const int ready = poll(&pf, 1, paused ? 1 : 0);
          if (ready == 0 && !paused) break;
          if (ready <= 0) continue;  // paused, nothing from the caller yet
        }
        auto frame = read_frame(control);
        if (!frame) leave();  // the caller is done with us
        limit = frame->first;
        note = std::move(frame->second);
        n = shared->next.load(std::memory_order_relaxed);
      }
      if (n >= count) break;
      if (!shared->next.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel)) continue;  // taken
      shared->owner()[n % ring].store(owner_tag(n, w), std::memory_order_release);
      if (!send_frame(results, n, work(n, note))) leave();
    }
  } catch (...) {
    // Quietly: the caller redoes the item and reports what it finds.
  }
  std::fflush(nullptr);
  leave();
}

}  // namespace

namespace {
std::atomic<bool> cuda_in_process{false};
}  // namespace

void note_in_process_cuda(bool started) {
  cuda_in_process.store(started, std::memory_order_relaxed);
}

bool in_process_cuda() {
  return cuda_in_process.load(std::memory_order_relaxed);
}

int default_jobs() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int default_jobs(double case_bytes, std::string* note) {
  const int cores = default_jobs();
  std::ifstream meminfo("/proc/meminfo");
  double available = 0;
  for (std::string key; meminfo >> key;) {
    double kb = 0;
    meminfo >> kb;
    if (key == "MemAvailable:") {
      available = kb * 1024;
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  if (available <= 0 || case_bytes <= 0) return cores;
  const int fit = static_cast<int>(std::clamp(std::floor(available / case_bytes), 1.0, double(cores)));
  const double mb = case_bytes / (1024.0 * 1024.0), free_mb = available / (1024.0 * 1024.0);
  if (note && case_bytes > available)
    *note = fmt::format(
        "--jobs 1: the largest case of this run needs ~{:.0f} MB, more than the {:.0f} MB of memory "
        "available; a case that large may run out of memory (narrow the domain, or lower --max-case-mb to "
        "refuse it)",
        mb, free_mb);
  else if (note && fit < cores)
    *note = fmt::format(
        "--jobs {} (of {} cores): each job holds its own case, the largest ~{:.0f} MB, and {:.0f} MB of "
        "memory is available; --jobs N overrides",
        fit, cores, mb, free_mb);
  return fit;
}

WorkerPool::WorkerPool(int jobs, int64_t count, int64_t window, const Setup& setup, const std::string& note)
    : jobs_(std::clamp(jobs, 1, kMaxJobs)), window_(std::max<int64_t>(window, jobs)), note_(note) {
  if (jobs_ == 1 || count <= 1) return;
  ring_ = 2 * window_ + 2;  // an item's slot is reused only after the caller took it
  const size_t bytes = sizeof(Shared) + size_t(ring_) * sizeof(std::atomic<int64_t>);
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return;  // no pool: the caller computes everything
  shared_ = new (map) Shared{};
  for (int64_t k = 0; k < ring_; ++k) new (shared_->owner() + k) std::atomic<int64_t>(0);
  shared_bytes_ = bytes;
  allowed_ = window_;
  // A dead worker is an EPIPE on its control pipe, not the caller's death.
  signal(SIGPIPE, SIG_IGN);
  std::fflush(nullptr);
  for (int w = 0; w < jobs_ && w < count; ++w) {
    int to_caller[2], to_worker[2];
    if (pipe2(to_caller, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe: {}", strerror(errno)));
    if (pipe2(to_worker, O_CLOEXEC) != 0) {
      close(to_caller[0]), close(to_caller[1]);
      throw std::runtime_error(fmt::format("pipe: {}", strerror(errno)));
    }
    ForkSignals held;
    const pid_t pid = fork();
    if (pid > 0) held.release();
    if (pid < 0) {
      for (int fd : {to_caller[0], to_caller[1], to_worker[0], to_worker[1]}) close(fd);
      break;  // fewer jobs: the others (or the caller) compute the rest
    }
    if (pid == 0) {
      // Our own process group: the pool stops a worker with everything it
      // started (an --isolate child), and Ctrl-C at the terminal reaches
      // the caller only, which decides.
      setpgid(0, 0);
      signal(SIGINT, SIG_IGN);
      signal(SIGTERM, on_stop);
      held.release();
      // Only our own pipes: a sibling's results must reach EOF when it dies.
      for (const Worker& other : workers_)
        if (other.pid > 0) close(other.results), close(other.control);
      close(to_caller[0]), close(to_worker[1]);
      enter_worker_process();
      worker_main(w, count, allowed_, note_, to_caller[1], to_worker[0], shared_, ring_, setup);
    }
    setpgid(pid, pid);  // either side may win the race; both set the same group
    close(to_caller[1]), close(to_worker[0]);
    workers_.push_back({pid, to_caller[0], to_worker[1]});
  }
}

WorkerPool::~WorkerPool() {
  std::vector<Worker*> live;
  for (Worker& w : workers_)
    if (w.pid > 0) live.push_back(&w);
  retire(live);
  if (shared_) munmap(shared_, shared_bytes_);
}

void WorkerPool::retire(Worker& w) {
  if (w.pid > 0) retire(std::vector<Worker*>{&w});
}

void WorkerPool::retire(const std::vector<Worker*>& workers) {
  // First EOF alone, for up to half a second: a worker waiting on the
  // control pipe (or done) then stops its children as their transports do,
  // their whole trees; SIGTERM's handler can only kill their process groups,
  // and a child's descendants that called setsid outlived the run.
  for (Worker* w : workers) close(w->results), close(w->control);
  const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  for (Worker* w : workers) {
    int status = 0;
    const double left = std::chrono::duration<double>(grace - std::chrono::steady_clock::now()).count();
    if (!w->reaped) w->reaped = wait_for_exit(w->pid, &status, left);
  }
  // Then SIGTERM, to all at once: a worker kills the children of its own
  // (exec: workers, each in its own process group) and exits; then SIGKILL
  // to its group, whatever it started (an --isolate child), for one that
  // did not exit within a second.
  std::vector<pid_t> cut_short;
  for (Worker* w : workers)
    if (!w->reaped) kill(-w->pid, SIGTERM), cut_short.push_back(w->pid);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (Worker* w : workers) {
    int status = 0;
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (!w->reaped) w->reaped = wait_for_exit(w->pid, &status, left);
    kill(-w->pid, SIGKILL);
    while (!w->reaped && waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
    }
    *w = Worker{};  // pid -1: its items are the caller's
    w->exited = w->reaped = true;
  }
  // A worker stopped mid-call (its handler kills process groups only):
  // what its children started under setsid still carries their tokens.
  for (const pid_t pid : cut_short) external::kill_trees_of(pid);
}

void WorkerPool::allow(int64_t limit) {
  allowed_ = limit;
  for (Worker& w : workers_)
    if (w.pid > 0 && !w.exited && !send_frame(w.control, limit, note_)) {
      // Gone (done or dead): it claims nothing more, but what it sent is
      // still in its pipe; a read that fails retires it.
      w.exited = true;
    }
}

void WorkerPool::broadcast(const std::string& note) {
  if (note == note_) return;
  note_ = note;
  allow(allowed_);
}

std::optional<std::string> WorkerPool::take(int64_t n) {
  if (!shared_) return std::nullopt;
  // Keep the workers `window` items ahead; renew when half is used.
  if (n + window_ / 2 >= allowed_) allow(n + window_);
  std::atomic<int64_t>& owner = shared_->owner()[n % ring_];
  for (int spins = 0;; ++spins) {
    const int64_t tag = owner.load(std::memory_order_acquire);
    if (tag > 0 && tag_item(tag) == n) {
      Worker& w = workers_[tag_worker(tag)];
      if (w.pid <= 0) return std::nullopt;  // its worker died: compute it here
      // A worker claims items in increasing order and this loop takes every
      // item in order, so the next frame on its pipe is item n.
      // Naps once the run has gone on for a while (see read_buffered_frame).
      const bool nap = std::chrono::steady_clock::now() - started_ > std::chrono::milliseconds(50);
      auto frame = read_buffered_frame(w.results, w.inbox, nap);
      if (frame && frame->first == n) return std::move(frame->second);
      // Died (or Ctrl-C, or out of step): the caller computes the items it
      // had claimed.
      retire(w);
      return std::nullopt;
    }
    // Unclaimed, and no worker is left to claim it: the caller computes it.
    // (While one is alive it will: items are claimed in order, so nothing
    // past n is waiting in a pipe for this loop.)
    int64_t unclaimed = n;
    if (!any_alive() && shared_->next.compare_exchange_strong(unclaimed, n + 1, std::memory_order_acq_rel))
      return std::nullopt;
    if (interrupted()) return std::nullopt;
    // Claimed by a worker that died before saying so (killed between its
    // claim and its tag): computed here after a while. Were it a live
    // worker after all, its frame comes out of step and it is retired.
    if (spins > kPatience + 2000 && reaped_any_) return std::nullopt;
    if (spins < kPatience) {
      sched_yield();
    } else {
      reap_exited();
      usleep(100);
    }
  }
}

bool WorkerPool::any_alive() const {
  for (const Worker& w : workers_)
    if (w.pid > 0 && !w.exited) return true;
  return false;
}

void WorkerPool::reap_exited() {
  for (Worker& w : workers_) {
    int status = 0;
    if (w.pid > 0 && !w.reaped && waitpid(w.pid, &status, WNOHANG) == w.pid) {
      // Its results pipe keeps what it sent: read to the end, then retired.
      w.reaped = w.exited = true;
      reaped_any_ = true;
    }
  }
}

namespace {

// Hand-rolled, as the frames above: the payload is a few numbers and short
// strings between two copies of one binary.
struct Writer {
  std::string out;
  template <typename T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out += s;
  }
};

struct Reader {
  const std::string& in;
  size_t at = 0;
  template <typename T>
  T pod() {
    T v{};
    if (in.size() - at < sizeof v) throw std::out_of_range("truncated");
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = pod<uint64_t>();
    if (in.size() - at < n) throw std::out_of_range("truncated");
    std::string s = in.substr(at, n);
    at += n;
    return s;
  }
  uint64_t count(size_t least_bytes_each) {  // an element count that fits what is left
    const auto n = pod<uint64_t>();
    if (n > (in.size() - at) / std::max<size_t>(least_bytes_each, 1)) throw std::out_of_range("bad count");
    return n;
  }
};

}  // namespace

std::string encode_case_outcome(const CaseOutcome& o) {
  Writer w;
  w.pod<int64_t>(o.stats.size);
  w.str(o.stats.summary);
  w.pod<uint64_t>(o.stats.dims.size());
  for (const auto& d : o.stats.dims) w.str(d.name), w.pod(d.value), w.str(d.kind);
  w.pod(o.generation_seconds);
  w.pod<uint64_t>(o.uses.size());
  for (size_t k : o.uses) w.pod<uint64_t>(k);
  w.pod<uint64_t>(o.results.size());
  for (const CheckResult& r : o.results) {
    w.pod<int32_t>(static_cast<int32_t>(r.kind));
    w.pod<int32_t>(static_cast<int32_t>(r.verdict.outcome));
    w.str(r.verdict.message);
    w.pod<uint64_t>(r.verdict.measured.size());
    for (const auto& m : r.verdict.measured) w.str(m.name), w.pod(m.value);
    w.str(r.reason), w.str(r.failure_kind);
    w.pod<uint8_t>(r.unavailable), w.pod<uint8_t>(r.reference_unavailable);
    w.pod(r.seconds), w.pod(r.target_seconds), w.pod(r.reference_seconds);
    w.pod(r.target_runs);
    w.pod<int8_t>(static_cast<int8_t>(r.outputs_differ));
  }
  w.pod<uint8_t>(o.input_error.has_value());
  if (o.input_error) {
    const Mark& m = o.input_error->mark();
    w.str(m.file), w.pod<int32_t>(m.line), w.pod<int32_t>(m.col), w.str(o.input_error->bare_message());
  }
  return std::move(w.out);
}

bool decode_case_outcome(const std::string& bytes, CaseOutcome& o) {
  try {
    Reader r{bytes};
    CaseOutcome out;
    out.stats.size = r.pod<int64_t>();
    out.stats.summary = r.str();
    for (uint64_t n = r.count(24); n > 0; --n) {
      CaseStats::Dim d;
      d.name = r.str(), d.value = r.pod<double>(), d.kind = r.str();
      out.stats.dims.push_back(std::move(d));
    }
    out.generation_seconds = r.pod<double>();
    for (uint64_t n = r.count(8); n > 0; --n) out.uses.push_back(size_t(r.pod<uint64_t>()));
    for (uint64_t n = r.count(60); n > 0; --n) {
      CheckResult c;
      const auto kind = r.pod<int32_t>(), outcome = r.pod<int32_t>();
      if (kind < 0 || kind > static_cast<int32_t>(CheckResult::Kind::target_failure) || outcome < 0 ||
          outcome > static_cast<int32_t>(Outcome::not_applicable))
        return false;
      c.kind = static_cast<CheckResult::Kind>(kind);
      c.verdict.outcome = static_cast<Outcome>(outcome);
      c.verdict.message = r.str();
      for (uint64_t m = r.count(16); m > 0; --m) {
        std::string name = r.str();
        c.verdict.measured.push_back({std::move(name), r.pod<double>()});
      }
      c.reason = r.str(), c.failure_kind = r.str();
      c.unavailable = r.pod<uint8_t>() != 0;
      c.reference_unavailable = r.pod<uint8_t>() != 0;
      c.seconds = r.pod<double>(), c.target_seconds = r.pod<double>(), c.reference_seconds = r.pod<double>();
      c.target_runs = r.pod<int64_t>();
      c.outputs_differ = r.pod<int8_t>();
      if (c.outputs_differ < -1 || c.outputs_differ > 1) return false;
      out.results.push_back(std::move(c));
    }
    if (r.pod<uint8_t>() != 0) {
      Mark m;
      m.file = r.str(), m.line = r.pod<int32_t>(), m.col = r.pod<int32_t>();
      out.input_error.emplace(std::move(m), r.str());
    }
    if (r.at != bytes.size()) return false;
    o = std::move(out);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace kprop
