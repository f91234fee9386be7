// Honest accounting: declined cases are never passes, early declines do not
// skip a run, health checks fail runs that checked too little, sizes reach
// max_size whatever the budget, every finding replays its own failure, JUnit
// tells crashes from failures, Ctrl-C keeps the case, a finding survives an
// unwritable corpus, a replayed folder survives a bad file, and a replay
// passes only files an invariant checked.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kprop/interrupt.h"
#include "kprop/report.h"
#include "kprop/runner.h"
#include "tests/support/temp_dir.h"
#include "toy_family.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

const char* const kToyRun = "{trials: 200, seed: 5}";

Spec toy_spec(const std::string& extra = "", const std::string& run = kToyRun) {
  return parse_spec("spec: toy\nfamily: toy.sum\nrun: " + run + "\n" + extra, "toy.yaml");
}

using testing::TempDir;

RunOptions options(const std::string& target, const TempDir& dir, bool corpus = false) {
  return testing::options_in(dir, target, corpus);
}

// A run of `target` on toy_spec(extra, run), its scratch folder the test's
// own (removed when the run ends): for a test that reads only the report.
RunReport toy_run(const std::string& target, const std::string& extra = "",
                  const std::string& run = kToyRun) {
  TempDir dir;
  return run_spec(toy_spec(extra, run), options(target, dir));
}

// reference_sums_its_list reads no output of the target, and comes first: a
// case the target declines is declined for it too (the target runs before a
// pass counts), not a pass of an invariant that never needed the target.
TEST(Accounting, DeclinedCasesAreCountedApartNeverAsPasses) {
  const RunReport r =
      toy_run("declines_short", "invariants: [reference_sums_its_list, matches_reference, sum_parity]\n",
              "{trials: 200, seed: 5, suppress_health_check: [declined]}");
  EXPECT_EQ(r.status, RunStatus::passed) << r.detail;
  EXPECT_GT(r.declined, 0);
  EXPECT_EQ(r.checked + r.declined, r.trials);
  for (const auto& inv : r.invariants) {
    EXPECT_EQ(inv.passed, r.checked) << inv.name;  // a pass is a case checked, nothing else
    EXPECT_EQ(inv.declined, r.declined) << inv.name;
  }
  ASSERT_FALSE(r.decline_reasons.empty());
  EXPECT_EQ(r.decline_reasons.begin()->first.rfind("needs 7+ elements", 0), 0u);
}

// A decline of a derived case (halves_add_up's halves of a list of 7 to 13)
// is that invariant's discard, with its reason: the case itself was not
// declined, and the invariants after it check it. (It was the case's
// decline: matches_reference lost those cases, and a target declining every
// derived case made a run SKIPPED, exit 0, whatever the others found.)
TEST(Accounting, ADeclinedDerivedCaseIsADiscardOfItsInvariantOnly) {
  const RunReport r =
      toy_run("declines_short", "domain: {length: [0, 30]}\ninvariants: [halves_add_up, matches_reference]\n",
              "{trials: 200, seed: 5, suppress_health_check: [declined, discarded], max_discard_ratio: 100}");
  EXPECT_EQ(r.status, RunStatus::passed) << r.detail;
  const InvariantReport &halves = r.invariants[0], &matches = r.invariants[1];
  EXPECT_EQ(matches.status, InvariantStatus::passed);
  EXPECT_EQ(matches.passed, 200);
  // halves_add_up, alive to the end, saw every case: a pass, a discard (a
  // half declined) or a decline (the list itself declined).
  EXPECT_EQ(halves.passed, 200);
  EXPECT_GT(halves.discarded, 0);
  EXPECT_EQ(halves.passed + halves.discarded + halves.declined, r.trials);
  EXPECT_EQ(halves.declined, r.declined);
  EXPECT_LT(matches.declined, r.declined);  // it was done before the run ended
  for (const auto& [reason, n] : halves.discard_reasons)
    EXPECT_EQ(reason.rfind("the target declined the derived case: needs 7+ elements, got ", 0), 0u) << reason;
}

TEST(Accounting, EarlyDeclinesDoNotSkipTheRun) {
  // Sizes start at 0: the first cases are short lists, every one declined.
  const RunReport r = toy_run("declines_short", "invariants: [matches_reference]\n",
                              "{trials: 200, seed: 5, suppress_health_check: [declined]}");
  EXPECT_NE(r.status, RunStatus::skipped);
  EXPECT_GT(r.checked, 0);
  EXPECT_GT(r.declined, 20);
}

TEST(Accounting, MostlyDecliningTargetFailsTheHealthCheckWithItsReasons) {
  const RunReport r = toy_run("declines_short", "invariants: [matches_reference]\n");
  EXPECT_EQ(r.status, RunStatus::gave_up);
  EXPECT_EQ(exit_code(r.status), 2);
  ASSERT_EQ(r.health.size(), 1u);
  EXPECT_EQ(r.health[0].check, "declined");
  EXPECT_NE(r.health[0].message.find("needs 7+ elements, got … ("), std::string::npos) << r.health[0].message;
  EXPECT_NE(r.health[0].message.find("suppress_health_check"), std::string::npos);
  const std::string text = make_reporter("text")->run(r);
  EXPECT_NE(text.find("HEALTH CHECK FAILED (declined)"), std::string::npos) << text;
}

// More than half declined is judged beyond chance: a target that declines
// half of the domain passes whatever the seed (a plain share > 1/2 failed it
// on about half the seeds: 487 of 969 declined failed, 472 of 973 passed),
// one that declines two thirds fails on every seed.
TEST(Accounting, TheDeclinedCheckIsNoCoinFlipAtHalf) {
  TempDir dir;
  // Lists of 4 to 12 values in [-1000, 1000]: nearly every case distinct,
  // so the hash's share is the share of cases (small lists repeat).
  const Spec spec = toy_spec(
      "domain: {length: [4, 12], value: [-1000, 1000]}\ninvariants: [matches_reference]\n", "{trials: 300}");
  int above_half = 0, below_half = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    RunOptions half = options("takes_half", dir);
    half.seed = seed;
    const RunReport r = run_spec(spec, half);
    EXPECT_EQ(r.status, RunStatus::passed) << "seed " << seed << ": " << r.declined << " of " << r.trials;
    (2 * r.declined > r.trials ? above_half : below_half) += 1;
    RunOptions third = options("takes_a_third", dir);
    third.seed = seed;
    const RunReport t = run_spec(spec, third);
    EXPECT_EQ(t.status, RunStatus::gave_up) << "seed " << seed << ": " << t.declined << " of " << t.trials;
    ASSERT_FALSE(t.health.empty()) << "seed " << seed;
    EXPECT_EQ(t.health[0].check, "declined");
  }
  // The shares straddle 1/2: the old rule would have failed some of these.
  EXPECT_GT(above_half, 0);
  EXPECT_GT(below_half, 0);
}

