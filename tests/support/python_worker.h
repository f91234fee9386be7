// Test support for the NumPy worker examples: an exec: target running
// examples/python/<script> with the suite's python3 (KPROP_PYTHON, a python3
// that has NumPy; empty when there is none and the test skips).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "kprop/runner.h"
#include "kprop/spec.h"
#include "kprop/testing.h"

namespace kprop_test {

inline std::string python_worker(const std::string& script, std::string args = "") {
  while (!args.empty() && args.front() == ' ') args.erase(0, 1);
  std::string target =
      std::string("exec:") + KPROP_PYTHON + " " + KPROP_SOURCE_DIR "/examples/python/" + script;
  return args.empty() ? target : target + " " + args;
}

// Runs the spec file on the worker examples/python/<script> [args].
inline kprop::RunReport run_python_worker(const std::string& spec, const std::string& script,
                                          const std::string& args, kprop::RunOptions options) {
  options.target = python_worker(script, args);
  return kprop::run_spec(kprop::load_spec(spec), options);
}

// Each bug planted with `--bug NAME` must fail the spec with a counterexample
// (shrunk for the first invariant it breaks only).
inline void expect_planted_bugs_caught(const std::string& spec, const std::string& script,
                                       std::initializer_list<const char*> bugs, kprop::RunOptions options) {
  options.stop_on_first_failure = true;
  for (const char* bug : bugs) {
    const kprop::RunReport report = run_python_worker(spec, script, std::string("--bug ") + bug, options);
    EXPECT_EQ(report.status, kprop::RunStatus::failed) << bug;
    EXPECT_NE(kprop::testing::killed_by(report), "") << bug;
  }
}

}  // namespace kprop_test

#define KPROP_REQUIRE_PYTHON() \
  if (std::string(KPROP_PYTHON).empty()) GTEST_SKIP() << "no python3 with NumPy"
