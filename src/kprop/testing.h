// kprop inside your own GoogleTest binary: run a spec against a kernel linked
// into the test, through the same C ABI a plugin exports.
//
//   #include <kprop/testing.h>
//   extern "C" int my_attention_fwd(const kprop_attention_fwd_args*, char*, size_t);
//
//   TEST(MyKernel, FlashForward) {
//     KPROP_EXPECT_SPEC_PASSES("specs/attention_fwd.yaml", {{"kprop_attention_fwd",
//     (void*)&my_attention_fwd}});
//   }
//
// The spec's seed, trials and invariants apply; set KPROP_SEED or pass
// RunOptions to change them, a domain override for the dtypes or shapes
// the kernel takes, and a profile (run_in_process's last argument). A failure prints the shrunk
// counterexample and the stored corpus file.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "kprop/report.h"
#include "kprop/runner.h"

namespace kprop::testing {

// Entry points by ABI symbol name (kprop_attention_fwd, ...).
using EntryPoints = std::map<std::string, void*>;

// Loads the spec and runs it with the entry points as the target (named
// "in-process"). Corpus files go to options.corpus_dir (default corpus/).
// `domain`: domain keys replaced for this run, as prop_runner's --domain
// (e.g. "{dtypes: [f32, f64]}" for a kernel that takes only those: the
// dtypes it declines would otherwise fail the `declined` health check).
// `profile`: one of the spec's profiles, as prop_runner's --profile (its
// domain and run settings: run.padded_tensors reaches the entry points too).
RunReport run_in_process(const std::string& spec_path, const EntryPoints& entry_points,
                         RunOptions options = {}, const std::string& domain = "",
                         const std::string& profile = "");

// The first invariant that failed with a counterexample ("" if none): which
// property caught the bug.
inline std::string killed_by(const RunReport& report) {
  for (const auto& inv : report.invariants)
    if (inv.status == InvariantStatus::failed && inv.counterexample) return inv.name;
  return "";
}

// Passed only when the run passed: a skipped run (nothing checked: no GPU,
// every case declined) is not a pass, so EXPECT_TRUE(spec_passes(r)) fails on
// it; KPROP_EXPECT_SPEC_PASSES reports it as a GoogleTest skip instead.
inline ::testing::AssertionResult spec_passes(const RunReport& report) {
  if (report.status == RunStatus::passed) return ::testing::AssertionSuccess();
  if (report.status == RunStatus::skipped)
    return ::testing::AssertionFailure() << "skipped, not passed: " << report.detail;
  // A replay's table went to stderr; a run's report would say 0 cases drawn.
  if (report.replay) return ::testing::AssertionFailure() << report.detail;
  return ::testing::AssertionFailure() << make_reporter("text")->run(report);
}

}  // namespace kprop::testing

#define KPROP_EXPECT_SPEC_PASSES(spec_path, ...)                                                       \
  do {                                                                                                 \
    const ::kprop::RunReport kprop_report_ = ::kprop::testing::run_in_process(spec_path, __VA_ARGS__); \
    if (kprop_report_.status == ::kprop::RunStatus::skipped) GTEST_SKIP() << kprop_report_.detail;     \
    EXPECT_TRUE(::kprop::testing::spec_passes(kprop_report_));                                         \
  } while (0)