// A shard is judged on the whole run's evidence: its declined share, over N
// times its draws. Each of 4 shards of a 300-trial run that fails the check
// (two thirds declined) drew about 150 cases: on its own, too few to fail it
// beyond chance, so every shard passed where the run did not.
TEST(Accounting, ShardsOfARunThatDeclinesTooMuchFailAsItDoes) {
  TempDir dir;
  const Spec spec = toy_spec(
      "domain: {length: [4, 12], value: [-1000, 1000]}\ninvariants: [matches_reference]\n", "{trials: 100}");
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    RunOptions whole = options("takes_a_third", dir);
    whole.seed = seed;
    ASSERT_EQ(run_spec(spec, whole).status, RunStatus::gave_up) << "seed " << seed;
    int failed = 0;
    for (int64_t i = 0; i < 4; ++i) {
      RunOptions o = whole;
      o.shard_index = i, o.shard_count = 4;
      const RunReport r = run_spec(spec, o);
      failed += r.status == RunStatus::gave_up;
      EXPECT_NE(r.status, RunStatus::failed) << "seed " << seed << " shard " << i;
    }
    EXPECT_GT(failed, 0) << "seed " << seed;
  }
}

// Cases the target declines take the place of checked ones: where they use
// up the run's cases (max_discard_ratio 0: trials cases in all), the
// invariant checked fewer than `trials` and did not pass, unless the spec
// suppresses the declined health check. (It passed, exit 0, on the cases
// left, whatever their number, while under 50% of the cases were declined.)
TEST(Accounting, DeclinesThatUseUpTheCasesAreNoPass) {
  // Lists of 6 to 20: the short ones are declined (shorter than 7), under
  // the 50% of the declined check itself.
  const RunReport r =
      toy_run("declines_short", "domain: {length: [6, 20]}\ninvariants: [matches_reference]\n",
              "{trials: 200, seed: 5, max_discard_ratio: 0}");
  EXPECT_EQ(r.status, RunStatus::gave_up) << r.detail;
  EXPECT_EQ(exit_code(r.status), 2);
  ASSERT_EQ(r.invariants.size(), 1u);
  EXPECT_EQ(r.invariants[0].status, InvariantStatus::gave_up);
  EXPECT_GT(r.invariants[0].passed, 0);
  EXPECT_LT(r.invariants[0].passed, 200);
  ASSERT_EQ(r.health.size(), 1u);
  EXPECT_EQ(r.health[0].check, "declined");
  EXPECT_NE(r.health[0].message.find("declined (needs 7+ elements"), std::string::npos)
      << r.health[0].message;
  EXPECT_NE(r.health[0].message.find("used up the run's cases"), std::string::npos) << r.health[0].message;
  // Suppressed, the invariant passed on what it checked, and says how much.
  const RunReport a =
      toy_run("declines_short", "domain: {length: [6, 20]}\ninvariants: [matches_reference]\n",
              "{trials: 200, seed: 5, max_discard_ratio: 0, suppress_health_check: [declined]}");
  EXPECT_EQ(a.status, RunStatus::passed) << a.detail;
  EXPECT_EQ(a.invariants[0].passed + a.invariants[0].declined, 200);
}

TEST(Accounting, UnavailableTargetIsSkippedAtOnce) {
  const RunReport r = toy_run("no_device");
  EXPECT_EQ(r.status, RunStatus::skipped);
  EXPECT_EQ(r.trials, 1);
  EXPECT_EQ(r.checked, 0);
  const std::string text = make_reporter("text")->run(r);
  EXPECT_NE(text.find("SKIPPED: nothing was checked"), std::string::npos) << text;
}

// A target that becomes unavailable after it ran (a device lost mid-run)
// ends the run, and the run is no skip: what it checked before is not a
// pass (a health-check failure), and what failed before stays a failure.
// (It was SKIPPED, exit 0, with the failures dropped from the report.)
TEST(Accounting, ATargetLostMidRunIsNoPassAndNoSkip) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const RunReport lost = run_spec(spec, options("loses_device", dir));
  EXPECT_EQ(lost.status, RunStatus::gave_up) << lost.detail;
  EXPECT_GT(lost.checked, 0);
  ASSERT_EQ(lost.health.size(), 1u);
  EXPECT_EQ(lost.health[0].check, "unavailable");
  EXPECT_NE(lost.health[0].message.find("became unavailable after"), std::string::npos)
      << lost.health[0].message;
  EXPECT_NE(make_reporter("text")->run(lost).find("HEALTH CHECK FAILED (unavailable)"), std::string::npos);

  // Lost on the first case, after one invariant checked it (the target ran;
  // a metamorphic invariant's derived case found it gone): checked, so no
  // skip (it was SKIPPED, exit 0: the pass on that case was not yet counted).
  const Spec halves = toy_spec("domain: {length: [2, 2]}\ninvariants: [matches_reference, halves_add_up]\n");
  const RunReport first = run_spec(halves, options("loses_device_on_one", dir));
  EXPECT_EQ(first.status, RunStatus::gave_up) << first.detail;
  EXPECT_EQ(first.checked, 1);
  EXPECT_NE(first.detail.find("became unavailable after 1 checked case(s)"), std::string::npos)
      << first.detail;

  const RunReport failed = run_spec(spec, options("wrong_then_lost", dir));
  EXPECT_EQ(failed.status, RunStatus::failed) << failed.detail;
  EXPECT_EQ(exit_code(failed.status), 1);
  ASSERT_TRUE(failed.invariants[0].counterexample);
  const std::string xml = make_reporter("junit")->run(failed);
  EXPECT_NE(xml.find("failures=\"1\""), std::string::npos) << xml;
}

// A reference lost mid-run ends the run as a lost target does, but the
// target declined nothing: the case is not counted as its decline. (The
// report said "1 declined by the target (not checked): the reference ...
// cannot run here".)
TEST(Accounting, AReferenceLostMidRunIsNoDeclineOfTheTarget) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  RunOptions o = options("", dir);
  o.reference = "loses_device";
  const RunReport r = run_spec(spec, o);
  EXPECT_EQ(r.status, RunStatus::gave_up) << r.detail;
  EXPECT_GT(r.checked, 0);
  EXPECT_EQ(r.declined, 0);
  EXPECT_TRUE(r.decline_reasons.empty());
  EXPECT_EQ(r.invariants[0].declined, 0);
  EXPECT_NE(r.detail.find("the reference became unavailable after"), std::string::npos) << r.detail;
  const std::string text = make_reporter("text")->run(r);
  EXPECT_EQ(text.find("declined by the target"), std::string::npos) << text;
  EXPECT_NE(text.find("HEALTH CHECK FAILED (unavailable)"), std::string::npos) << text;
}

// After a built-in CUDA target ran in this process (as when the runner
// shrinks its failure), --jobs forks no workers: CUDA does not survive
// fork, and a forked worker's every call would be an initialisation error.
// The run checks its cases in this process, with the verdicts of --jobs 1.
TEST(Accounting, NoWorkersAreForkedOnceCudaRanInThisProcess) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  ASSERT_FALSE(in_process_cuda());
  RunOptions o = options("declines_in_forked_workers", dir);
  o.jobs = 2;
  EXPECT_GT(run_spec(spec, o).declined, 0);  // its cases ran in forked workers
  RunOptions cuda = options("pretend_cuda", dir);
  cuda.jobs = 1;
  EXPECT_EQ(run_spec(spec, cuda).status, RunStatus::passed);
  EXPECT_TRUE(in_process_cuda());
  const RunReport here = run_spec(spec, o);  // jobs 2, yet every case in this process
  note_in_process_cuda(false);
  EXPECT_EQ(here.status, RunStatus::passed) << here.detail;
  EXPECT_EQ(here.declined, 0);
  EXPECT_EQ(here.checked, 200);
}

