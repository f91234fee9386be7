// --jobs N: property runs and folder replays on N processes, with exactly
// the cases, verdicts and findings of --jobs 1.
//
// The caller consumes items 0, 1, 2, ... in order, as the sequential loop
// does. N forked workers compute them ahead of it, at most `window` items
// past it: each claims the next unclaimed item (a counter in shared memory,
// so a worker on a slow item does not hold the others back), computes it and
// sends the result back as bytes; the caller reads item n from the pipe of
// the worker that claimed it. The caller computes an item itself only when
// its worker died, or when no worker is left (or none could be forked).
// Which process computes an item never changes its result: an item is a
// function of its index and the note. Nothing a worker computes has
// side effects (no corpus writes, no events): the caller decides what each
// result means, shrinks and stores, so the order of events is the
// sequential one. A worker that dies (the target crashed or hung in it) is
// not trusted with anything: the caller redoes its items itself, under its
// own crash guard, so a crash is reported as the sequential run reports it.
//
// Processes, not threads: a kernel under test may keep global state, the
// crash guard owns the process's signals, and an external target (exec:,
// plugin:) is one worker process per job, opened by each job for itself.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kprop/errors.h"
#include "kprop/runner.h"

namespace kprop {

// The default of --jobs for property runs: the hardware threads (at least 1).
int default_jobs();
// That default for a spec whose largest case needs `case_bytes` (per job:
// each job holds its own case): no more jobs than the machine's available
// memory holds such cases (MemAvailable, /proc/meminfo; at least 1). `note`
// says why when it is fewer than the cores.
int default_jobs(double case_bytes, std::string* note);

class WorkerPool {
 public:
  // Runs in each forked worker after fork: sets it up (its own external
  // target, say) and returns the function that computes item n given the
  // latest broadcast note.
  using Work = std::function<std::string(int64_t n, const std::string& note)>;
  using Setup = std::function<Work()>;
  // jobs <= 1 forks nothing: take() always answers "compute it yourself".
  // Otherwise `jobs` workers (the caller mostly waits for them).
  WorkerPool(int jobs, int64_t count, int64_t window, const Setup& setup, const std::string& note = "");
  ~WorkerPool();  // stops and reaps the workers
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Item n's result (items are taken in increasing order), or nothing when
  // the caller must compute it itself: no worker claimed it, its worker
  // died, or Ctrl-C came while waiting.
  std::optional<std::string> take(int64_t n);
  // Every worker gets this note with its next allowance and uses the latest
  // it has (a run: which invariants are still alive).
  void broadcast(const std::string& note);

  // While held, the workers finish the item they are on and claim no
  // other: the caller has work of its own (shrinking a failure) that they
  // would slow down, and they may not be needed after it (--mutants).
  class Pause {
   public:
    explicit Pause(WorkerPool* pool) : pool_(pool) {
      if (pool_ && pool_->shared_) pool_->shared_->paused.store(true);
    }
    ~Pause() {
      if (pool_ && pool_->shared_) pool_->shared_->paused.store(false);
    }
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    WorkerPool* pool_;
  };

  // Shared with the workers (an anonymous shared mapping): the next item
  // to claim, whether to hold off, then `ring` slots: who claimed item n,
  // at slot n % ring.
  struct Shared {
    std::atomic<int64_t> next{0};
    std::atomic<bool> paused{false};
    std::atomic<int64_t>* owner() { return reinterpret_cast<std::atomic<int64_t>*>(this + 1); }
  };

 private:
  struct Worker {
    pid_t pid = -1;
    int results = -1;     // read end: worker -> caller
    int control = -1;     // write end: caller -> worker
    bool exited = false;  // claims nothing more; what it sent is still in its pipe
    bool reaped = false;  // waited for
    std::string inbox;    // bytes read from `results`, not yet taken
  };
  static constexpr int kMaxJobs = 1000;  // owner tags hold the worker in 10 bits (jobs.cpp)
  static constexpr int kPatience = 4;    // yields before the caller sleeps between looks
  void allow(int64_t limit);
  void retire(Worker& w);
  void retire(const std::vector<Worker*>& workers);
  bool any_alive() const;
  void reap_exited();
  int jobs_ = 1;
  int64_t window_ = 1, allowed_ = 0, ring_ = 0;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  Shared* shared_ = nullptr;
  size_t shared_bytes_ = 0;
  bool reaped_any_ = false;
  std::string note_;
  std::vector<Worker> workers_;  // worker w forked w-th
};

// What a worker process changes about the crash guard (findings.cpp): a
// fatal signal kills it and a hang ends it, quietly; its caller redoes the
// item under its own guard, which stores the case as a sequential run does.
void enter_worker_process();

// CheckResult on the wire (--isolate children).
nlohmann::json check_result_json(const CheckResult& r);
CheckResult check_result_from_json(const nlohmann::json& j);

// What a --jobs worker sends back for one case of a property run: the
// case's statistics and generation time (so the caller need not draw it
// again) and the results of the invariants it checked, by their index in
// the run's uses.
struct CaseOutcome {
  CaseStats stats;
  double generation_seconds = 0;
  std::vector<size_t> uses;
  std::vector<CheckResult> results;
  // The spec's error the case ran into (a program the spec names that
  // cannot start): the caller raises it, instead of checking the case again
  // itself (a program that hangs while it starts cost the caller its wait too).
  std::optional<InputError> input_error;
};
// A compact binary form (both ends are the same binary, so no schema
// evolution is needed, and it is several times cheaper than JSON on the
// caller, which decodes every case). decode returns false on a malformed or
// truncated payload.
std::string encode_case_outcome(const CaseOutcome& o);
bool decode_case_outcome(const std::string& bytes, CaseOutcome& o);

}  // namespace kprop
