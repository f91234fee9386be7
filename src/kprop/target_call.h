// The case timeout (run.case_timeout_s, --case-timeout) limits each call of
// an in-process target, not the whole check of a case: an invariant that is
// slow on a huge case (its own fp64 work, finite differences) is not the
// target hanging, and must not be reported as one. Trial marks each target
// call with a TargetCall; the crash guard (findings.cpp) times only those.
#pragma once

namespace kprop {

// Marks one in-process target call for its lifetime: while the crash guard
// is armed, the call must end within the case timeout or it is a hang.
class TargetCall {
 public:
  TargetCall();
  ~TargetCall();
  TargetCall(const TargetCall&) = delete;
  TargetCall& operator=(const TargetCall&) = delete;
};

// A built-in CUDA target found its device in this process (the runtime is
// started). CUDA does not survive fork: --jobs workers forked after that
// could not run it (every call an initialisation error), so later runs in
// this process check their cases here (jobs 1, the same verdicts). Today
// the caller runs the target itself when it shrinks a failure (a --reference
// cuda across --mutants, or a failing cuda target before a folder replay).
void note_in_process_cuda(bool started = true);  // false: tests only
bool in_process_cuda();

// Marks a call into a child process whose transport times it (an exec:
// worker, a forked plugin host: start-up allowance plus the case timeout,
// ChildTransport): the enclosing TargetCall's clock stops while it runs and
// resumes with what was left. A declared op's exec: reference called from
// an in-process target (its `reference`, its `naive`) ran out the case
// timeout while the worker started, a false hang of the target.
class TransportedCall {
 public:
  TransportedCall();
  ~TransportedCall();
  TransportedCall(const TransportedCall&) = delete;
  TransportedCall& operator=(const TransportedCall&) = delete;

 private:
  long long left_ns_ = 0;  // what the TargetCall had left (0: none running)
};

// A setting of the run whose check is running on this thread, set for a
// scope (check_one sets each for the check's lifetime) and read by what
// the check calls without the run at hand; T{} when no check is running.
template <typename T, typename Tag>
class RunSetting {
 public:
  explicit RunSetting(T value) : previous_(value_) { value_ = value; }
  ~RunSetting() { value_ = previous_; }
  RunSetting(const RunSetting&) = delete;
  RunSetting& operator=(const RunSetting&) = delete;
  static T current() { return value_; }

 private:
  T previous_;
  static inline thread_local T value_{};
};

// The case timeout in seconds, set whether or not the crash guard is
// armed (--jobs workers and the fuzz harness check unguarded). An oracle a
// family calls through a transport of its own (a declared op's exec: or
// plugin: reference) times its calls by it: the transport's default of 30 s
// ignored run.case_timeout_s and --case-timeout, and its hang message named
// that 30 s.
class CaseTimeout : public RunSetting<double, CaseTimeout> {
 public:
  using RunSetting::RunSetting;
};

// run.padded_tensors. A declared op's plugin: mutant is opened by the
// family (its transport is the declaration's, not the run's), and reads it
// there: under a profile with padded_tensors it got contiguous tensors, so
// a kernel indexing as if contiguous passed the very profile listed for it.
class PaddedTensors : public RunSetting<bool, PaddedTensors> {
 public:
  using RunSetting::RunSetting;
};

}  // namespace kprop
