// Runner on the toy family: verdicts, shrinking to the known minimum,
// determinism, give-up, crash and skip statuses, replay, reporters.
#include "kprop/runner.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kprop/interrupt.h"
#include "kprop/report.h"
#include "tests/support/temp_dir.h"
#include "toy_family.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

Spec toy_spec(const std::string& extra = "") {
  return parse_spec("spec: toy\nfamily: toy.sum\nrun: {trials: 200, seed: 5}\n" + extra, "toy.yaml");
}

RunOptions options(const std::string& target, const fs::path& corpus = {}) {
  RunOptions o;
  o.target = target;
  o.write_corpus = !corpus.empty();
  o.corpus_dir = corpus.string();
  return o;
}

using testing::TempDir;

TEST(Runner, ReferencePassesEveryInvariantItChecks) {
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const RunReport r = run_spec(spec, options("reference"));
  EXPECT_EQ(r.status, RunStatus::passed);
  EXPECT_EQ(r.seed, 5u);
  ASSERT_EQ(r.invariants.size(), 1u);
  EXPECT_EQ(r.invariants[0].passed, 200);
}

// A caller's RunOptions with no trials is told so, not "--shard 0/1: the
// run has 0 trial(s)" (a flag it never gave).
TEST(Runner, NoTrialsIsSaidInTheCallersWords) {
  RunOptions o = options("reference");
  o.trials = 0;
  try {
    run_spec(toy_spec("invariants: [matches_reference]\n"), o);
    FAIL() << "ran with 0 trials";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("trials = 0: a run needs at least 1 (RunOptions::trials"),
              std::string::npos)
        << e.what();
  }
}

TEST(Runner, FailureShrinksToTheKnownMinimum) {
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const RunReport r = run_spec(spec, options("drops_last"));
  ASSERT_EQ(r.status, RunStatus::failed);
  const auto& cx = r.invariants[0].counterexample;
  ASSERT_TRUE(cx);
  const toy::Case c = toy::Traits::from_yaml(YAML::Load(cx->case_yaml));
  ASSERT_EQ(c.xs.size(), 3u) << cx->case_yaml;
  EXPECT_EQ(c.xs[0], 0);
  EXPECT_EQ(c.xs[1], 0);
  EXPECT_EQ(std::abs(c.xs[2]), 1);
  EXPECT_FALSE(cx->replay_command.empty());
  ASSERT_EQ(cx->measured.size(), 2u);
}

// The events a listener gets (the progress line is one): started and
// finished once each, one case_started and case_done per drawn case, the shrink steps and the
// failure of the failing invariant, in that order.
struct Recorder final : RunListener {
  std::vector<std::string> events;
  int64_t cases = 0, shrink_steps = 0, checked = 0, wanted = 0, started = 0;
  void run_started(const RunReport& h) override { events.push_back("started " + h.target); }
  void case_started(int64_t index, int64_t done, int64_t, int, double) override {
    if (index != cases + 1 || done != checked) events.push_back("start out of order");
    started = index;
  }
  void case_done(int64_t index, int64_t done, int64_t trials, int, double) override {
    if (index != ++cases || index != started) events.push_back("case out of order");
    if (done < checked || done > std::min(index, trials)) events.push_back("done count wrong");
    checked = done, wanted = trials;
  }
  void shrinking(const std::string& what, int64_t from, int64_t to, double) override {
    ++shrink_steps;
    if (to > from) events.push_back("shrink grew " + what);
  }
  void failure(const Finding& f) override { events.push_back("failure " + f.invariant); }
  void run_finished(const RunReport& r) override {
    events.push_back(std::string("finished ") + run_status_name(r.status));
  }
  // A run of `target` on `spec` that tells this recorder.
  RunReport run(const Spec& spec, const std::string& target) {
    RunOptions o = options(target);
    o.listener = this;
    return run_spec(spec, o);
  }
};

TEST(Runner, ListenerGetsTheRunsEvents) {
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  Recorder rec;
  const RunReport r = rec.run(spec, "drops_last");
  ASSERT_EQ(r.status, RunStatus::failed);
  EXPECT_EQ(rec.events,
            (std::vector<std::string>{"started drops_last", "failure matches_reference", "finished failed"}));
  EXPECT_EQ(rec.cases, r.trials);
  EXPECT_EQ(rec.shrink_steps, r.invariants[0].counterexample->shrink_steps);

  Recorder pass;
  const RunReport ok = pass.run(spec, "reference");
  EXPECT_EQ(pass.events, (std::vector<std::string>{"started reference", "finished passed"}));
  EXPECT_EQ(pass.cases, ok.trials);
  EXPECT_EQ(pass.checked, ok.trials_wanted);  // the last case done: every invariant has its trials
  EXPECT_EQ(pass.shrink_steps, 0);
}