// only_long_lists discards a case before the target runs; the target then
// declines it for matches_reference. The case is that invariant's discard,
// not also its decline. (It was both: an invariant's discards, declines and
// passes added up to more than the cases drawn.)
TEST(Accounting, ACaseDiscardedBeforeTheTargetDeclinedItCountsOnce) {
  const RunReport r =
      toy_run("declines_short", "invariants: [only_long_lists, matches_reference]\n",
              "{trials: 50, seed: 5, max_discard_ratio: 20, suppress_health_check: [declined, discarded]}");
  const InvariantReport& discarding = r.invariants[0];
  EXPECT_GT(r.declined, 0);
  EXPECT_GT(discarding.discarded, 0);
  EXPECT_LE(discarding.passed + discarding.discarded + discarding.declined, r.trials);
  EXPECT_EQ(discarding.declined, 0);
}

TEST(Accounting, AnInvariantThatCheckedNothingNeverPasses) {
  TempDir dir;
  // only_long_lists discards every case the domain can make.
  const Spec spec = toy_spec("invariants: [matches_reference, only_long_lists]\n",
                             "{trials: 20, seed: 5, max_discard_ratio: 1000000}");
  RunOptions o = options("reference", dir);
  o.time_budget_s = 0.5;
  const RunReport r = run_spec(spec, o);
  EXPECT_EQ(r.invariants[1].passed, 0);
  EXPECT_EQ(r.invariants[1].status, InvariantStatus::gave_up);
  EXPECT_EQ(r.status, RunStatus::gave_up);
  ASSERT_EQ(r.health.size(), 1u);
  EXPECT_EQ(r.health[0].check, "discarded");
  // The target declined nothing: no advice about what it takes.
  EXPECT_EQ(r.health[0].message.find("declined"), std::string::npos) << r.health[0].message;
}

// An invariant that checked nothing while the target declined cases: the
// declined ones may be all it observes (f16 stores on an f32-only target),
// which no wider domain fixes. The advice says so, with the decline reasons
// and how to narrow the domain (then the invariant is n/a).
TEST(Accounting, AnInvariantStarvedWhileTheTargetDeclinedSaysHowToNarrow) {
  const RunReport r =
      toy_run("declines_short", "invariants: [matches_reference, only_long_lists]\n",
              "{trials: 20, seed: 5, max_discard_ratio: 5, suppress_health_check: [declined]}");
  EXPECT_EQ(r.status, RunStatus::gave_up);
  EXPECT_GT(r.invariants[1].declined, 0);
  ASSERT_EQ(r.health.size(), 1u);
  const std::string& m = r.health[0].message;
  EXPECT_EQ(r.health[0].check, "discarded");
  EXPECT_NE(m.find(fmt::format("if the {} case(s) the target declined (needs 7+ elements",
                               r.invariants[1].declined)),
            std::string::npos)
      << m;
  EXPECT_NE(
      m.find("narrow the domain to what the target takes (prop_runner --domain '{KEY: VALUE}'), and it is "
             "reported n/a"),
      std::string::npos)
      << m;
}

// In a run that failed, an invariant that gave up is no health check (the
// run's health is not judged once it failed): JUnit says "gave up", as the
// text and JSON do, and still counts it as no pass.
TEST(Junit, AnInvariantThatGaveUpInAFailedRunIsNoHealthCheck) {
  const RunReport r =
      toy_run("drops_last", "invariants: [matches_reference, only_long_lists]\n", "{trials: 20, seed: 5}");
  ASSERT_EQ(r.status, RunStatus::failed);
  ASSERT_EQ(r.invariants[1].status, InvariantStatus::gave_up);
  EXPECT_TRUE(r.health.empty());
  const std::string xml = make_reporter("junit")->run(r);
  EXPECT_EQ(xml.find("health_check"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<failure message=\"gave up: 0 checked"), std::string::npos) << xml;
  EXPECT_NE(xml.find("failures=\"2\""), std::string::npos) << xml;
}

// A run that drew no case (a --time below the first) has no size reached:
// JSON's size_reached -1, and the text says no case was drawn (it said
// "sizes up to 0", a size the run never drew).
TEST(SizeSchedule, ARunThatDrewNoCaseReachedNoSize) {
  RunReport r;
  r.spec = "toy";
  r.family = "toy.sum";
  r.max_size = 100;
  r.status = RunStatus::gave_up;
  ASSERT_EQ(r.size_reached, -1);
  const std::string text = make_reporter("text")->run(r);
  EXPECT_NE(text.find("  cases: 0 drawn, 0 checked; no size reached: no case was drawn (max_size 100)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("sizes up to"), std::string::npos) << text;
  EXPECT_EQ(nlohmann::json::parse(make_reporter("json")->run(r))["size_reached"], -1);
  r.trials = 1, r.size_reached = 0;
  EXPECT_NE(make_reporter("text")->run(r).find("; sizes up to 0 of max_size 100\n"), std::string::npos);
}

TEST(SizeSchedule, MoreTrialsAndATimeLimitStillReachMaxSize) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  RunOptions o = options("reference", dir);
  o.trials = 100000000;
  o.time_budget_s = 0.3;
  const RunReport r = run_spec(spec, o);
  EXPECT_TRUE(r.time_budget_hit);
  EXPECT_EQ(r.size_reached, r.max_size);
  // ... and the run says it did not do what was asked.
  ASSERT_FALSE(r.health.empty());
  EXPECT_EQ(r.health.back().check, "too_slow");
  // A mutant that needs lists of 3+ is found under the same budget.
  const RunReport m = run_spec(spec, [&] {
    RunOptions mo = options("drops_last", dir);
    mo.trials = 100000000;
    mo.time_budget_s = 5;
    return mo;
  }());
  EXPECT_EQ(m.status, RunStatus::failed);
}

TEST(SizeSchedule, TimeZeroMeansNoTimeLimit) {
  TempDir dir;
  RunOptions o = options("reference", dir);
  o.trials = 50;
  o.time_budget_s = 0;
  const RunReport r = run_spec(toy_spec("invariants: [matches_reference]\n"), o);
  EXPECT_EQ(r.status, RunStatus::passed);
  EXPECT_EQ(r.invariants[0].passed, 50);
  EXPECT_FALSE(r.time_budget_hit);
}

TEST(Findings, EachFailureHasItsOwnFileAndReplayThatReproducesIt) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference, sum_parity]\n");
  RunOptions o = options("drops_last", dir);  // --no-corpus: the scratch folder
  o.shard_index = 1;
  o.shard_count = 2;
  o.trials = 150;
  const RunReport r = run_spec(spec, o);
  ASSERT_EQ(r.status, RunStatus::failed);
  // The failing case's index is the unsharded run's, and said so: "after 56
  // trials" beside "cases: 20 drawn" read as this shard's count.
  EXPECT_EQ(r.shard, "1/2");
  const std::string text = make_reporter("text")->run(r);
  EXPECT_NE(
      text.find(fmt::format("at case {} of the unsharded run (shard 1/2;", r.invariants[0].trials_to_fail)),
      std::string::npos)
      << text;
  EXPECT_EQ(nlohmann::json::parse(make_reporter("json")->run(r))["shard"], "1/2");
  const auto findings = r.findings();
  ASSERT_EQ(findings.size(), 2u);
  EXPECT_NE(findings[0]->corpus_path, findings[1]->corpus_path);
  for (const Finding* f : findings) {
    ASSERT_TRUE(fs::exists(f->corpus_path)) << f->corpus_path;
    EXPECT_EQ(fs::path(f->corpus_path).parent_path(), dir.path / "scratch" / "toy");
    EXPECT_FALSE(f->in_corpus);
    EXPECT_NE(f->replay_command.find("--replay " + f->corpus_path), std::string::npos) << f->replay_command;
    EXPECT_NE(f->replay_command.find("--invariant " + f->invariant), std::string::npos) << f->replay_command;
    // The replay (no seed, trials or shard needed) fails with this finding's invariant.
    RunOptions ro = options("drops_last", dir);
    ro.only_invariants = {f->invariant};
    const auto rows = replay_corpus(spec, f->corpus_path, ro);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_FALSE(rows[0].target_ok);
    EXPECT_EQ(rows[0].target_detail.rfind(f->invariant + ": ", 0), 0u) << rows[0].target_detail;
  }
  EXPECT_FALSE(fs::exists(dir.path / "corpus"));
}

