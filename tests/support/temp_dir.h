// A folder of one's own for a test, and run options that write only there.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "kprop/runner.h"

namespace kprop::testing {

// <tmp>/kprop_<suite>_<pid>_<test>: a test's own (ctest -j runs tests of one
// binary in parallel processes), empty when the test starts and removed when
// it ends.
struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() / [] {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return "kprop_" + std::string(info->test_suite_name()) + "_" + std::to_string(::getpid()) + "_" +
           info->name();
  }();
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// A run of `target` whose corpus (written only with `corpus`) and scratch
// folders lie in `dir`.
inline RunOptions options_in(const TempDir& dir, const std::string& target, bool corpus = false) {
  RunOptions o;
  o.target = target;
  o.write_corpus = corpus;
  o.corpus_dir = (dir.path / "corpus").string();
  o.scratch_dir = (dir.path / "scratch").string();
  return o;
}

}  // namespace kprop::testing