TEST(Runner, SameSeedSameCasesAndVerdicts) {
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  for (const char* target : {"reference", "drops_last"}) {
    const RunReport a = run_spec(spec, options(target)), b = run_spec(spec, options(target));
    EXPECT_EQ(a.status, b.status);
    EXPECT_EQ(a.trials, b.trials);
    EXPECT_EQ(a.invariants[0].trials_to_fail, b.invariants[0].trials_to_fail);
    if (a.invariants[0].counterexample) {
      EXPECT_EQ(a.invariants[0].counterexample->case_yaml, b.invariants[0].counterexample->case_yaml);
    }
  }
  RunOptions other = options("drops_last");
  other.seed = 6;
  const RunReport c = run_spec(spec, other);
  EXPECT_EQ(c.seed, 6u);
}

TEST(Runner, TooManyDiscardsGivesUp) {
  const Spec spec = toy_spec("invariants: [only_long_lists]\n");
  Recorder rec;
  const RunReport r = rec.run(spec, "reference");
  // The progress line's counts: more cases drawn than wanted, and the
  // checked ones (not the drawn ones) set against the wanted.
  EXPECT_EQ(rec.events, (std::vector<std::string>{"started reference", "finished gave up"}));
  EXPECT_GT(rec.cases, rec.wanted);
  EXPECT_EQ(rec.wanted, r.trials_wanted);
  EXPECT_EQ(rec.checked, r.invariants[0].passed);
  EXPECT_LT(rec.checked, rec.wanted);
  EXPECT_EQ(r.status, RunStatus::gave_up);
  EXPECT_EQ(exit_code(r.status), 2);
  EXPECT_EQ(r.invariants[0].status, InvariantStatus::gave_up);
  EXPECT_EQ(r.invariants[0].last_discard, "list too short");
}