TEST(Findings, AnUnwritableCorpusFallsBackAndSaysSo) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  RunOptions o = options("drops_last", dir, true);
  o.corpus_dir = "/dev/null/not-a-folder";
  const RunReport r = run_spec(spec, o);
  ASSERT_EQ(r.status, RunStatus::failed);
  const Finding& f = *r.invariants[0].counterexample;
  EXPECT_TRUE(fs::exists(f.corpus_path)) << f.store_note;
  EXPECT_FALSE(f.in_corpus);
  EXPECT_NE(f.store_note.find("could not store the case in /dev/null/not-a-folder"), std::string::npos);
  const std::string text = make_reporter("text")->run(r);
  EXPECT_NE(text.find("case:\n    xs: ["), std::string::npos) << text;  // printed in full as well
  EXPECT_NE(text.find("stored in " + (dir.path / "scratch" / "toy").string()), std::string::npos) << text;
}

// A file whose case was edited by hand (its name is the old case's hash)
// no longer swallows the old case's next finding as "already in the
// corpus": the edited file moves to its own case's name, the finding is
// stored under its name, and its note says so.
TEST(Findings, AFileWhoseCaseWasEditedMovesToItsOwnName) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const RunReport first = run_spec(spec, options("drops_last", dir, true));
  const std::string path = first.invariants[0].counterexample->corpus_path;
  CorpusEntry edited = read_entry(path);
  const std::string original = emit_yaml(edited.case_node);
  edited.case_node = YAML::Load("{xs: [1, 2, 3, 4]}");
  std::ofstream(path, std::ios::trunc) << emit_entry(edited);
  const RunReport again = run_spec(spec, options("drops_last", dir, true));
  const Finding& f = *again.invariants[0].counterexample;
  EXPECT_EQ(f.corpus_path, path);
  EXPECT_EQ(emit_yaml(read_entry(path).case_node), original);
  const fs::path moved = fs::path(path).parent_path() / (case_hash(edited.case_node) + ".yaml");
  EXPECT_TRUE(fs::exists(moved));
  EXPECT_NE(
      f.store_note.find("held another case than its name says (edited by hand?): moved to " + moved.string()),
      std::string::npos)
      << f.store_note;
}

TEST(Findings, ATruncatedFileIsReplacedAndAHandEditedOneKept) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const RunReport first = run_spec(spec, options("drops_last", dir, true));
  const std::string path = first.invariants[0].counterexample->corpus_path;
  { std::ofstream(path, std::ios::trunc) << "kprop_corpus: 1\nfamily: toy.s"; }  // truncated
  EXPECT_THROW(read_entry(path), InputError);
  const RunReport again = run_spec(spec, options("drops_last", dir, true));
  EXPECT_EQ(again.invariants[0].counterexample->corpus_path, path);
  EXPECT_EQ(read_entry(path).found_against, "drops_last");
  // The old file is kept beside it (a hand edit that broke its YAML lost
  // its also_found_against records without a word), and said.
  EXPECT_TRUE(fs::exists(path + ".unreadable"));
  EXPECT_NE(again.invariants[0].counterexample->store_note.find("did not read"), std::string::npos)
      << again.invariants[0].counterexample->store_note;
  EXPECT_NE(
      again.invariants[0].counterexample->store_note.find("the old file kept as " + path + ".unreadable"),
      std::string::npos);
  // Again: the first kept file stays, the second is kept beside it.
  { std::ofstream(path, std::ios::trunc) << "kprop_corpus: 1\nfamily: toy.s"; }
  run_spec(spec, options("drops_last", dir, true));
  EXPECT_TRUE(fs::exists(path + ".unreadable"));
  EXPECT_TRUE(fs::exists(path + ".unreadable.2"));
  // A file with its whole case that does not read (a key added by hand) is
  // someone's record: kept as it is, and the finding stored elsewhere, said.
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  { std::ofstream(path, std::ios::app) << "reviewed_by: alice\n"; }
  EXPECT_THROW(read_entry(path), InputError);
  const RunReport third = run_spec(spec, options("drops_last", dir, true));
  const auto& cx = *third.invariants[0].counterexample;
  EXPECT_NE(cx.corpus_path, path);
  EXPECT_NE(cx.store_note.find("does not read as a corpus entry"), std::string::npos) << cx.store_note;
  std::string after;
  {
    std::ifstream in(path);
    after.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_EQ(after, text + "reviewed_by: alice\n");
}

// Runs tests/core/junit_check.py on `xml` (one error, no failure expected):
// passes when CI's JUnit readers would read it as such; skips the test
// (its last check) where there is no python3 to parse the XML with.
void expect_junit_reads_one_error(const TempDir& dir, const std::string& xml) {
  if (std::string(KPROP_PYTHON).empty()) GTEST_SKIP() << "no python3 to parse the XML with";
  const fs::path file = dir.path / "junit.xml";
  fs::create_directories(dir.path);
  std::ofstream(file) << xml;
  const std::string cmd = std::string(KPROP_PYTHON) + " " + KPROP_SOURCE_DIR + "/tests/core/junit_check.py " +
                          file.string() + " --expect-errors 1 --expect-failures 0";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << xml;
}

