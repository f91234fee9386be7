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

}  // namespace kprop
