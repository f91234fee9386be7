// --jobs N: property runs and folder replays on N processes, with exactly
// the cases, verdicts and findings of --jobs 1.
//
// The caller consumes items 0, 1, 2, ... in order, as the sequential loop
// does; item n belongs to worker n % N. Worker 0 is the caller itself (it
// computes its items when it reaches them); workers 1..N-1 are forked
// processes that compute theirs ahead of the caller, at most `window` items
// past it, and send each result back as bytes. Nothing a worker computes has
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

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kprop/runner.h"

namespace kprop {

// The default of --jobs for property runs: the hardware threads (at least 1).
int default_jobs();

class WorkerPool {
 public:
  // Runs in each forked worker after fork: sets it up (its own external
  // target, say) and returns the function that computes item n given the
  // latest broadcast note.
  using Work = std::function<std::string(int64_t n, const std::string& note)>;
  using Setup = std::function<Work()>;
  // jobs <= 1 forks nothing: take() always answers "compute it yourself".
  WorkerPool(int jobs, int64_t count, int64_t window, const Setup& setup, const std::string& note = "");
  ~WorkerPool();  // stops and reaps the workers
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Item n's result (items are taken in increasing order), or nothing when
  // the caller must compute it itself: it is the caller's own item, its
  // worker died, or Ctrl-C came while waiting.
  std::optional<std::string> take(int64_t n);
  // Every worker gets this note with its next allowance and uses the latest
  // it has (a run: which invariants are still alive).
  void broadcast(const std::string& note);

 private:
  struct Worker {
    pid_t pid = -1;
    int results = -1;  // read end: worker -> caller
    int control = -1;  // write end: caller -> worker
    bool dead = false;
  };
  void allow(int64_t limit);
  void retire(Worker& w);
  int jobs_ = 1;
  int64_t window_ = 1, allowed_ = 0;
  std::string note_;
  std::vector<Worker> workers_;  // [0] is the caller
};

// What a worker process changes about the crash guard (findings.cpp): a
// fatal signal kills it and a hang ends it, quietly; its caller redoes the
// item under its own guard, which stores the case as a sequential run does.
void enter_worker_process();

// CheckResult on the wire (--isolate children and --jobs workers).
nlohmann::json check_result_json(const CheckResult& r);
CheckResult check_result_from_json(const nlohmann::json& j);

}  // namespace kprop