TEST(Junit, ACrashIsAnErrorWithItsCaseAndReplay) {
  TempDir dir;
  const Spec spec = toy_spec("domain: {value: [10, 15]}\ninvariants: [matches_reference, sum_parity]\n");
  const RunReport r = run_spec(spec, options("throws_on_13", dir));
  ASSERT_EQ(r.status, RunStatus::crashed);
  const std::string xml = make_reporter("junit")->run(r);
  EXPECT_NE(xml.find("errors=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<error message=\"target threw: unlucky\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("replay: prop_runner"), std::string::npos) << xml;
  EXPECT_NE(xml.find("xs: ["), std::string::npos) << xml;
  // The invariant that never got its verdict is skipped, not passed.
  EXPECT_NE(xml.find("<skipped message=\"not run"), std::string::npos) << xml;
  expect_junit_reads_one_error(dir, xml);
}

// A run's error report (what --out holds when the run ends in an error) is
// a well-formed suite of one error, whatever its message holds: markup,
// U+FFFE and U+FFFF (valid UTF-8 but no XML character; they were passed
// through and the file did not parse).
TEST(Junit, AnErrorReportIsWellFormedWhateverItsMessage) {
  TempDir dir;
  const std::string xml =
      make_reporter("junit")->error("worker said <&\"]]> \xEF\xBF\xBF\xEF\xBF\xBE end", 2);
  EXPECT_NE(xml.find("errors=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("&lt;&amp;&quot;]]&gt; \xEF\xBF\xBD\xEF\xBF\xBD end"), std::string::npos) << xml;
  expect_junit_reads_one_error(dir, xml);
}

TEST(Interrupt, CtrlCWhileShrinkingExits130WithTheCaseStored) {
  TempDir dir;
  install_interrupt_handler();
  // (Run with the binary's other tests, the mutant had counted past its
  // second failing call in runner_test's, and never sent SIGINT here.)
  toy::interrupting_mutant_calls() = 0;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const RunReport r = run_spec(spec, options("interrupts_while_shrinking", dir, true));
  clear_interrupt();
  EXPECT_EQ(r.status, RunStatus::interrupted);
  EXPECT_EQ(exit_code(r.status), 130);
  ASSERT_TRUE(r.invariants[0].counterexample);
  const Finding& f = *r.invariants[0].counterexample;
  EXPECT_TRUE(f.shrink_interrupted);
  EXPECT_TRUE(f.in_corpus);
  ASSERT_TRUE(fs::exists(f.corpus_path));
  EXPECT_EQ(read_entry(f.corpus_path).found_against, "interrupts_while_shrinking");
}

TEST(Replay, ABadFileIsReportedAndTheRestReplayed) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const RunReport r = run_spec(spec, options("drops_last", dir, true));
  const fs::path folder = dir.path / "corpus" / "toy";
  std::ofstream(folder / "0-corrupt.yaml") << "kprop_corpus: 1\nfamily: [\x01\xff";
  std::ofstream(folder / "1-other-spec.yaml")
      << "kprop_corpus: 1\nspec: other\nfamily: toy.sum\ncase: {xs: [1]}\n";
  std::ofstream(folder / "2-dup.yaml")
      << "kprop_corpus: 1\nfamily: toy.sum\nfamily: toy.sum\ncase: {xs: [1]}\n";
  const auto rows = replay_corpus(spec, folder.string(), options("reference", dir));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_FALSE(rows[0].error.empty());
  EXPECT_EQ(rows[0].error.find('\xff'), std::string::npos) << "raw bytes are escaped";
  EXPECT_NE(rows[1].error.find("is for spec 'other', not 'toy'"), std::string::npos) << rows[1].error;
  EXPECT_NE(rows[2].error.find("key 'family' appears twice"), std::string::npos) << rows[2].error;
  EXPECT_TRUE(rows[3].error.empty());
  EXPECT_TRUE(rows[3].target_ok);
  EXPECT_TRUE(rows[3].mutant_still_fails);
  const std::string text = make_reporter("text")->replay(spec, rows);
  EXPECT_NE(text.find("ERROR: 1 of 4 corpus files passed, 3 could not be read"), std::string::npos) << text;
}

// A replayed file passes only when an invariant checked it on the target:
// discards are no check, a target that throws is a crash (exit 3), a
// mutant's file whose invariant nothing has is an error (exit 2), and an
// empty folder is skipped.
TEST(Replay, OnlyACheckedFilePassesAndEveryOtherVerdictIsSaid) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference, only_long_lists]\n");
  const fs::path folder = dir.path / "replay";
  fs::create_directories(folder / "empty");
  const std::string head = "kprop_corpus: 1\nspec: toy\nfamily: toy.sum\n";
  std::ofstream(folder / "found.yaml")
      << head << "invariant: matches_reference\nfound_against: throws_on_13\n"
      << "case: {xs: [13]}\n";
  std::ofstream(folder / "renamed.yaml") << head << "invariant: old_name\nfound_against: throws_on_13\n"
                                         << "case: {xs: [1, 13]}\n";
  auto verdicts = [&](const std::string& target, std::vector<std::string> only, const fs::path& path) {
    RunOptions o = options(target, dir);
    o.only_invariants = std::move(only);
    const auto rows = replay_corpus(spec, path.string(), o);
    std::vector<std::string> v;
    for (const auto& row : rows) v.push_back(to_string(replay_verdict(row)));
    v.push_back(to_string(replay_verdict(rows)));
    return v;
  };
  using V = std::vector<std::string>;
  // On the reference: the found file passes; the renamed one is an error
  // (an invariant nothing has, as in a file no mutant found), its mutant unchecked.
  EXPECT_EQ(verdicts("reference", {}, folder), (V{"PASSED", "ERROR", "ERROR"}));
  // Only an invariant that discards both: neither is checked, nothing passes.
  EXPECT_EQ(verdicts("reference", {"only_long_lists"}, folder / "found.yaml"), (V{"SKIPPED", "SKIPPED"}));
  // The mutant throws on the found one: a crash (the worst verdict), not a failure.
  EXPECT_EQ(verdicts("throws_on_13", {}, folder), (V{"CRASHED", "ERROR", "CRASHED"}));
  EXPECT_EQ(verdicts("reference", {}, folder / "empty"), (V{"SKIPPED"}));
  EXPECT_EQ(exit_code(ReplayVerdict::crashed), 3);
  EXPECT_EQ(exit_code(ReplayVerdict::skipped), 0);

  RunOptions o = options("reference", dir);
  o.only_invariants = {"only_long_lists"};
  const auto unchecked = replay_corpus(spec, (folder / "found.yaml").string(), o);
  ASSERT_EQ(unchecked.size(), 1u);
  EXPECT_EQ(unchecked[0].checked, 0);
  EXPECT_NE(
      unchecked[0].target_detail.find("no invariant checked it (only_long_lists discarded: list too short)"),
      std::string::npos)
      << unchecked[0].target_detail;
  const std::string text = make_reporter("text")->replay(spec, unchecked);
  EXPECT_NE(text.find("SKIPPED: 0 of 1 corpus files passed, 1 not checked"), std::string::npos) << text;
  const auto renamed = replay_corpus(spec, (folder / "renamed.yaml").string(), options("reference", dir));
  ASSERT_EQ(renamed.size(), 1u);
  EXPECT_NE(renamed[0].error.find("renamed.yaml:4:12: its invariant 'old_name' is neither in the spec nor "
                                  "registered"),
            std::string::npos)
      << renamed[0].error;
  EXPECT_FALSE(renamed[0].mutant_checked);
  // A mutant's crash (no invariant: found_by crash or hang) still guards
  // the mutant: every invariant re-checked on it must still end in a crash
  // or failure. It was replayed against the invariant '' and failed forever.
  std::ofstream(folder / "crash.yaml") << head << "invariant: ''\nfound_against: throws_on_13\n"
                                       << "found_by: crash\ncase: {xs: [2, 13]}\n";
  const auto crash = replay_corpus(spec, (folder / "crash.yaml").string(), options("reference", dir));
  ASSERT_EQ(crash.size(), 1u);
  EXPECT_EQ(replay_verdict(crash[0]), ReplayVerdict::passed) << crash[0].mutant_detail << crash[0].error;
  EXPECT_TRUE(crash[0].mutant_checked);
  std::ofstream(folder / "crash.yaml") << head << "invariant: ''\nfound_against: throws_on_13\n"
                                       << "found_by: crash\ncase: {xs: [2, 3]}\n";
  const auto fixed = replay_corpus(spec, (folder / "crash.yaml").string(), options("reference", dir));
  ASSERT_EQ(fixed.size(), 1u);
  EXPECT_EQ(replay_verdict(fixed[0]), ReplayVerdict::failed);
  EXPECT_EQ(fixed[0].mutant_detail, "no longer crashes, hangs or fails an invariant");
  // A case the target failed guards the invariant it failed: when that one
  // now discards it, the others holding is no pass (it was PASSED); nor
  // when the run lacks it (this spec lacks sum_parity; --invariant could
  // leave it out likewise), which was PASSED since the family registers it.
  auto own_finding = [&](const std::string& file, const std::string& invariant) {
    std::ofstream(folder / file) << head << "invariant: " << invariant << "\nfound_against: reference\n"
                                 << "case: {xs: [1, 2]}\n";
    const auto rows = replay_corpus(spec, (folder / file).string(), options("reference", dir));
    EXPECT_EQ(rows.size(), 1u);
    return rows.empty() ? ReplayRow{} : rows[0];
  };
  for (const auto& [file, invariant, why] :
       {std::tuple{"own.yaml", "only_long_lists", "discarded it: list too short"},
        std::tuple{"elsewhere.yaml", "sum_parity", "is not in this run"}}) {
    const ReplayRow row = own_finding(file, invariant);
    EXPECT_EQ(replay_verdict(row), ReplayVerdict::skipped) << invariant;
    EXPECT_NE(row.target_detail.find(fmt::format("not checked by the invariant it failed: {} (against "
                                                 "reference) {}; the others held",
                                                 invariant, why)),
              std::string::npos)
        << row.target_detail;
  }
}