TEST(Runner, ThrowingTargetIsACrashWithTheCaseSaved) {
  TempDir dir;
  const Spec spec = toy_spec("domain: {value: [10, 15]}\ninvariants: [matches_reference]\n");
  const RunReport r = run_spec(spec, options("throws_on_13", dir.path));
  EXPECT_EQ(r.status, RunStatus::crashed);
  EXPECT_EQ(exit_code(r.status), 3);
  EXPECT_NE(r.detail.find("unlucky"), std::string::npos);
  const auto files = list_corpus((dir.path / "toy").string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(read_entry(files[0]).found_by, "crash");
}

TEST(Runner, UnavailableDeviceIsSkippedNotPassed) {
  const RunReport r = run_spec(toy_spec(), options("no_device"));
  EXPECT_EQ(r.status, RunStatus::skipped);
  EXPECT_EQ(r.detail, "skipped: no CUDA device");
  for (const auto& inv : r.invariants) EXPECT_EQ(inv.status, InvariantStatus::not_run);
}

TEST(Runner, UnknownInvariantFilterIsAnInputError) {
  RunOptions o = options("reference");
  o.only_invariants = {"matches_referense"};
  try {
    run_spec(toy_spec(), o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'matches_reference'"), std::string::npos) << e.what();
  }
}

TEST(Runner, StoredCounterexampleReplays) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const RunReport r = run_spec(spec, options("drops_last", dir.path));
  const std::string path = r.invariants[0].counterexample->corpus_path;
  ASSERT_TRUE(fs::exists(path));
  const CorpusEntry e = read_entry(path);
  EXPECT_EQ(e.found_against, "drops_last");
  EXPECT_EQ(e.seed, 5u);
  // On the reference it passes; on the mutant it was found against, it still fails.
  const auto rows = replay_corpus(spec, path, options("reference"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].target_ok) << rows[0].target_detail;
  EXPECT_TRUE(rows[0].mutant_checked);
  EXPECT_TRUE(rows[0].mutant_still_fails);
  const auto on_mutant = replay_corpus(spec, path, options("drops_last"));
  EXPECT_FALSE(on_mutant[0].target_ok);
}

TEST(Runner, MutantsTableReportsKillsAndSurvivors) {
  // Values 10..15: the list-length and 13 bugs show, the element-7 ones cannot.
  const Spec spec = toy_spec("domain: {value: [10, 15]}\ninvariants: [matches_reference]\n");
  const auto rows = run_mutants(spec, options(""));
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_TRUE(rows[0].killed);
  EXPECT_EQ(rows[0].killed_by, "matches_reference");
  EXPECT_TRUE(rows[1].killed);
  EXPECT_EQ(rows[1].killed_by, "crash");
  EXPECT_FALSE(rows[2].killed);  // segfaults on 7
  EXPECT_FALSE(rows[3].killed);  // hangs on 7
  EXPECT_TRUE(rows[4].killed);   // interrupts_while_shrinking: drops the last element
  EXPECT_NE(make_reporter("text")->mutants(spec, rows).find("FAILED: 3 of 5 mutants killed"),
            std::string::npos);
}

// A reference that cannot run here skips every mutant: the table says so
// and exits 0 as a skipped run does, not "FAILED: 0 of 5" with exit 0.
TEST(Runner, MutantsThatCouldNotRunAreSkippedNotFailed) {
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  RunOptions o = options("");
  o.reference = "no_device";
  const auto rows = run_mutants(spec, o);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_TRUE(mutants_skipped(rows));
  EXPECT_EQ(mutants_exit_code(rows), 0);
  const std::string text = make_reporter("text")->mutants(spec, rows);
  EXPECT_NE(text.find("SKIPPED: none of the 5 mutants could run here"), std::string::npos) << text;
  // Each row says why once ("skipped   skipped: ..." said the verdict twice).
  EXPECT_NE(text.find(" skipped   the reference 'no_device' cannot run here: no CUDA device\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(nlohmann::json::parse(make_reporter("json")->mutants(spec, rows))["skipped"], true);
  // The HTML page says so too (it showed "0 of 5 killed" in the failed red).
  const std::string html = make_reporter("html")->mutants(spec, rows);
  EXPECT_NE(html.find("<span class=\"status skipped\">SKIPPED: 0 of 5 killed</span>"), std::string::npos);
  // One that ran and survived among skipped ones: not every mutant was killed.
  auto mixed = rows;
  mixed[0].report.status = RunStatus::passed;
  EXPECT_FALSE(mutants_skipped(mixed));
  EXPECT_EQ(mutants_exit_code(mixed), 1);
}

// --mutants --invariant NAME where a mutant runs under a profile that does
// not check NAME: that mutant is skipped, saying why, and the run is no pass
// (it ended the whole run with "not in spec toy under profile p").
TEST(Runner, MutantsUnderAProfileWithoutTheInvariantAreSkippedSayingWhy) {
  const Spec spec = toy_spec(
      "domain: {value: [10, 15]}\ninvariants: [matches_reference, sum_parity]\n"
      "profiles:\n  p:\n    mutants: [drops_last]\n    skip_invariants: [sum_parity]\n");
  RunOptions o = options("");
  o.only_invariants = {"sum_parity"};
  const auto rows = run_mutants(spec, o);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].mutant, "drops_last");
  EXPECT_STREQ(mutant_verdict(rows[0]), "skipped");
  EXPECT_EQ(rows[0].report.detail,
            "not run: profile p (where its bug shows) checks no --invariant sum_parity");
  EXPECT_EQ(mutants_exit_code(rows), 1);
  // Every name it has still runs there.
  o.only_invariants = {"sum_parity", "matches_reference"};
  const auto both = run_mutants(spec, o);
  EXPECT_TRUE(both[0].killed);
  EXPECT_EQ(both[0].killed_by, "matches_reference");
  EXPECT_EQ(both[0].report.profile, "p");
}

// Ctrl-C during --mutants: the mutants not yet run are listed as such and
// the run exits 130. (They were left out, and "PASSED: 10 of 10 mutants
// killed" with exit 0 hid the 4 of 14 that never ran.)
TEST(Runner, MutantsInterruptedListTheRestAsNotRun) {
  const Spec spec = toy_spec("domain: {value: [10, 15]}\ninvariants: [matches_reference]\n");
  install_interrupt_handler();
  std::raise(SIGINT);  // before the first mutant: the handler only notes it
  const auto rows = run_mutants(spec, options(""));
  const int code = mutants_exit_code(rows);
  const std::string text = make_reporter("text")->mutants(spec, rows);
  const auto json = nlohmann::json::parse(make_reporter("json")->mutants(spec, rows));
  clear_interrupt();
  ASSERT_EQ(rows.size(), 5u);
  for (const auto& row : rows) {
    EXPECT_FALSE(row.killed) << row.mutant;
    EXPECT_STREQ(mutant_verdict(row), "interrupted") << row.mutant;
  }
  EXPECT_EQ(code, 130);
  EXPECT_NE(text.find("not run: interrupted before it started"), std::string::npos) << text;
  EXPECT_NE(text.find("INTERRUPTED: 0 of 5 mutants killed"), std::string::npos) << text;
  EXPECT_EQ(json["all_killed"], false);
  EXPECT_EQ(json["exit_code"], 130);
  EXPECT_EQ(json["mutants"].size(), 5u);
}

// A report of spec toy that ended in `status`, for a reporter to print.
RunReport toy_report(RunStatus status) {
  RunReport r;
  r.spec = "toy";
  r.status = status;
  return r;
}

// A kernel's error text reaches the text report as it said it, but it can
// neither forge a line at the margin (a "PASSED:" of its own under a crash)
// nor drive the terminal (ESC, CR): the report shows those escaped.
TEST(Reporters, AKernelsMessageCannotForgeTheTextReportsVerdict) {
  RunReport r = toy_report(RunStatus::crashed);
  const std::string said = "line1\nPASSED: all good\r\x1b[32mgreen";
  r.detail = "target reported an error: " + said;
  InvariantReport inv{"matches_reference"};
  inv.status = InvariantStatus::not_run;
  Finding f;
  f.kind = "error";
  f.message = said;
  inv.counterexample = f;
  r.invariants.push_back(inv);
  const std::string text = make_reporter("text")->run(r);
  EXPECT_EQ(text.find("\nPASSED"), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_NE(text.find("  line1\n  PASSED: all good\\x0d\\x1b[32mgreen\n"), std::string::npos) << text;
  EXPECT_NE(text.find("CRASHED: target reported an error: line1\\nPASSED: all good\\x0d\\x1b[32mgreen"),
            std::string::npos)
      << text;
}

// A case too large to read in a terminal (one that could not shrink: an op
// whose reference ran out of memory printed a million values) is cut short
// in the text, JUnit and HTML reports, saying where the whole case is; a
// small case, as a shrunk one is, prints whole, and so does one stored
// nowhere; JSON keeps every case whole. (The HTML page printed it whole: a
// softmax_topk --mutants page of 131072-logit cases was 7 MB.)
TEST(Reporters, ACaseTooLargeToPrintIsCutShortAndSaysWhereItIs) {
  RunReport r = toy_report(RunStatus::failed);
  InvariantReport inv{"matches_reference"};
  inv.status = InvariantStatus::failed;
  Finding f;
  f.invariant = "matches_reference";
  f.kind = "invariant";
  f.corpus_path = "/tmp/big.yaml";
  std::string values = "x: [";
  for (int i = 0; i < 100000; ++i) values += "0, ";
  f.case_yaml = "dtype: f64\n" + values + "0]\n";
  inv.counterexample = f;
  r.invariants.push_back(inv);
  const std::string text = make_reporter("text")->run(r);
  EXPECT_LT(text.size(), 10000u);
  EXPECT_NE(text.find("    dtype: f64\n    x: [0, 0, "), std::string::npos) << text.substr(0, 3000);
  EXPECT_NE(text.find(" ... (298006 more characters)\n"), std::string::npos) << text.substr(0, 3000);
  EXPECT_NE(text.find("(cut short: the whole case is in /tmp/big.yaml)"), std::string::npos);
  EXPECT_LT(make_reporter("junit")->run(r).size(), 10000u);
  const std::string html = make_reporter("html")->run(r);
  EXPECT_LT(html.size(), 100000u);
  EXPECT_NE(html.find("(cut short: the whole case is in /tmp/big.yaml)"), std::string::npos);
  EXPECT_GT(make_reporter("json")->run(r).size(), f.case_yaml.size());
  // Past 1 MiB, a stored case is not embedded in JSON: its file has it.
  std::string more = "dtype: f64\nx: [";
  for (int i = 0; i < 400000; ++i) more += "0, ";
  r.invariants[0].counterexample->case_yaml = more + "0]\n";
  const auto big = nlohmann::json::parse(make_reporter("json")->run(r))["invariants"][0]["counterexample"];
  EXPECT_TRUE(big["case_yaml"].is_null());
  EXPECT_EQ(big["case_yaml_bytes"], more.size() + 3);
  EXPECT_EQ(big["corpus_path"], "/tmp/big.yaml");
  r.invariants[0].counterexample->corpus_path = "";  // stored nowhere: the print is the only copy
  EXPECT_GT(make_reporter("json")->run(r).size(), more.size());
  r.invariants[0].counterexample->case_yaml = f.case_yaml;
  EXPECT_NE(make_reporter("text")->run(r).find(f.case_yaml.substr(11, 5000)), std::string::npos);
  r.invariants[0].counterexample->corpus_path = "/tmp/big.yaml";
  r.invariants[0].counterexample->case_yaml = "dtype: f64\nx: [0, 1]\n";
  EXPECT_NE(make_reporter("text")->run(r).find("    dtype: f64\n    x: [0, 1]\n  stored: /tmp/big.yaml"),
            std::string::npos);
}

// A run cut short by Ctrl-C is an error in JUnit, not only skipped tests.
TEST(Reporters, JunitReportsAnInterruptedRunAsAnError) {
  RunReport r = toy_report(RunStatus::interrupted);
  r.detail = "interrupted (Ctrl-C)";
  const std::string xml = make_reporter("junit")->run(r);
  EXPECT_NE(xml.find("errors=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("type=\"interrupted\""), std::string::npos) << xml;
}

// The suites of --mutants and --replay carry their counts in the header, as
// a run's does (CI tools read those: a suite of survivors said 0 failures).
// A mutant skipped where others ran is no kill (exit 1): a failure, not a
// skip (the suite said 0 failures of a run that exited 1); all of them
// skipped (no device here) is a skipped suite. A file an interrupt kept from
// being replayed is an error, as an interrupted run's is.
TEST(Reporters, JunitMutantAndReplaySuitesCountTheirFailuresAndSkips) {
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  std::vector<MutantRow> mutants(3);
  mutants[0].killed = true;
  mutants[1].killed = false;  // survived
  mutants[2].report.status = RunStatus::skipped;
  const std::string m = make_reporter("junit")->mutants(spec, mutants);
  EXPECT_NE(m.find("tests=\"3\" failures=\"2\" errors=\"0\" skipped=\"0\""), std::string::npos) << m;
  EXPECT_EQ(mutants_exit_code(mutants), 1);
  std::vector<MutantRow> none_ran(2);
  for (auto& row : none_ran) row.report.status = RunStatus::skipped;
  const std::string s = make_reporter("junit")->mutants(spec, none_ran);
  EXPECT_NE(s.find("tests=\"2\" failures=\"0\" errors=\"0\" skipped=\"2\""), std::string::npos) << s;
  std::vector<ReplayRow> replays(5);
  replays[0].checked = 1;                                // passed
  replays[1].error = "corrupt";                          // error
  replays[2].target_ok = false, replays[2].checked = 1;  // failed
  replays[3].declined = true;                            // skipped
  replays[4].interrupted = true;                         // not replayed
  const std::string r = make_reporter("junit")->replay(spec, replays);
  EXPECT_NE(r.find("tests=\"5\" failures=\"1\" errors=\"2\" skipped=\"1\""), std::string::npos) << r;
}

// With --stats every invariant runs on after the kill: the mutants table
// shows the killer's trial, not that of the last invariant that failed.
TEST(Reporters, TheMutantsTableShowsTheKillersNumbers) {
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  MutantRow row;
  row.mutant = "drops_last";
  row.killed = true, row.killed_by = "first_killer";
  for (const auto& [name, trial] : {std::pair{"first_killer", 3}, {"later", 21}}) {
    InvariantReport inv{name};
    inv.status = InvariantStatus::failed;
    inv.trials_to_fail = trial;
    row.report.invariants.push_back(inv);
  }
  const std::string text = make_reporter("text", true)->mutants(spec, {row});
  const std::string line = text.substr(text.find("  drops_last"), text.find('\n', text.find("  drops_last")));
  EXPECT_NE(line.find("first_killer                     3"), std::string::npos) << text;
}

// The HTML page says what the text says of what was not checked: the
// target's decline reasons, the outputs no invariant read, and why an
// invariant was n/a or gave up (it showed none of them).
TEST(Reporters, HtmlSaysWhatWasNotChecked) {
  RunReport r = toy_report(RunStatus::passed);
  r.declined = 7;
  r.decline_reasons = {{"needs 7+ elements, got 3", 4}, {"needs 7+ elements, got 5", 3}};
  r.unchecked_outputs = {"toy.sum", "toy.count"};
  InvariantReport na{"sum_parity"};
  na.status = InvariantStatus::not_applicable;
  na.last_discard = "the target hides its parity";
  r.invariants.push_back(na);
  const std::string html = make_reporter("html")->run(r);
  EXPECT_NE(html.find("7 case(s) declined by the target (not checked): needs 7+ elements, got … (7)"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("unchecked outputs: toy.sum, toy.count (no invariant of this run reads them)"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<b>the target hides its parity</b>"), std::string::npos) << html;
}

// The HTML page counts as JSON and text do: a failed invariant's checked
// cases include the one it failed on, and the targeted search's cases are
// said with its section. (It showed the passes, and no search at all.)
TEST(Reporters, HtmlCountsAsTheOthersAndShowsTheSearch) {
  RunReport r = toy_report(RunStatus::failed);
  r.trials = 36;
  r.checked = 70;
  r.search.ran = true;
  r.search.cases = 40;
  r.search.budget = 40;
  r.search.checked = 40;
  InvariantReport failed{"matches_reference"};
  failed.status = InvariantStatus::failed;
  failed.passed = 3;
  r.invariants.push_back(failed);
  const std::string html = make_reporter("html")->run(r);
  EXPECT_NE(html.find("<td>matches_reference</td><td>FAILED</td><td class=\"num\">4</td>"), std::string::npos)
      << html;
  EXPECT_NE(html.find("36 drawn + 40 by the search, 70 checked"), std::string::npos) << html;
  EXPECT_NE(html.find("<h2>Targeted search</h2><pre>  search: 40 of 40 cases"), std::string::npos) << html;
}

TEST(Reporters, JsonAndJunitAreWellFormed) {
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const RunReport r = run_spec(spec, options("drops_last"));
  const auto json = nlohmann::json::parse(make_reporter("json")->run(r));
  EXPECT_EQ(json["status"], "failed");
  EXPECT_EQ(json["exit_code"], 1);
  EXPECT_EQ(json["seed"], 5);
  EXPECT_TRUE(json["invariants"][0].contains("counterexample"));
  const std::string xml = make_reporter("junit")->run(r);
  EXPECT_NE(xml.find("<testsuite name=\"kprop.toy\" tests=\"1\" failures=\"1\""), std::string::npos) << xml;
  const std::string text = make_reporter("text")->run(r);
  EXPECT_NE(text.find("seed 5"), std::string::npos);
  EXPECT_NE(text.find("FAILED"), std::string::npos);
  EXPECT_EQ(make_reporter("yaml"), nullptr);
}

}  // namespace
}  // namespace kprop

namespace kprop {
namespace {

// Shards draw the same case sequence and split it by index, so the first
// failing case over all shards is the unsharded run's first failing case, and
// without discards the shards together check exactly its cases.
TEST(Runner, ShardsPartitionTheUnshardedRun) {
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const RunReport whole = run_spec(spec, options("drops_last"));
  const RunReport clean = run_spec(spec, options("reference"));
  int64_t first_failure = INT64_MAX, checked = 0;
  for (int64_t i = 0; i < 3; ++i) {
    RunOptions o = options("drops_last");
    o.shard_index = i;
    o.shard_count = 3;
    const RunReport r = run_spec(spec, o);
    if (r.status == RunStatus::failed)
      first_failure = std::min(first_failure, r.invariants[0].trials_to_fail);
    RunOptions c = options("reference");
    c.shard_index = i;
    c.shard_count = 3;
    const RunReport rc = run_spec(spec, c);
    EXPECT_EQ(rc.status, RunStatus::passed);
    checked += rc.invariants[0].passed;
  }
  EXPECT_EQ(first_failure, whole.invariants[0].trials_to_fail);
  EXPECT_EQ(checked, clean.invariants[0].passed);
}

}  // namespace
}  // namespace kprop
