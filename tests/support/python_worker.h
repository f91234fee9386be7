// Test support for the NumPy worker examples: an exec: target running
// examples/python/<script> with the suite's python3 (KPROP_PYTHON, a python3
// that has NumPy; empty when there is none and the test skips).
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace kprop_test {

inline std::string python_worker(const std::string& script, std::string args = "") {
  while (!args.empty() && args.front() == ' ') args.erase(0, 1);
  std::string target =
      std::string("exec:") + KPROP_PYTHON + " " + KPROP_SOURCE_DIR "/examples/python/" + script;
  return args.empty() ? target : target + " " + args;
}

}  // namespace kprop_test

#define KPROP_REQUIRE_PYTHON() \
  if (std::string(KPROP_PYTHON).empty()) GTEST_SKIP() << "no python3 with NumPy"