// A case kprop.check stored for one of its extra_invariants (a Python
// function, found_by: python) is left to the runs that have that function:
// skipped, saying so (it was an ERROR row, exit 2: "could not be read"). The
// same invariant name in a file without found_by: python (hand-written, a
// typo) is still an error.
TEST(Replay, AKpropCheckExtraInvariantsCaseIsSkippedWithANoteAHandWrittenTypoIsNot) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const fs::path folder = dir.path / "replay";
  fs::create_directories(folder);
  const std::string head =
      "kprop_corpus: 1\nspec: toy\nfamily: toy.sum\ninvariant: first_small\n"
      "found_against: python:fn\n";
  std::ofstream(folder / "a-python.yaml") << head << "found_by: python\ncase: {xs: [1, 2]}\n";
  std::ofstream(folder / "b-typo.yaml") << head << "case: {xs: [1, 2]}\n";
  const auto python = replay_corpus(spec, (folder / "a-python.yaml").string(), options("reference", dir));
  ASSERT_EQ(python.size(), 1u);
  EXPECT_TRUE(python[0].error.empty()) << python[0].error;
  EXPECT_EQ(replay_verdict(python[0]), ReplayVerdict::skipped);
  EXPECT_EQ(python[0].target_detail,
            "not replayed: found by kprop.check's invariant 'first_small', which this run does not have (a "
            "Python extra_invariants function: kprop.replay(..., extra_invariants=[...]) replays it)");
  const auto rows = replay_corpus(spec, folder.string(), options("reference", dir));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NE(rows[1].error.find("its invariant 'first_small' is neither in the spec nor registered"),
            std::string::npos)
      << rows[1].error;
  EXPECT_EQ(replay_verdict(rows), ReplayVerdict::error);
}

// The same in a file prop_runner stored, to which kprop.check (the same
// corpus folder) added a finding of its extra invariant: that entry says
// found_by: python, so the replay checks the file's own finding and leaves
// the Python one to its runs (it was an error row: "neither in the spec nor
// registered"); the entry without found_by is still a typo.
TEST(Replay, AKpropCheckFindingAddedToARunnersFileIsLeftToItsRuns) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const fs::path folder = dir.path / "replay";
  fs::create_directories(folder);
  const std::string head =
      "kprop_corpus: 1\nspec: toy\nfamily: toy.sum\ninvariant: matches_reference\n"
      "found_against: reference\nfound_by: rapidcheck\n";
  std::ofstream(folder / "a-added.yaml")
      << head
      << "also_found_against:\n  - {found_against: python:fn, invariant: first_small, found_by: python}\n"
      << "case: {xs: [1, 2]}\n";
  std::ofstream(folder / "b-typo.yaml")
      << head << "also_found_against:\n  - {found_against: python:fn, invariant: first_small}\n"
      << "case: {xs: [1, 2]}\n";
  const auto rows = replay_corpus(spec, folder.string(), options("reference", dir));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].error.empty()) << rows[0].error;
  EXPECT_EQ(rows[0].invariant, "matches_reference");
  EXPECT_EQ(replay_verdict(rows[0]), ReplayVerdict::passed) << rows[0].target_detail;
  EXPECT_NE(rows[1].error.find("its invariant 'first_small' is neither in the spec nor registered"),
            std::string::npos)
      << rows[1].error;
}

// A replay of an empty folder is SKIPPED in every format: JUnit wrote an
// empty suite (tests="0" skipped="0", a green one on a dashboard) where the
// text and JSON said skipped.
TEST(Replay, AnEmptyReplayIsSkippedInJunitToo) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  fs::create_directories(dir.path / "empty");
  const auto rows = replay_corpus(spec, (dir.path / "empty").string(), options("reference", dir));
  ASSERT_TRUE(rows.empty());
  EXPECT_EQ(replay_verdict(rows), ReplayVerdict::skipped);
  const std::string xml = make_reporter("junit")->replay(spec, rows);
  EXPECT_NE(xml.find("tests=\"1\" failures=\"0\" errors=\"0\" skipped=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<testcase classname=\"kprop.toy.replay\" name=\"replay\"><skipped message=\"no corpus "
                     "files there: nothing was checked\"/></testcase>"),
            std::string::npos)
      << xml;
}

