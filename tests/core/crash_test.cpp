// A target that crashes or hangs must not take the runner down silently:
// the case is stored in the corpus and the process exits 3.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kprop/corpus.h"
#include "kprop/fuzz_driver.h"
#include "kprop/report.h"
#include "kprop/runner.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

void run_until_death(const std::string& target, const fs::path& corpus, int jobs = 1) {
  const Spec spec = parse_spec(
      "spec: toy\nfamily: toy.sum\nrun: {trials: 200, seed: 3, case_timeout_s: 0.5}\n"
      "domain: {value: [5, 9]}\ninvariants: [matches_reference]\n",
      "toy.yaml");
  RunOptions o;
  o.target = target;
  o.corpus_dir = corpus.string();
  o.jobs = jobs;
  run_spec(spec, o);
}

class CrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A stand-in prop_runner for the replay check (RunOptions::replay_checker):
  // a shell script of `body`.
  fs::path replay_checker(const std::string& body) const {
    fs::create_directories(dir_);
    const fs::path script = dir_ / "replay.sh";
    std::ofstream(script) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(script, fs::perms::owner_all);
    return script;
  }
  // Named by test, not pid: the death test's child re-executes this binary.
  fs::path dir_ =
      fs::temp_directory_path() /
      (std::string("kprop_crash_test_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

TEST_F(CrashTest, SegfaultSavesTheCaseAndExitsThree) {
  EXPECT_EXIT(run_until_death("segfaults", dir_), ::testing::ExitedWithCode(3), "crashed with signal 11");
  const auto files = list_corpus((dir_ / "toy").string());
  ASSERT_EQ(files.size(), 1u);
  const CorpusEntry e = read_entry(files[0]);
  EXPECT_EQ(e.found_by, "crash");
  EXPECT_EQ(e.found_against, "segfaults");
  EXPECT_NE(emit_yaml(e.case_node).find("7"), std::string::npos);
}

TEST_F(CrashTest, HangIsStoppedByTheCaseTimeout) {
  EXPECT_EXIT(run_until_death("hangs", dir_), ::testing::ExitedWithCode(3), "hung");
  const auto files = list_corpus((dir_ / "toy").string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(read_entry(files[0]).found_by, "hang");
}

// --import gives an in-process target's calls --case-timeout, as a
// property run does: a hang is said at that timeout, not the spec's
// (import_fuzz_input used the spec's 30 s, so a target slower than the spec
// allows was a false hang even under a longer --case-timeout).
TEST_F(CrashTest, ImportedInputHangsAtTheGivenCaseTimeout) {
  const Spec spec = parse_spec(
      "spec: toy\nfamily: toy.sum\nrun: {case_timeout_s: 30}\n"
      "domain: {length: [3, 3], value: [7, 7]}\ninvariants: [matches_reference]\n",
      "toy.yaml");
  fs::create_directories(dir_);
  const std::string input = (dir_ / "input").string();
  std::ofstream(input) << std::string(16, '\x5a');
  const Impl target = resolve_target(spec, "hangs", 0.25);
  EXPECT_EXIT(import_fuzz_input(spec, target, input, (dir_ / "corpus").string(), true, 0.25),
              ::testing::ExitedWithCode(3), "hung \\(a call ran past case_timeout_s = 0.25 s;");
}

// With --jobs, a crash or hang in a forked job is not trusted: the runner
// checks that case again itself, so exactly one case is stored, by the
// runner, with the exit code of --jobs 1. (One death test per test: a
// threadsafe death test re-runs the test body up to its own statement.)
void expect_stored_once(const fs::path& dir, const std::string& found_by) {
  const auto files = list_corpus((dir / "toy").string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(read_entry(files[0]).found_by, found_by);
}

TEST_F(CrashTest, TwoJobsSegfaultIsStoredOnceByTheRunner) {
  EXPECT_EXIT(run_until_death("segfaults", dir_, 2), ::testing::ExitedWithCode(3), "crashed with signal 11");
  expect_stored_once(dir_, "crash");
}

TEST_F(CrashTest, ThreeJobsSegfaultIsStoredOnceByTheRunner) {
  EXPECT_EXIT(run_until_death("segfaults", dir_, 3), ::testing::ExitedWithCode(3), "crashed with signal 11");
  expect_stored_once(dir_, "crash");
}

TEST_F(CrashTest, JobsHangIsStoredOnceByTheRunner) {
  EXPECT_EXIT(run_until_death("hangs", dir_, 2), ::testing::ExitedWithCode(3), "hung");
  expect_stored_once(dir_, "hang");
}

// An isolated run's finding keeps its kind through its replay check: a
// target that died of a signal is reproduced only by a replay that dies of
// one again, not by one that only throws (both were kind "threw", so a
// replay that merely threw reproduced a segfault), and back. The re-run
// here is a stand-in prop_runner that answers with the given failure kind.
TEST_F(CrashTest, AReplayReproducesAFindingOnlyWithTheSameKindOfFailure) {
  fs::create_directories(dir_);
  struct Row {
    std::string target, kind, replayed_as, check;
  };
  for (const Row& row : {Row{"segfaults", "crash", "threw", "not_reproduced"},
                         Row{"segfaults", "crash", "crash", "reproduced"},
                         Row{"throws_on_13", "threw", "crash", "not_reproduced"},
                         Row{"throws_on_13", "threw", "threw", "reproduced"}}) {
    const fs::path script =
        replay_checker("echo '{\"files\": [{\"target_ok\": false, \"target_failure\": \"" + row.replayed_as +
                       "\", \"target_detail\": \"it failed\"}]}'");
    const Spec spec = parse_spec(
        "spec: toy\nfamily: toy.sum\nrun: {trials: 200, seed: 3, case_timeout_s: 5}\n"
        "domain: {value: [5, 13]}\ninvariants: [matches_reference]\n",
        "toy.yaml");
    RunOptions o;
    o.target = row.target;
    o.corpus_dir = (dir_ / "corpus").string();
    o.isolate = true;
    o.jobs = 1;
    o.replay_checker = script.string();
    const RunReport r = run_spec(spec, o);
    const std::string what = row.target + " replayed as " + row.replayed_as;
    ASSERT_TRUE(r.crash.has_value()) << what;
    EXPECT_EQ(r.crash->kind, "crash") << what;
    EXPECT_EQ(r.crash->failure_kind, row.kind) << what << ": " << r.crash->message;
    EXPECT_EQ(r.crash->while_checking, "matches_reference") << what;  // the invariant it happened under
    EXPECT_EQ(r.crash->replay_check, row.check) << what << ": " << r.crash->replay_check_detail;
    fs::remove_all(dir_ / "corpus");
  }
}

// --mutants: a kill whose stored case does not replay (the re-run gives no
// report, as when a family's shrinker yields a case its codec refuses) is
// moved out of the corpus, and the table says so under the mutant's row;
// every later replay of the folder would have failed on it.
TEST_F(CrashTest, AMutantsKillWhoseReplayDoesNotRunLeavesTheCorpus) {
  fs::create_directories(dir_);
  const fs::path script =
      replay_checker("echo 'kprop: error: bad case: x must hold exact values' >&2\nexit 2");
  const Spec spec = parse_spec(
      "spec: toy\nfamily: toy.sum\nrun: {trials: 200, seed: 3, case_timeout_s: 0.2}\ninvariants: "
      "[matches_reference]\n",
      "toy.yaml");
  RunOptions o;
  o.corpus_dir = (dir_ / "corpus").string();
  o.scratch_dir = (dir_ / "scratch").string();
  o.replay_checker = script.string();
  o.replay_check_corpus_only = true;
  o.isolate = true;  // as --mutants: the toy's crashing mutants take a child down
  o.jobs = 1;
  const auto rows = run_mutants(spec, o);
  int killed = 0;
  for (const auto& row : rows) killed += row.killed;
  ASSERT_GT(killed, 0);
  EXPECT_TRUE(list_corpus((dir_ / "corpus" / "toy").string()).empty());
  EXPECT_FALSE(list_corpus((dir_ / "scratch" / "toy").string()).empty());
  const std::string text = make_reporter("text")->mutants(spec, rows);
  EXPECT_NE(text.find("\n    WARNING: the replay command, re-run in a fresh process, did not run through"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace kprop