// Another spec's cases in their folder of a corpus root are skipped because
// they are that spec's, and the summary says so, counted apart: it said "not
// checked (declined by the target, or discarded or n/a ...)", none of which
// they were. In a test binary (options.replay_command, KPROP_REPLAY's) the
// advice is that spec's test, not prop_runner's --spec.
TEST(Replay, AnotherSpecsCasesInACorpusRootAreCountedApartWithTheirReason) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference, only_long_lists]\n");
  const fs::path root = dir.path / "corpus";
  for (const char* folder : {"toy", "other", "third"}) fs::create_directories(root / folder);
  const std::string head = "kprop_corpus: 1\nfamily: toy.sum\nfound_against: reference\n";
  std::ofstream(root / "toy" / "a.yaml")
      << head << "spec: toy\ninvariant: matches_reference\ncase: {xs: [1]}\n";
  // Kept for only_long_lists, which discards it (too short): not checked.
  std::ofstream(root / "toy" / "b.yaml")
      << head << "spec: toy\ninvariant: only_long_lists\ncase: {xs: [1]}\n";
  std::ofstream(root / "other" / "c.yaml") << head << "spec: other\ninvariant: x\ncase: {xs: [1]}\n";
  std::ofstream(root / "third" / "d.yaml") << head << "spec: third\ninvariant: x\ncase: {xs: [1]}\n";
  RunOptions o = options("reference", dir);
  const auto rows = replay_corpus(spec, root.string(), o);
  ASSERT_EQ(rows.size(), 4u);
  std::vector<std::string> others;
  for (const auto& row : rows) others.push_back(row.other_spec);
  EXPECT_EQ(others, (std::vector<std::string>{"other", "third", "", ""}));
  EXPECT_EQ(
      rows[0].target_detail,
      "not replayed: spec other's case, in its folder of the corpus (replay it with that spec's --spec)");
  const std::string text = make_reporter("text")->replay(spec, rows);
  EXPECT_NE(
      text.find("PASSED: 1 of 4 corpus files passed, 1 not checked (declined by the target, or discarded "
                "or n/a where it had to be checked; each file's line says which), 2 not replayed (cases "
                "of specs other, third, in their folders of the corpus; each file's line says where to "
                "replay it)\n"),
      std::string::npos)
      << text;
  const auto json = nlohmann::json::parse(make_reporter("json")->replay(spec, rows));
  EXPECT_EQ(json["files"][0]["other_spec"], "other");
  EXPECT_EQ(json["files"][2]["other_spec"], "");
  // Only other specs' cases: SKIPPED, for that reason alone.
  const auto theirs = replay_corpus(spec, root.string(), [&] {
    fs::remove_all(root / "toy");
    fs::remove_all(root / "third");
    return o;
  }());
  const std::string only = make_reporter("text")->replay(spec, theirs);
  EXPECT_NE(
      only.find("SKIPPED: 0 of 1 corpus files passed, 1 not replayed (cases of spec other, in its folder "
                "of the corpus; each file's line says where to replay it)\n"),
      std::string::npos)
      << only;
  EXPECT_EQ(only.find("declined"), std::string::npos) << only;
  // In a test binary: replayed by the test that runs that spec.
  o.replay_command = "KPROP_REPLAY={path} ./my_tests";
  const auto in_test = replay_corpus(spec, root.string(), o);
  ASSERT_EQ(in_test.size(), 1u);
  EXPECT_EQ(
      in_test[0].target_detail,
      "not replayed: spec other's case, in its folder of the corpus (replay it with KPROP_REPLAY in the "
      "test that runs spec other)");
}

// A registered mutant's file under --invariant without its own invariant
// (docs/REPORT.md's `checked`): kept for the mutant's failure, which the
// mutant's re-run checks with the spec's statement of that invariant, so its
// `checked` counts this run's invariants alone (and the file passes), where
// a file the target failed is not checked (its finding is not in the run).
TEST(Replay, AMutantsFileUnderAnotherInvariantIsCheckedOnTheMutant) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference, reference_sums_its_list]\n");
  const fs::path folder = dir.path / "replay";
  fs::create_directories(folder);
  const std::string head = "kprop_corpus: 1\nspec: toy\nfamily: toy.sum\ninvariant: matches_reference\n";
  std::ofstream(folder / "a-mutant.yaml") << head << "found_against: drops_last\ncase: {xs: [1, 2, 3]}\n";
  std::ofstream(folder / "b-target.yaml") << head << "found_against: reference\ncase: {xs: [1, 2, 3]}\n";
  RunOptions o = options("reference", dir);
  o.only_invariants = {"reference_sums_its_list"};
  const auto rows = replay_corpus(spec, folder.string(), o);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].checked, 1);
  EXPECT_TRUE(rows[0].mutant_checked);
  EXPECT_TRUE(rows[0].mutant_still_fails);
  EXPECT_EQ(replay_verdict(rows[0]), ReplayVerdict::passed) << rows[0].target_detail;
  EXPECT_EQ(rows[1].checked, 0);
  EXPECT_EQ(replay_verdict(rows[1]), ReplayVerdict::skipped) << rows[1].target_detail;
}

// Ctrl-C during a replay: the files not replayed are listed as such and the
// replay is INTERRUPTED (exit 130) in every format, never PASSED on the
// files it reached (3 of 10 files said "PASSED: 3 of 3 corpus files passed").
TEST(Replay, AnInterruptedReplayListsTheFilesItDidNotReach) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference]\n");
  const fs::path folder = dir.path / "replay";
  fs::create_directories(folder);
  for (const char* name : {"a.yaml", "b.yaml"})
    std::ofstream(folder / name)
        << "kprop_corpus: 1\nspec: toy\nfamily: toy.sum\ninvariant: matches_reference\n"
        << "case: {xs: [1, 2]}\n";
  install_interrupt_handler();
  std::raise(SIGINT);  // before the first file: the handler only notes it
  const auto rows = replay_corpus(spec, folder.string(), options("reference", dir));
  const std::string text = make_reporter("text")->replay(spec, rows);
  const auto json = nlohmann::json::parse(make_reporter("json")->replay(spec, rows));
  clear_interrupt();
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) EXPECT_EQ(replay_verdict(row), ReplayVerdict::interrupted) << row.path;
  EXPECT_EQ(replay_verdict(rows), ReplayVerdict::interrupted);
  EXPECT_EQ(exit_code(replay_verdict(rows)), 130);
  EXPECT_NE(text.find("INTERRUPTED: 0 of 2 corpus files passed, 2 not replayed (interrupted)"),
            std::string::npos)
      << text;
  EXPECT_EQ(json["verdict"], "interrupted");
  EXPECT_EQ(json["files"].size(), 2u);
}

TEST(Replay, StaleTempFilesOfDeadWritersAreRemoved) {
  TempDir dir;
  fs::create_directories(dir.path);
  // pid 2^22 + 1 is above Linux's pid_max: no such process.
  const fs::path stale = dir.path / ".x.yaml.tmp-4194305-0";
  const fs::path live = dir.path / fmt::format(".y.yaml.tmp-{}-0", ::getpid());
  std::ofstream(stale) << "half";
  std::ofstream(live) << "half";
  write_file_atomic((dir.path / "z.yaml").string(), "z: 1\n");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
}

}  // namespace
}  // namespace kprop

namespace kprop {
namespace {

TEST(Isolation, ASegfaultingTargetIsACrashAndTheRunnerLivesOn) {
  TempDir dir;
  const Spec spec = toy_spec("domain: {value: [5, 9]}\ninvariants: [matches_reference]\n");
  RunOptions o = options("segfaults", dir, true);
  o.isolate = true;
  const RunReport r = run_spec(spec, o);  // in process, this would end the test binary
  ASSERT_EQ(r.status, RunStatus::crashed);
  ASSERT_TRUE(r.crash);
  EXPECT_EQ(r.crash->kind, "crash");
  // Killed by its signal (or, under ASan, exited after its report): never the runner.
  EXPECT_TRUE(r.crash->message.find("crashed with signal") != std::string::npos ||
              r.crash->message.find("exited with status") != std::string::npos)
      << r.crash->message;
  EXPECT_EQ(r.crash->case_yaml, "xs: [7]\n");  // shrunk to the element that crashes
  ASSERT_TRUE(fs::exists(r.crash->corpus_path));
  EXPECT_EQ(read_entry(r.crash->corpus_path).found_by, "crash");
}

TEST(Isolation, AHangIsKilledAfterTheCaseTimeout) {
  TempDir dir;
  const Spec spec = toy_spec("domain: {value: [5, 9]}\ninvariants: [matches_reference]\n");
  RunOptions o = options("hangs", dir, true);
  o.isolate = true;
  o.case_timeout_s = 0.3;
  const RunReport r = run_spec(spec, o);
  ASSERT_EQ(r.status, RunStatus::crashed);
  EXPECT_EQ(r.crash->kind, "hang");
  ASSERT_TRUE(fs::exists(r.crash->corpus_path));
  // Its replay with --isolate reports the hang as the file's target failure
  // (the replay check's re-run; in process the guard ended the replay), and
  // stores nothing.
  const size_t files = std::distance(fs::recursive_directory_iterator(dir.path), {});
  const auto rows = replay_corpus(spec, r.crash->corpus_path, o);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_FALSE(rows[0].target_ok);
  EXPECT_EQ(rows[0].target_failure, "hang") << rows[0].target_detail;
  EXPECT_EQ(std::distance(fs::recursive_directory_iterator(dir.path), {}), files);
}

// In the mutants table a hang kills by "hang", a crash by "crash": the
// killer's column said "crash" for both.
TEST(Isolation, MutantsTableNamesAHangAndACrashApart) {
  TempDir dir;
  const Spec spec = toy_spec("domain: {value: [5, 9]}\ninvariants: [matches_reference]\n");
  RunOptions o = options("", dir);
  o.isolate = true;
  o.case_timeout_s = 0.3;
  const auto rows = run_mutants(spec, o);
  std::map<std::string, std::string> by;
  for (const auto& row : rows) by[row.mutant] = row.killed ? row.killed_by : "-";
  EXPECT_EQ(by["hangs"], "hang");
  EXPECT_EQ(by["segfaults"], "crash");
  const std::string text = make_reporter("text")->mutants(spec, rows);
  EXPECT_NE(text.find("hangs                      killed    hang "), std::string::npos) << text;
  // Each row shows the case its failure shrank to, as an invariant's kill
  // does (the column was empty for a crash, hang or error).
  for (const char* mutant : {"hangs", "segfaults"}) {
    const auto row =
        std::find_if(rows.begin(), rows.end(), [&](const MutantRow& r) { return r.mutant == mutant; });
    ASSERT_NE(row, rows.end());
    ASSERT_TRUE(row->report.crash);
    const std::string line = text.substr(text.find(std::string("  ") + mutant + " "));
    EXPECT_NE(line.substr(0, line.find('\n')).find("  " + row->report.crash->stats.summary),
              std::string::npos)
        << text;
    EXPECT_FALSE(row->report.crash->stats.summary.empty());
  }
}

// The case timeout limits each target call, not the check: an invariant
// slower than it (0.4 s against 0.1 s) on a fast target is no hang, in
// process or isolated; the same timeout still stops a hanging target.
TEST(Isolation, ASlowCheckOfAFastTargetIsNoHang) {
  TempDir dir;
  const Spec spec = toy_spec("domain: {length: [1, 2]}\ninvariants: [{name: slow_check, seconds: 0.4}]\n");
  for (bool isolate : {true, false}) {
    RunOptions o = options("reference", dir);
    o.seed = 1;
    o.trials = 2;
    o.isolate = isolate;
    o.case_timeout_s = 0.1;
    const RunReport r = run_spec(spec, o);
    EXPECT_EQ(r.status, RunStatus::passed) << isolate;
    EXPECT_FALSE(r.crash) << isolate;
    EXPECT_EQ(r.invariants[0].checked(), 2) << isolate;
  }
}

TEST(Isolation, SameVerdictsAsInProcess) {
  TempDir dir;
  const Spec spec = toy_spec("invariants: [matches_reference, sum_parity]\n");
  RunOptions a = options("drops_last", dir), b = options("drops_last", dir);
  b.isolate = true;
  // The forked run first: an in-process run starts the crash guard's
  // watchdog thread, and forking a process with a second thread can deadlock
  // the child in sanitizer runtimes (prop_runner never mixes the two).
  const RunReport y = run_spec(spec, b);
  const RunReport x = run_spec(spec, a);
  ASSERT_EQ(x.status, RunStatus::failed);
  EXPECT_EQ(y.status, RunStatus::failed);
  EXPECT_EQ(x.trials, y.trials);
  for (size_t k = 0; k < x.invariants.size(); ++k) {
    ASSERT_TRUE(y.invariants[k].counterexample);
    EXPECT_EQ(x.invariants[k].counterexample->case_yaml, y.invariants[k].counterexample->case_yaml);
  }
}

}  // namespace
}  // namespace kprop

namespace kprop {
namespace {

// The text report's lines for what a run did not do: a failed invariant's
// worst ratio is of the cases that passed (its failing case is over 1), and
// a hang's case was not shrunk.
TEST(TextReport, SaysWhatARatioAndAHangsCaseAre) {
  RunReport r;
  r.status = RunStatus::failed;
  InvariantReport failed{"matches_reference"};
  failed.status = InvariantStatus::failed;
  failed.max_error_ratio = 0.5;
  r.invariants.push_back(failed);
  Finding hang;
  hang.kind = "hang";
  hang.original_size = 7;
  hang.stats.size = 7;
  hang.stats.summary = "7 items";
  r.crash = hang;
  const std::string text = make_reporter("text")->run(r);
  EXPECT_NE(text.find("worst error/allowed 0.5 on the cases that passed"), std::string::npos) << text;
  EXPECT_NE(text.find("not shrunk (a hang): 7 items (size 7)"), std::string::npos) << text;
  EXPECT_EQ(text.find("shrunk: 7 items"), std::string::npos) << text;
}

}  // namespace
}  // namespace kprop
