// prop_runner as a user runs it: exit codes 0/1/2/3 and one-line errors.
#include "tests/support/cli.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>

#include "kprop/corpus.h"
#include "kprop/sanitizer.h"
#include "kprop/spec.h"

namespace fs = std::filesystem;

namespace {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/dflash.yaml";

using kprop::testing::CliRun;
CliRun run(const std::string& args) {
  return kprop::testing::run_cli(args);
}

// Each (arguments, message) runs to exit 2 with the message, and without
// `never` (an uncaught exception's or an internal error's words).
template <size_t N>
void expect_input_errors(const std::pair<std::string, std::string> (&cases)[N], const char* never) {
  for (const auto& [args, expect] : cases) {
    const CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find(never), std::string::npos) << r.out;
  }
}

std::string contents(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// <tmp>/kprop_cli_<pid>/<name>: this process's own folder (ctest runs each
// test in its own process), removed when the process ends.
fs::path temp(const std::string& name) {
  static const struct Folder {
    fs::path path = fs::temp_directory_path() / ("kprop_cli_" + std::to_string(::getpid()));
    ~Folder() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } folder;
  fs::create_directories(folder.path);
  return folder.path / name;
}

// `script` run by the Python with NumPy as an exec: worker, quoted for the shell.
std::string python_exec(const fs::path& script) {
  return "'exec:" + std::string(KPROP_PYTHON) + " " + script.string() + "'";
}

TEST(Cli, ReferencePassesAndPrintsSeedAndVerdicts) {
  const CliRun r = run("--spec " + kSpec + " --seed 3 --trials 30 --no-corpus");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("seed 3"), std::string::npos);
  EXPECT_NE(r.out.find("lossless                   passed   30 checked"), std::string::npos) << r.out;
}

// --version names the program and its version (the project's, from CMake).
TEST(Cli, VersionNamesTheRelease) {
  const CliRun r = run("--version");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("prop_runner (kprop) " KPROP_VERSION ", ", 0), 0u) << r.out;
}

// --fuzz-seeds draws from --seed (it was ignored: every seed wrote the same
// inputs); without one, the same fixed inputs as always.
TEST(Cli, FuzzSeedsDrawFromTheSeed) {
  auto seeds = [](const std::string& name, const std::string& seed) {
    const fs::path dir = temp(name);
    fs::remove_all(dir);
    const CliRun r = run("--spec " + kSpec + " --fuzz-seeds " + dir.string() + seed);
    EXPECT_EQ(r.code, 0) << r.out;
    std::string all;
    for (int i = 0; i < 64; ++i) all += contents(dir / fmt::format("seed-{:03}", i)) + "|";
    return all;
  };
  const std::string a = seeds("seeds_a", " --seed 5"), b = seeds("seeds_b", " --seed 5"),
                    c = seeds("seeds_c", " --seed 6"), fixed = seeds("seeds_d", "");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, fixed);
  EXPECT_EQ(fixed, seeds("seeds_e", ""));
}

TEST(Cli, MutantFailsWithShrunkCaseAndReplayCommand) {
  const fs::path corpus = temp("corpus");
  fs::remove_all(corpus);
  const CliRun r =
      run("--spec " + kSpec + " --target positional_logits --seed 3 --corpus " + corpus.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("2-node tree (2 roots"), std::string::npos) << r.out;
  // prop_runner as it was invoked: the replay runs when pasted.
  EXPECT_NE(r.out.find("replay: " + std::string(KPROP_RUNNER) + " --spec"), std::string::npos) << r.out;
  // The replay was re-run in a fresh process and failed again: no warning.
  EXPECT_EQ(r.out.find("WARNING: re-run"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(corpus / "dflash"));
  const CliRun replay = run("--spec " + kSpec + " --replay " + (corpus / "dflash").string());
  EXPECT_EQ(replay.code, 0) << replay.out;
  const CliRun on_mutant =
      run("--spec " + kSpec + " --target positional_logits --replay " + (corpus / "dflash").string());
  EXPECT_EQ(on_mutant.code, 1) << on_mutant.out;
  fs::remove_all(corpus);
}

TEST(Cli, DomainOverridesNarrowTheDrawnCases) {
  // --domain replaces domain keys for this run: every case is f32 with D = 7.
  const std::string attention = std::string(KPROP_SOURCE_DIR) + "/specs/attention_fwd.yaml";
  const CliRun r = run("--spec " + attention +
                       " --seed 1 --trials 20 --no-corpus --stats --domain '{dtypes: [f32], dim: [7, 7]}'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("seed 1 domain {dtypes: [f32], dim: [7, 7]}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("min 7, median 7, max 7"), std::string::npos) << r.out;
  const size_t at = r.out.find("    dtype ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find("f32"), std::string::npos) << line;
  for (const char* other : {"f64", "f16", "bf16"}) EXPECT_EQ(line.find(other), std::string::npos) << line;
}

TEST(Cli, DomainOverrideErrorsPointIntoTheOption) {
  const std::string attention = std::string(KPROP_SOURCE_DIR) + "/specs/attention_fwd.yaml";
  const CliRun unknown = run("--spec " + attention + " --no-corpus --domain '{dtype: [f32]}'");
  EXPECT_EQ(unknown.code, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("--domain:1:2: unknown key 'dtype'"), std::string::npos) << unknown.out;
  EXPECT_NE(unknown.out.find("did you mean 'dtypes'"), std::string::npos) << unknown.out;
  const CliRun inverted = run("--spec " + attention + " --no-corpus --domain 'nq: [5, 2]'");
  EXPECT_EQ(inverted.code, 2) << inverted.out;
  EXPECT_NE(inverted.out.find("--domain:1:5: 'nq' is an inverted range"), std::string::npos) << inverted.out;
  const CliRun not_map = run("--spec " + attention + " --no-corpus --domain x");
  EXPECT_EQ(not_map.code, 2) << not_map.out;
  EXPECT_NE(not_map.out.find("--domain:1:1: expected a map of domain keys"), std::string::npos)
      << not_map.out;
  // --domain is the selected profile's: profile gpu's memory budget does
  // not refuse what it makes of --profile large (it refused it before), and
  // a budget or a domain check it breaks in the selected spec points into it.
  const CliRun large =
      run("--spec " + attention +
          " --no-corpus --trials 1 --seed 3 --profile large --domain '{nq: {one_of: [4096]}}'");
  EXPECT_EQ(large.code, 0) << large.out;
  const CliRun gpu =
      run("--spec " + attention + " --no-corpus --trials 1 --profile gpu --domain '{nq: [1, 4096]}'");
  EXPECT_EQ(gpu.code, 2) << gpu.out;
  EXPECT_NE(gpu.out.find("--domain:1:1: the largest case of this domain (profile gpu) needs"),
            std::string::npos)
      << gpu.out;
  const CliRun tokens =
      run("--spec " + std::string(KPROP_SOURCE_DIR) +
          "/specs/kvcache.yaml --no-corpus --domain '{batch: [1, 64], prompt_len: [1, 1048576]}'");
  EXPECT_EQ(tokens.code, 2) << tokens.out;
  EXPECT_NE(tokens.out.find("--domain:1:1: the largest case of this domain holds batch"), std::string::npos)
      << tokens.out;
  // ... and the selected profile's cases are the override's, though profile
  // gpu cannot hold it (a fallback for gpu dropped it for every profile).
  const CliRun pinned =
      run("--spec " + std::string(KPROP_SOURCE_DIR) +
          "/specs/layernorm.yaml --profile large --domain '{dim: {one_of: [8200]}}' --trials 2 "
          "--seed 1 --no-corpus --stats");
  EXPECT_EQ(pinned.code, 0) << pinned.out;
  EXPECT_NE(pinned.out.find("dim                min 8200, median 8200, max 8200"), std::string::npos)
      << pinned.out;
  // A lower budget than another profile's needs does not refuse this one.
  const CliRun lower =
      run("--spec " + std::string(KPROP_SOURCE_DIR) +
          "/specs/layernorm.yaml --profile large --max-case-mb 100 --trials 1 --seed 1 --no-corpus");
  EXPECT_EQ(lower.code, 0) << lower.out;
  // --max-case-mb is this machine's budget: the same domain loads under it.
  const CliRun raised =
      run("--spec " + attention + " --profile gpu --domain '{nq: [1, 4096]}' --max-case-mb 4096 --list");
  EXPECT_EQ(raised.code, 0) << raised.out;
  EXPECT_NE(raised.out.find("memory: the largest case needs ~"), std::string::npos) << raised.out;
  EXPECT_NE(raised.out.find("of run.max_case_mb = 4096 (per job)"), std::string::npos) << raised.out;
  EXPECT_NE(gpu.out.find("raise run.max_case_mb (--max-case-mb)"), std::string::npos) << gpu.out;
  // A mutant --mutants runs under a profile --domain does not fit runs there
  // as written, and its row says so. (80 trials: every mutant dies within
  // them on this seed; at 40 finished_lose_ties met no tied boundary. In process: a forked child per case was
  // 8 of this test's 25 s under the sanitizers, and isolation is no part of it.)
  const CliRun mutants = run(
      "--spec " + std::string(KPROP_SOURCE_DIR) +
      "/specs/beam.yaml --mutants --no-isolate --no-corpus --trials 80 --seed 1 --domain '{batch: [1, 64]}'");
  EXPECT_EQ(mutants.code, 0) << mutants.out;
  EXPECT_NE(mutants.out.find("token_ids_u16"), std::string::npos) << mutants.out;
  EXPECT_NE(mutants.out.find("    ran under profile large's domain as written: --domain does not fit it "
                             "(--domain:1:1: the largest case of this domain (profile large) needs"),
            std::string::npos)
      << mutants.out;
  // An empty map overrides nothing: the run is the spec's own.
  const CliRun empty = run("--spec " + kSpec + " --no-corpus --trials 5 --seed 3 --domain '{}'");
  const CliRun plain = run("--spec " + kSpec + " --no-corpus --trials 5 --seed 3");
  EXPECT_EQ(empty.code, 0) << empty.out;
  EXPECT_EQ(empty.code, plain.code);
}

// (layernorm: its 14 mutants die in 2 s; dflash's took 39 s of the
// sanitizer suite, two of them shrinking a 33-node tree and a 131,072-token
// vocabulary, each step in a forked child. In process: the 716 forks of the
// isolated run were 10 of its 13 s there, an ASan process's fork copying
// the page tables of its 300 MB; the mutants.* tests run every spec's
// table isolated, and the exit code does not depend on it.)
TEST(Cli, MutantsTableExitsZeroWhenAllDie) {
  const CliRun r = run("--spec " + std::string(KPROP_SOURCE_DIR) +
                       "/specs/layernorm.yaml --mutants --no-isolate --seed 4 --no-corpus");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("PASSED: 14 of 14 mutants killed"), std::string::npos) << r.out;
}

// A mutant registered out_of_bounds (ternary's packed_row_read_late reads a
// byte past its buffer) stores its finding outside the corpus and says why:
// whether a replay fails depends on what lies past the buffer, and one such
// corpus file made replays of the corpus fail one time in three.
// --search=false turns off a spec's run.search.enabled: true (it was only
// ever turned on).
TEST(Cli, SearchFalseTurnsOffTheSpecsSearch) {
  const fs::path spec = temp("searching.yaml");
  std::ofstream(spec) << "spec: searching\nfamily: softmax_topk\ntarget: fused\nreference: reference\n"
                         "run: {trials: 20, seed: 4, search: {enabled: true, trials: 30}}\n"
                         "invariants: [matches_reference]\n";
  const CliRun on = run("--spec " + spec.string() + " --no-corpus");
  EXPECT_NE(on.out.find("search: 30 of 30 cases"), std::string::npos) << on.out;
  const CliRun off = run("--spec " + spec.string() + " --no-corpus --search=false");
  EXPECT_EQ(off.code, 0) << off.out;
  EXPECT_EQ(off.out.find("search:"), std::string::npos) << off.out;
}

// A mutant only a profile reaches passes a plain run: the run says where
// it dies, so that PASSED is not read as the spec missing it.
TEST(Cli, AProfilesMutantPassingElsewhereSaysWhereItDies) {
  const CliRun r = run("--spec " + kSpec + " --target token_ids_u16 --trials 20 --seed 3 --no-corpus");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(
      r.out.find("note: token_ids_u16 is a mutant that only profile large's cases reach (--mutants runs it "
                 "there): --profile large"),
      std::string::npos)
      << r.out;
}

TEST(Cli, AnOutOfBoundsMutantsFindingStaysOutOfTheCorpus) {
  const fs::path corpus = temp("oob_corpus");
  const CliRun r = run("--spec " + std::string(KPROP_SOURCE_DIR) +
                       "/specs/ternary.yaml --target packed_row_read_late --seed 5 --fail-fast --corpus " +
                       corpus.string());
  // Under AddressSanitizer the read is reported: a crash (3), stored the same way.
  EXPECT_EQ(r.code, kprop::kAddressSanitizer ? 3 : 1) << r.out;
  EXPECT_NE(r.out.find("(not in the corpus)\n  note: kept out of the corpus: the mutant reads past a buffer"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(corpus / "ternary")) << r.out;
}

// A job worker stopped as soon as it started (--time far below one case)
// does not run the runner's interrupt handler: between fork() and its own
// handlers it printed "kprop: interrupted" though no one pressed Ctrl-C (25
// times in 20 such runs; signals are held back across the fork now).
// Those mutant runs check a case or so each: a mutant they did not kill
// GAVE UP (too_slow), exit 2, not SURVIVED (exit 1, "the spec is too weak").
TEST(Cli, WorkersStoppedAtOnceSayNoInterrupt) {
  for (int i = 0; i < 4; ++i) {
    const CliRun r = run("--spec " + kSpec + " --mutants --seed 1 --time 0.001 --jobs 2 --no-corpus");
    EXPECT_EQ(r.out.find("interrupted"), std::string::npos) << r.out;
    // How many cases fit in 1 ms depends on the machine: no count is
    // asserted, only that no mutant is called a survivor.
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("GAVE UP   - (too_slow)"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("SURVIVED"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("HEALTH CHECK FAILED: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" gave up (the health checks named beside each say"), std::string::npos) << r.out;
  }
}

// Every drawn case is counted once: checked, declined, or discarded by every
// invariant (those were counted nowhere: "16 drawn, 5 checked" left 11
// unexplained). And a --time below one case is one too_slow check, not a
// `discarded` one per invariant at "size -1".
TEST(Cli, EveryDrawnCaseIsCountedOnce) {
  const std::string spec = std::string(KPROP_SOURCE_DIR) + "/specs/attention_bwd.yaml";
  const CliRun j = run("--spec " + spec +
                       " --invariant dv_rounded_to_nearest --trials 5 --seed 7 --no-corpus --format json");
  ASSERT_EQ(j.code, 0) << j.out;
  const auto r = nlohmann::json::parse(j.out.substr(j.out.find('{')));
  EXPECT_GT(r["discarded"].get<int64_t>(), 0) << j.out;
  EXPECT_EQ(r["trials"],
            r["checked"].get<int64_t>() + r["discarded"].get<int64_t>() + r["declined"].get<int64_t>())
      << j.out;
  const CliRun t =
      run("--spec " + spec + " --invariant dv_rounded_to_nearest --trials 5 --seed 7 --no-corpus");
  EXPECT_NE(
      t.out.find(fmt::format("  cases: {} drawn, 5 checked, {} discarded by every invariant still checking;",
                             r["trials"].get<int64_t>(), r["discarded"].get<int64_t>())),
      std::string::npos)
      << t.out;
  const CliRun slow = run("--spec " + spec + " --seed 1 --trials 300 --time 0.0001 --no-corpus");
  EXPECT_EQ(slow.code, 2) << slow.out;
  EXPECT_EQ(slow.out.find("Health check 'discarded'"), std::string::npos) << slow.out;
  EXPECT_NE(slow.out.find("HEALTH CHECK FAILED (too_slow):"), std::string::npos) << slow.out;
  EXPECT_NE(
      slow.out.find("or add run: {suppress_health_check: [too_slow]} to the spec (--suppress-health-check "
                    "too_slow for one run)"),
      std::string::npos)
      << slow.out;
  // --suppress-health-check turns that check off for the run; the invariants
  // that checked nothing still do not pass (exit 2, never 0).
  const CliRun suppressed = run(
      "--spec " + spec + " --seed 1 --trials 300 --time 0.0001 --no-corpus --suppress-health-check too_slow");
  EXPECT_EQ(suppressed.code, 2) << suppressed.out;
  EXPECT_EQ(suppressed.out.find("(too_slow)"), std::string::npos) << suppressed.out;
  // Each check named once however many invariants failed it (it read
  // "discarded, discarded, ..." 18 times).
  EXPECT_NE(suppressed.out.find("HEALTH CHECK FAILED (discarded): too little was checked"), std::string::npos)
      << suppressed.out;
  const CliRun bad = run("--spec " + spec + " --suppress-health-check slow");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--suppress-health-check"), std::string::npos) << bad.out;
}

// --domain over a declared op that starves an invariant the spec lists (T
// fixed at 1: rows_independent observes nothing) makes it n/a for the run,
// as for a built-in family; it was refused as the spec's error, even with
// --invariant choosing another.
TEST(Cli, ADomainThatStarvesAnOpsInvariantMakesItNotApplicable) {
  const std::string ops = std::string(KPROP_SOURCE_DIR) + "/specs/ops/rmsnorm.yaml";
  const CliRun one =
      run("--spec " + ops + " --no-corpus --domain '{T: [1, 1]}' --invariant matches_reference --trials 5");
  EXPECT_EQ(one.code, 0) << one.out;
  const CliRun all = run("--spec " + ops + " --no-corpus --domain '{T: [1, 1]}' --trials 5 --seed 1");
  EXPECT_NE(all.out.find(
                "  rows_independent           n/a      --domain leaves it nothing to observe: it needs dim "
                "T to take more than one value"),
            std::string::npos)
      << all.out;
}

// The report less its times (they differ from run to run, nothing else may).
nlohmann::json without_times(nlohmann::json j) {
  if (j.is_object()) {
    for (const char* key : {"seconds", "seconds_to_fail", "shrink_seconds", "time_s"}) j.erase(key);
    for (auto& [key, value] : j.items()) value = without_times(value);
  } else if (j.is_array()) {
    for (auto& value : j) value = without_times(value);
  }
  return j;
}

// A shrink that ran out of its wall-clock shrink_budget_s (the large
// profile's vocab-131072 dflash cases take long to check, more so under ASan
// or on a loaded machine) stops at a step that depends on the clock: where
// either report's shrink was cut short, only the failure itself (invariant,
// original size) is compared, in both.
void without_interrupted_shrinks(nlohmann::json& a, nlohmann::json& b) {
  if (a.is_object() && b.is_object()) {
    if (a.value("shrink_interrupted", false) || b.value("shrink_interrupted", false))
      for (const char* key : {"case_yaml", "corpus_path", "replay", "shrink_steps", "size", "measured",
                              "message", "summary", "diff", "shrink_interrupted", "replay_check"}) {
        a.erase(key);
        b.erase(key);
      }
    for (auto& [key, value] : a.items())
      if (b.contains(key)) without_interrupted_shrinks(value, b[key]);
  } else if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (size_t i = 0; i < a.size(); ++i) without_interrupted_shrinks(a[i], b[i]);
  }
}

// --jobs N: the same cases, verdicts, counts, shrunk counterexamples and
// stored files as --jobs 1 (a passing run, a failing mutant, the mutants
// table, a sharded run, a folder replay; metamorphic relations, whose
// derived cases some relations share), whatever N.
TEST(Cli, JobsGiveTheReportOfOneJob) {
  const fs::path out = temp("jobs.json"), corpus = temp("jobs_corpus");
  const std::string replay = std::string(KPROP_SOURCE_DIR) + "/corpus/dflash";
  const std::string relations = std::string(KPROP_SOURCE_DIR) + "/specs/examples/ternary_expr.yaml";
  // Its last cases come from a focus (kprop/focus.h), chosen by which
  // invariants are live: a job that drew case i before the switch is not trusted.
  const std::string focused = std::string(KPROP_SOURCE_DIR) + "/specs/attention_bwd.yaml";
  // The mutants table: layernorm's (2 s; dflash's were 80 s of the sanitizer suite).
  const std::string layernorm = std::string(KPROP_SOURCE_DIR) + "/specs/layernorm.yaml";
  // (spec, arguments, job counts): 1 first, 3 where cases do not split evenly.
  const std::vector<std::tuple<std::string, std::string, std::vector<int>>> runs = {
      {kSpec, "--seed 3 --trials 150", {1, 2, 3}},
      {kSpec, "--target positional_logits --seed 5", {1, 2}},
      {layernorm, "--mutants --seed 4", {1, 2}},
      {kSpec, "--target positional_logits --seed 5 --fail-fast", {1, 2}},
      {kSpec, "--seed 7 --trials 40 --shard 1/3", {1, 3}},
      {kSpec, "--replay " + replay, {1, 2}},
      {relations, "--seed 3 --trials 100", {1, 3}},
      {focused, "--target tiled_d --seed 3 --trials 60", {1, 3}}};
  for (const auto& [spec, args, counts] : runs) {
    nlohmann::json one;
    for (const int jobs : counts) {
      fs::remove_all(corpus);
      const CliRun r = run("--spec " + spec + " " + args + " --corpus " + corpus.string() +
                           " --format json --out " + out.string() + " --jobs " + std::to_string(jobs));
      ASSERT_LE(r.code, 1) << args << " --jobs " << jobs << "\n" << r.out;
      std::ifstream in(out);
      nlohmann::json report = without_times(nlohmann::json::parse(in));
      if (jobs == 1) {
        one = report;
        if (spec == focused) {
          EXPECT_TRUE(report.contains("focused")) << args;
        }
      } else {
        nlohmann::json first = one;
        without_interrupted_shrinks(first, report);
        EXPECT_EQ(report, first) << args << " --jobs " << jobs;
      }
    }
  }
  fs::remove_all(corpus);
}

// --no-focus: every case from the whole domain, none from a focus
// (kprop/focus.h; the runs themselves: Focus.*).
TEST(Cli, NoFocusDrawsEveryCaseFromTheWholeDomain) {
  const std::string spec = std::string(KPROP_SOURCE_DIR) + "/specs/attention_bwd.yaml";
  const std::string args = "--spec " + spec +
                           " --target tiled_d --invariant dq_dk_rounded_to_nearest --seed 3 --trials 20 "
                           "--no-corpus --format json";
  const fs::path out = temp("focus.json");
  auto report = [&](const std::string& more) {
    const CliRun r = run(args + more + " --out " + out.string());
    EXPECT_EQ(r.code, 0) << r.out;
    std::ifstream in(out);
    return nlohmann::json::parse(in);
  };
  const nlohmann::json f = report(""), w = report(" --no-focus");
  EXPECT_EQ(f["focused"]["{dtypes: [f16, bf16]}"], f["trials"]);
  EXPECT_FALSE(w.contains("focused"));
  EXPECT_GT(w["trials"].get<int64_t>(), f["trials"].get<int64_t>());
  // Not a flag of the modes that draw no cases.
  const CliRun replay =
      run("--spec " + spec + " --replay " + std::string(KPROP_SOURCE_DIR) + "/corpus --no-focus");
  EXPECT_EQ(replay.code, 2) << replay.out;
}

TEST(Cli, JsonReportToFile) {
  const fs::path out = temp("report.json");
  const CliRun r =
      run("--spec " + kSpec + " --seed 3 --trials 10 --no-corpus --format json --out " + out.string());
  EXPECT_EQ(r.code, 0) << r.out;
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["status"], "passed");
  EXPECT_EQ(j["invariants"].size(), kprop::load_spec(kSpec).invariants.size());  // one entry per invariant
  // Counts and whole dims are JSON integers (they were written 34.0).
  EXPECT_TRUE(j["statistics"]["size"]["histogram"][0]["count"].is_number_integer()) << j["statistics"];
  EXPECT_TRUE(j["statistics"]["dims"][0]["min"].is_number_integer()) << j["statistics"];
}

// --out writes through a link and refuses what is no regular file; a run
// that fails before its report leaves no folder --out would have needed.
TEST(Cli, OutWritesThroughALinkRefusesAFifoAndLeavesNoFolders) {
  const fs::path dir = temp("out-kinds");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "real.json") << "old";
  fs::create_symlink("real.json", dir / "link.json");
  const std::string args = "--spec " + kSpec + " --seed 3 --trials 5 --no-corpus --format json --out ";
  EXPECT_EQ(run(args + (dir / "link.json").string()).code, 0);
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  std::ifstream in(dir / "real.json");
  EXPECT_EQ(nlohmann::json::parse(in)["status"], "passed");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  const CliRun fifo = run(args + (dir / "fifo").string());
  EXPECT_EQ(fifo.code, 2) << fifo.out;
  EXPECT_NE(fifo.out.find("fifo: is not a regular file"), std::string::npos) << fifo.out;
  const CliRun bad = run(args + (dir / "new/a/b/report.json").string() + " --target nope");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_FALSE(fs::exists(dir / "new")) << bad.out;
  fs::remove_all(dir);
}

// Whole-number options read what the range they name reads (1e2), and say
// so of a fraction; a corpus file must name its spec.
TEST(Cli, WholeNumbersAndCorpusFilesWithoutASpec) {
  EXPECT_EQ(run("--spec " + kSpec + " --seed 3 --trials 1e1 --jobs 1 --no-corpus").code, 0);
  const CliRun half = run("--spec " + kSpec + " --jobs 1.5 --no-corpus");
  EXPECT_EQ(half.code, 2);
  EXPECT_NE(half.out.find("--jobs: '1.5' is not a whole number of processes in [1, 4096]"), std::string::npos)
      << half.out;
  const fs::path file = temp("nospec.yaml");
  std::ofstream(file)
      << "kprop_corpus: 1\nfamily: dflash\ncase:\n  prompt: [1]\n  model: {vocab: 3, d_model: "
         "4, layers: 1, heads: 1, seed: 1}\n  cycles: []\n";
  const CliRun r = run("--spec " + kSpec + " --replay " + file.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("nospec.yaml:1:1: corpus case names no spec (add spec: dflash"), std::string::npos)
      << r.out;
}

// --import: an input the target declined is said as not checked, never as
// "passes" (it was), and an import that checked nothing ends SKIPPED (it
// ended on the skip line alone); every path is checked before anything is
// stored.
TEST(Cli, ImportSaysWhatItCouldNotCheckAndChecksEveryPathFirst) {
  if (std::string(KPROP_PYTHON).empty()) GTEST_SKIP() << "no python3 with NumPy";
  const fs::path dir = temp("import");
  fs::remove_all(dir);
  fs::create_directories(dir / "a-folder");
  std::ofstream(dir / "empty.bin").flush();
  std::ofstream(dir / "declines.py") << "import sys\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
                                     << "/python')\nimport kprop_worker\n\n\ndef op(**_):\n    raise "
                                        "kprop_worker.Unsupported('declines every case')\n\n\n"
                                        "kprop_worker.serve({'layernorm': op})\n";
  const std::string spec = std::string(KPROP_SOURCE_DIR) + "/specs/layernorm.yaml";
  const std::string target =
      std::string(" --target 'exec:") + KPROP_PYTHON + " " + (dir / "declines.py").string() + "'";
  const CliRun skipped =
      run("--spec " + spec + " --no-corpus --import " + (dir / "empty.bin").string() + target);
  EXPECT_EQ(skipped.code, 0) << skipped.out;
  EXPECT_NE(skipped.out.find("skip    "), std::string::npos) << skipped.out;
  EXPECT_NE(skipped.out.find("not checked: declined"), std::string::npos) << skipped.out;
  EXPECT_EQ(skipped.out.find("passes"), std::string::npos) << skipped.out;
  EXPECT_NE(skipped.out.find("SKIPPED: none of the 1 input(s) was checked"), std::string::npos)
      << skipped.out;
  EXPECT_EQ(skipped.out.find("PASSED"), std::string::npos) << skipped.out;
  // --skipped-exit: a skip a CI job must not read as green, in a run as in an import.
  EXPECT_EQ(run("--spec " + spec + " --no-corpus --skipped-exit 77 --import " + (dir / "empty.bin").string() +
                target)
                .code,
            77);
  const CliRun run_skipped = run("--spec " + spec + " --no-corpus --trials 5 --skipped-exit 77" + target);
  EXPECT_EQ(run_skipped.code, 77) << run_skipped.out;
  // The JSON report says the code the run exits with.
  const CliRun json_skipped =
      run("--spec " + spec + " --no-corpus --trials 5 --skipped-exit 77 --format json" + target);
  EXPECT_EQ(json_skipped.code, 77);
  EXPECT_NE(json_skipped.out.find("\"exit_code\": 77"), std::string::npos) << json_skipped.out;
  EXPECT_NE(run_skipped.out.find("SKIPPED: nothing was checked"), std::string::npos) << run_skipped.out;
  EXPECT_EQ(run("--spec " + spec + " --no-corpus --trials 5" + target).code, 0);
  // SKIPPED means the target declined every case it was given: cases an
  // invariant discarded after the target answered them are no declines (the
  // run fails its health checks); ones discarded before it ran are.
  std::ofstream(dir / "no_f16.py") << "import sys\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
                                   << "/python')\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
                                   << "/examples/python')\nimport numpy as np\nimport kprop_worker\n"
                                      "import softmax_topk as ex\n\n\ndef op(logits, k, **a):\n"
                                      "    if logits.dtype == np.float16:\n"
                                      "        raise kprop_worker.Unsupported('no f16')\n"
                                      "    return ex.softmax_topk(logits, k, **a)\n\n\n"
                                      "kprop_worker.serve({'softmax_topk': op})\n";
  std::ofstream(dir / "discards.yaml")
      << "spec: discards\nfamily: softmax_topk\nrun: {trials: 20, seed: 3}\n"
         "invariants:\n  - name: never_observed\n"
         "    when: all(target.probs > 2)\n    expect: all(target.probs >= 0)\n";
  const CliRun answered = run("--spec " + (dir / "discards.yaml").string() +
                              " --no-corpus --jobs 1 --target " + python_exec(dir / "no_f16.py"));
  EXPECT_EQ(answered.code, 2) << answered.out;
  EXPECT_EQ(answered.out.find("SKIPPED"), std::string::npos) << answered.out;
  const std::string rmsnorm = std::string(KPROP_SOURCE_DIR) + "/specs/ops/rmsnorm.yaml";
  std::ofstream(dir / "declines_rms.py") << "import sys\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
                                         << "/python')\nimport kprop_worker\n\n\ndef op(**_):\n    raise "
                                            "kprop_worker.Unsupported('no CUDA device')\n\n\n"
                                            "kprop_worker.serve({'rmsnorm': op})\n";
  const CliRun unseen = run("--spec " + rmsnorm + " --no-corpus --seed 1 --invariant rows_permute --target " +
                            python_exec(dir / "declines_rms.py"));
  EXPECT_EQ(unseen.code, 0) << unseen.out;
  EXPECT_NE(unseen.out.find("discarded by every invariant before the target saw them"), std::string::npos)
      << unseen.out;
  EXPECT_NE(unseen.out.find("SKIPPED: nothing was checked"), std::string::npos) << unseen.out;
  // Output coverage of a target that checks nothing here is no fault to fix: SKIPPED.
  const CliRun coverage =
      run("--spec " + spec + " --no-corpus --trials 5 --output-coverage --skipped-exit 77" + target);
  EXPECT_EQ(coverage.code, 77) << coverage.out;
  EXPECT_NE(coverage.out.find("SKIPPED: the target checked nothing here ("), std::string::npos)
      << coverage.out;
  // A target that fails on the input is a target failure, not an invariant
  // (it printed "error broken: ...").
  std::ofstream(dir / "errors.py")
      << "import sys\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
      << "/python')\nimport kprop_worker\n\n\ndef op(**_):\n    raise "
         "RuntimeError('always fails')\n\n\nkprop_worker.serve({'layernorm': op})\n";
  const CliRun failed = run("--spec " + spec + " --no-corpus --import " + (dir / "empty.bin").string() +
                            " --target " + python_exec(dir / "errors.py"));
  EXPECT_EQ(failed.code, 1) << failed.out;
  EXPECT_NE(failed.out.find("empty.bin: target failure (error): "), std::string::npos) << failed.out;
  EXPECT_NE(failed.out.find("always fails"), std::string::npos) << failed.out;
  EXPECT_EQ(failed.out.find("broken"), std::string::npos) << failed.out;
  // The same worker as --reference: its error is the reference's (it said
  // "target reported an error"), and the run stops with exit 2.
  const CliRun oracle =
      run("--spec " + spec + " --no-corpus --seed 1 --reference " + python_exec(dir / "errors.py"));
  EXPECT_EQ(oracle.code, 2) << oracle.out;
  EXPECT_NE(oracle.out.find("layernorm: reference reported an error: RuntimeError: always fails"),
            std::string::npos)
      << oracle.out;
  EXPECT_EQ(oracle.out.find("target reported"), std::string::npos) << oracle.out;
  const CliRun folder =
      run("--spec " + spec + " --corpus " + (dir / "corpus").string() + " --import " +
          (dir / "empty.bin").string() + " " + (dir / "a-folder").string() + " --target missing_proj_term");
  EXPECT_EQ(folder.code, 2) << folder.out;
  EXPECT_NE(folder.out.find("a-folder: is a folder, not a fuzzer input file"), std::string::npos)
      << folder.out;
  EXPECT_FALSE(fs::exists(dir / "corpus")) << folder.out;
  fs::remove_all(dir);
}

// The replay command carries the --profile and --domain the run had: which
// invariants a spec runs can depend on them (finite_differences only where
// f64 is drawn), and the re-run in a fresh process must fail again.
TEST(Cli, TheReplayCarriesTheProfileAndDomain) {
  const fs::path spec = temp("ln32.yaml"), corpus = temp("ln32-corpus");
  std::ofstream(spec)
      << "spec: ln32\nfamily: layernorm\nrun: {trials: 100, seed: 1}\ndomain:\n  dtype: [f32]\n"
         "profiles:\n  f64: {domain: {dtype: [f64]}}\n";
  for (const std::string how : {"--domain '{dtype: [f64]}'", "--profile f64"}) {
    fs::remove_all(corpus);
    const fs::path out = temp("ln32.json");
    const CliRun r = run("--spec " + spec.string() + " --target missing_proj_term " + how +
                         " --invariant finite_differences --jobs 1 --format json --out " + out.string() +
                         " --corpus " + corpus.string());
    ASSERT_EQ(r.code, 1) << how << "\n" << r.out;
    std::ifstream in(out);
    const auto j = nlohmann::json::parse(in);
    const auto& f = j["invariants"][0]["counterexample"];
    EXPECT_NE(f["replay"].get<std::string>().find(how), std::string::npos) << f["replay"];
    EXPECT_EQ(f["replay_check"]["status"], "reproduced") << f["replay_check"];
  }
  fs::remove_all(corpus);
}

// A finding whose replay, re-run in a fresh process, does not fail (a
// worker that keeps the first call's weights: the stored case alone passes)
// stays out of the corpus: it is kept in the scratch folder, the run says
// so and still fails. (It was stored in the corpus, whose replay then
// passed against the buggy worker.)
TEST(Cli, AFindingWhoseReplayDoesNotFailIsKeptOutOfTheCorpus) {
  if (std::string(KPROP_PYTHON).empty()) GTEST_SKIP() << "no python3 with NumPy";
  const fs::path dir = temp("stale-weights");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "worker.py") << "import sys\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
                                   << "/python')\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
                                   << "/examples/ops')\nimport kprop_worker\nimport rmsnorm\n\n"
                                      "kept = {}\n\n\ndef op(x, w, eps, **_):\n"
                                      "    if 'w' not in kept or kept['w'].shape != w.shape:\n"
                                      "        kept['w'] = w.copy()\n"
                                      "    return rmsnorm.rmsnorm(x, kept['w'], eps)\n\n\n"
                                      "kprop_worker.serve({'rmsnorm': op})\n";
  const fs::path corpus = dir / "corpus", out = dir / "report.json";
  const CliRun r = kprop::testing::run_cli(
      "--spec " + std::string(KPROP_SOURCE_DIR) +
          "/specs/ops/rmsnorm.yaml --seed 1 --jobs 1 --invariant matches_reference --format json --out " +
          out.string() + " --corpus " + corpus.string() + " --target " + python_exec(dir / "worker.py"),
      dir.string());
  ASSERT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("WARNING: re-run in a fresh process, the replay did not fail"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  stored: .kprop/findings/rmsnorm/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(not in the corpus)\n  note: kept out of the corpus: re-run in a fresh process, "
                       "it did not fail ("),
            std::string::npos)
      << r.out;
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["status"], "failed") << j.dump(2);
  const auto& f = j["invariants"][0]["counterexample"];
  EXPECT_EQ(f["replay_check"]["status"], "not_reproduced") << f.dump(2);
  EXPECT_EQ(f["in_corpus"], false) << f.dump(2);
  const std::string path = f["corpus_path"];
  EXPECT_EQ(path.rfind(".kprop/findings/rmsnorm/", 0), 0u) << path;
  EXPECT_TRUE(fs::is_regular_file(dir / path)) << path;
  EXPECT_NE(f.value("store_note", "").find("kept out of the corpus"), std::string::npos) << f.dump(2);
  EXPECT_NE(f["replay"].get<std::string>().find(path), std::string::npos) << f["replay"];
  // Nothing of it in the corpus, whose replay would pass on the buggy worker.
  std::error_code ec;
  EXPECT_TRUE(!fs::exists(corpus / "rmsnorm") || fs::is_empty(corpus / "rmsnorm", ec)) << r.out;
}

// A declared op whose op.reference is an exec: worker: the run's header and
// its JSON name that worker, started in the spec's folder, as --reference
// names one (they said "reference", the implementation's name, while every
// verdict came from the worker).
TEST(Cli, AnExternalOpReferenceIsNamedInTheRunsHeader) {
  if (std::string(KPROP_PYTHON).empty()) GTEST_SKIP() << "no python3 with NumPy";
  const fs::path dir = temp("extref");
  fs::remove_all(dir);
  fs::create_directories(dir / "specs");
  std::ofstream(dir / "specs" / "copy.py") << "import sys\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
                                           << "/python')\nimport kprop_worker\n\n\ndef op(x, **_):\n"
                                              "    return {'y': x}\n\n\nkprop_worker.serve({'copy': op})\n";
  std::ofstream(dir / "specs" / "copy.yaml")
      << "spec: copy\nfamily: op\nop:\n  dims: {N: [1, 4]}\n  inputs: {x: {shape: [N], dtype: [f32, f64]}}\n"
         "  outputs: {y: {shape: [N]}}\n  reference: exec:"
      << KPROP_PYTHON << " copy.py\ntarget: reference\nrun: {trials: 5}\ninvariants: [matches_reference]\n";
  const std::string shown = std::string("exec:cd 'specs' && exec ") + KPROP_PYTHON + " copy.py";
  const std::string args = "--spec specs/copy.yaml --seed 1 --jobs 1 --no-corpus";
  const CliRun text = kprop::testing::run_cli(args, dir.string());
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("kprop copy (op): target reference, reference " + shown + ", seed 1\n"),
            std::string::npos)
      << text.out;
  const CliRun json = kprop::testing::run_cli(args + " --format json", dir.string());
  ASSERT_EQ(json.code, 0) << json.out;
  const auto j = nlohmann::json::parse(json.out.substr(json.out.find('{')));
  EXPECT_EQ(j["reference"], shown) << json.out;
  // The name in the header runs as --reference from where the run started.
  const CliRun again = kprop::testing::run_cli(args + " --reference \"" + shown + "\"", dir.string());
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("reference " + shown + ", seed 1"), std::string::npos) << again.out;
}

// A finding not re-run says why: --no-replay-check or --mutants, not "no
// prop_runner to re-run it with" (it said that for both); and a spec's old
// name loads its new file from the command line too (--spec refused it as a
// missing file before the loader could).
TEST(Cli, WhyAFindingWasNotReRunAndOldSpecNames) {
  const CliRun r = run("--spec " + kSpec +
                       " --target positional_logits --seed 3 --no-corpus --no-replay-check --format json "
                       "--invariant lossless");
  EXPECT_EQ(r.code, 1) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["invariants"][0]["counterexample"]["replay_check"]["detail"], "not re-run: --no-replay-check")
      << j["invariants"][0]["counterexample"]["replay_check"];
  // A fixed seed: the spec's own is 0 (fresh), and 3 trials of a fresh one
  // can leave o_rounded_to_nearest short of cases (a CI run's 'discarded').
  const CliRun old = run("--spec " + std::string(KPROP_SOURCE_DIR) +
                         "/specs/flash_fwd.yaml --trials 3 --jobs 1 --seed 20261122 --no-corpus");
  EXPECT_EQ(old.code, 0) << old.out;
  EXPECT_NE(old.out.find("is now " + std::string(KPROP_SOURCE_DIR) + "/specs/attention_fwd.yaml"),
            std::string::npos)
      << old.out;
  const CliRun missing = run("--spec " + std::string(KPROP_SOURCE_DIR) + "/specs/no_such_spec.yaml");
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("File does not exist"), std::string::npos) << missing.out;
}

// A failing invariant checked the case it failed on too: its JSON count
// agrees with the run's (it said trials_to_fail - 1).
TEST(Cli, AFailingInvariantCountsTheCaseItFailedOn) {
  const CliRun r = run("--spec " + kSpec +
                       " --target positional_logits --seed 3 --no-corpus --format json --invariant lossless");
  EXPECT_EQ(r.code, 1) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  const auto& inv = j["invariants"][0];
  EXPECT_EQ(inv["status"], "FAILED");
  EXPECT_EQ(inv["checked"], inv["trials_to_fail"]) << inv;
}

// --fail-fast ends the run at the first counterexample: the invariant that
// broke has the finding the full run has for it (the same case, shrunk the
// same way), and every invariant it did not finish is not run, never passed.
TEST(Cli, FailFastStopsAtTheFirstCounterexample) {
  const std::string args =
      "--spec " + kSpec + " --target positional_logits --seed 3 --no-corpus --format json";
  const CliRun full = run(args), fast = run(args + " --fail-fast");
  ASSERT_EQ(full.code, 1) << full.out;
  ASSERT_EQ(fast.code, 1) << fast.out;
  const auto all = nlohmann::json::parse(full.out.substr(full.out.find('{')));
  const auto first = nlohmann::json::parse(fast.out.substr(fast.out.find('{')));
  EXPECT_FALSE(all["stopped_at_failure"]);
  EXPECT_TRUE(first["stopped_at_failure"]);
  ASSERT_EQ(first["invariants"].size(), all["invariants"].size());
  int broken = 0, not_run = 0, failed_in_full = 0;
  int64_t fail_trial = -1;
  for (size_t k = 0; k < all["invariants"].size(); ++k) {
    const auto &a = all["invariants"][k], &f = first["invariants"][k];
    failed_in_full += a["status"] == "FAILED";
    if (f["status"] == "FAILED") {
      ++broken;
      fail_trial = f["trials_to_fail"].get<int64_t>();
      EXPECT_EQ(a["status"], "FAILED") << a["name"];
      EXPECT_EQ(f["trials_to_fail"], a["trials_to_fail"]) << a["name"];
      EXPECT_EQ(f["counterexample"]["case_yaml"], a["counterexample"]["case_yaml"]) << a["name"];
    } else {
      EXPECT_EQ(f["status"], "not run") << f;
      ++not_run;
    }
  }
  EXPECT_EQ(broken, 1) << fast.out;
  EXPECT_GE(failed_in_full, 1);
  EXPECT_GT(not_run, 0);
  EXPECT_EQ(first["trials"], fail_trial) << "no case is drawn after the first counterexample";
  const std::string said =
      fmt::format("the first counterexample ended the run: {} invariant(s) not run to the end", not_run);
  EXPECT_EQ(first["detail"], said);
  const CliRun text = run("--spec " + kSpec + " --target positional_logits --seed 3 --no-corpus --fail-fast");
  EXPECT_EQ(text.code, 1) << text.out;
  EXPECT_NE(
      text.out.find("FAILED: 1 of " + std::to_string(not_run + 1) + " invariants broken (" + said + ")"),
      std::string::npos)
      << text.out;
  // The failing invariant alone: nothing was left undone, nothing is said;
  // with --search, the search the run would have made is.
  std::string broken_name;
  for (const auto& f : first["invariants"])
    if (f["status"] == "FAILED") broken_name = f["name"];
  const CliRun alone = run(args + " --fail-fast --invariant " + broken_name);
  ASSERT_EQ(alone.code, 1) << alone.out;
  const auto one = nlohmann::json::parse(alone.out.substr(alone.out.find('{')));
  EXPECT_FALSE(one["stopped_at_failure"]) << one;
  EXPECT_FALSE(one.contains("detail")) << one;
  const CliRun searched = run(args + " --fail-fast --search --invariant " + broken_name);
  ASSERT_EQ(searched.code, 1) << searched.out;
  const auto no_search = nlohmann::json::parse(searched.out.substr(searched.out.find('{')));
  EXPECT_TRUE(no_search["stopped_at_failure"]) << no_search;
  EXPECT_EQ(no_search["detail"], "the first counterexample ended the run: no search");
  // Where each invariant's verdict is what the mode reports, it is refused.
  const std::pair<std::string, std::string> refused[] = {
      {"--spec " + kSpec + " --mutants --fail-fast", "--mutants excludes --fail-fast"},
      {"--spec " + kSpec + " --replay x --fail-fast", "--replay excludes --fail-fast"},
      {"--spec " + kSpec + " --output-coverage --fail-fast", "--output-coverage excludes --fail-fast"},
      {"--spec " + kSpec + " --fuzz --fail-fast", "--fuzz takes no --fail-fast"},
      {"--list --fail-fast", "--list takes no --fail-fast"}};
  expect_input_errors(refused, "internal error");
}

// --list --spec shows the domain the spec draws from, after --domain (the
// declined health check's advice points there for the keys to narrow).
TEST(Cli, ListOfASpecShowsItsDomain) {
  const std::string spec = std::string(KPROP_SOURCE_DIR) + "/specs/softmax_topk.yaml";
  const CliRun r = run("--list --spec " + spec + " --domain '{dtypes: [f32, f64]}'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("domain (--domain '{KEY: VALUE}' overrides a key"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  dtypes            [f32, f64]\n"), std::string::npos) << r.out;
  // A map's keys under it, as --domain '{values: {magnitude_log2: ...}}' names them.
  EXPECT_NE(r.out.find("  values:\n    magnitude_log2  ["), std::string::npos) << r.out;
  const CliRun j = run("--list --format json --spec " + spec);
  EXPECT_EQ(j.code, 0) << j.out;
  const auto listed = nlohmann::json::parse(j.out)["domain"];
  EXPECT_EQ(listed["dtypes"].size(), 4u) << j.out;
  EXPECT_EQ(listed["values"]["magnitude_log2"].size(), 2u) << j.out;
  // A constrained range as the text shows it, under its profile (JSON said
  // [1, 1024] for a dim drawn at multiples of 64 +- 1, and no profile).
  const CliRun gpu = run("--list --format json --spec " + std::string(KPROP_SOURCE_DIR) +
                         "/specs/layernorm.yaml --profile gpu");
  EXPECT_EQ(gpu.code, 0) << gpu.out;
  const auto g = nlohmann::json::parse(gpu.out);
  EXPECT_EQ(g["profile"], "gpu");
  EXPECT_EQ(g["domain"]["dim"],
            nlohmann::json::parse(R"({"range": [1, 1024], "multiple_of": 64, "offsets": [-1, 0, 1]})"))
      << gpu.out;
  // An op's domain: its dtypes, dims and attrs.
  const CliRun op = run("--list --spec " + std::string(KPROP_SOURCE_DIR) + "/specs/ops/rmsnorm.yaml");
  EXPECT_EQ(op.code, 0) << op.out;
  EXPECT_NE(op.out.find("  dtypes  [f32, f64, f16, bf16]\n"), std::string::npos) << op.out;
  EXPECT_NE(op.out.find("  T       ["), std::string::npos) << op.out;
  EXPECT_NE(op.out.find("  eps     {one_of: [1e-05, 1e-06]}\n"), std::string::npos) << op.out;
  // Its mutants (op.mutants), the one only profile wide reaches marked, each with its description.
  EXPECT_NE(op.out.find("\nmutants (--mutants runs each, [P] under profile P; --target NAME runs one)\n  "
                        "mean_not_squares  "),
            std::string::npos)
      << op.out;
  EXPECT_NE(
      op.out.find("\n  sumsq_first_1024 [wide]  exec:/usr/bin/python3 ../../examples/ops/rmsnorm.py --bug "
                  "sumsq_first_1024\n"),
      std::string::npos)
      << op.out;
  const CliRun narrowed = run("--list --spec " + std::string(KPROP_SOURCE_DIR) +
                              "/specs/ops/rmsnorm.yaml --domain '{eps: 1.0e-6}'");
  EXPECT_EQ(narrowed.code, 0) << narrowed.out;
  EXPECT_NE(narrowed.out.find("  eps     {one_of: [1e-06]}\n"), std::string::npos) << narrowed.out;
}

// An output read only by a `when` is not checked by that invariant (a
// precondition only discards): --list says so.
TEST(Cli, AnOutputReadOnlyInAWhenIsUnchecked) {
  const fs::path spec = temp("when.yaml");
  std::ofstream(spec) << "spec: when_only\nfamily: softmax_topk\ninvariants:\n  - name: e\n"
                         "    when: all(target.indices >= 0)\n    expect: all(isfinite(target.probs))\n";
  const CliRun r = run("--list --spec " + spec.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("unchecked outputs: softmax_topk.indices"), std::string::npos) << r.out;
}

// A run's "unchecked outputs" are those no invariant *of the run* reads:
// under --invariant, the ones left out do not check anything (the line
// named the spec's whole list, so an output checked by nothing that ran went
// unsaid).
TEST(Cli, UncheckedOutputsAreThoseTheRunsInvariantsLeave) {
  const fs::path spec = temp("two.yaml");
  std::ofstream(spec)
      << "spec: two\nfamily: softmax_topk\ntarget: reference\nrun: {trials: 20}\ninvariants:\n"
         "  - {name: probs_finite, expect: all(isfinite(target.probs))}\n"
         "  - {name: indices_valid, expect: all(target.indices >= 0)}\n";
  const CliRun all = run("--spec " + spec.string() + " --seed 3 --no-corpus");
  EXPECT_EQ(all.code, 0) << all.out;
  EXPECT_EQ(all.out.find("unchecked outputs"), std::string::npos) << all.out;
  const CliRun one = run("--spec " + spec.string() + " --seed 3 --no-corpus --invariant probs_finite");
  EXPECT_EQ(one.code, 0) << one.out;
  EXPECT_NE(one.out.find("unchecked outputs: softmax_topk.indices (no invariant of this run reads them"),
            std::string::npos)
      << one.out;
}

TEST(Cli, UsageAndSpecErrorsExitTwoWithOneLine) {
  const fs::path bad = temp("bad.yaml");
  std::ofstream(bad) << "spec: x\nfamily: dflash\ndomain:\n  vocab: [9, 2]\n";
  const std::pair<std::string, std::string> cases[] = {
      {"--spec " + bad.string(), "bad.yaml:4:10: 'vocab' is an inverted range [9, 2]"},
      {"--spec " + kSpec + " --target positional", "did you mean 'positional_logits'?"},
      {"--spec " + kSpec + " --format xml", "--format xml: valid: text, json, junit"},
      {"--spec " + kSpec + " --invariant losless", "did you mean 'lossless'?"},
      {"--bogus", "bogus"},
      {"", "--spec is required"},
      {"--spec /no/such.yaml", "/no/such.yaml"},
      // Numbers: what the flag takes, not a 300-digit range; no wrapping, octal or hex.
      {"--spec " + kSpec + " --trials 0", "--trials: '0' is not a whole number in [1, 1e9]"},
      {"--spec " + kSpec + " --jobs 0", "--jobs: '0' is not a whole number of processes in [1, 4096]"},
      {"--spec " + kSpec + " --time nan", "--time: 'nan' is not a number of seconds in [0, 1e7]"},
      // Below a millisecond the deadline was 0 ns: no deadline at all.
      {"--spec " + kSpec + " --case-timeout 1e-10",
       "--case-timeout: '1e-10' is not a number of seconds in [0.001, 1e7]"},
      // Each mutant is the target in turn: --target was ignored, and all of them ran.
      {"--spec " + kSpec + " --mutants --target positional_logits", "--target excludes --mutants"},
      {"--spec " + kSpec + " --seed -1", "--seed -1: expected a decimal integer in [0, 9200000000000000000]"},
      {"--spec " + kSpec + " --seed 0x10", "--seed 0x10: expected a decimal integer"},
      {"--spec " + kSpec + " --shard 0x1/2", "--shard 0x1/2: expected I/N with 0 <= I < N"},
      {"--spec " + kSpec + " --shard 1/2/3", "--shard 1/2/3: expected I/N"},
      {"--spec " + kSpec + " --invariant lossless --invariant lossless",
       "--invariant lossless is given twice"},
      // An empty value (`--shard "$SHARD"`, SHARD unset) meant the flag was left
      // out: the whole unsharded run in every shard's job.
      {"--spec " + kSpec + " --shard ''", "--shard: is empty: give I/N"},
      {"--spec " + kSpec + " --seed ''", "--seed: is empty"},
      {"--spec " + kSpec + " --out ''", "--out: names no file"},
      {"--spec " + kSpec + " --corpus ''", "--corpus: names no folder"},
      {"--spec " + kSpec + " --replay ''", "--replay: names no file or folder"},
      // An --out that cannot be written is said before the run, not as an internal error after it.
      {"--spec " + kSpec + " --out /proc/no/report.json",
       "--out /proc/no/report.json: cannot create its folder"},
  };
  expect_input_errors(cases, "terminate");
  // An --out naming the spec would replace it with the report (a copy: a
  // regression must not overwrite the shipped spec).
  const fs::path copy = temp("copy.yaml");
  fs::copy_file(kSpec, copy, fs::copy_options::overwrite_existing);
  const std::pair<std::string, std::string> same[] = {
      {"--spec " + copy.string() + " --no-corpus --out " + copy.string(), "is the spec"}};
  expect_input_errors(same, "terminate");
  std::ifstream a(copy), b(kSpec);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(a), {}),
            std::string(std::istreambuf_iterator<char>(b), {}));
}

// --fuzz with no harness for the spec: an input error before anything is
// written (it made the work folder and its seed inputs, then failed).
TEST(Cli, FuzzWithoutAHarnessWritesNothing) {
  const fs::path work = temp("fuzz-work"), empty = temp("no-harnesses");
  fs::remove_all(work);
  fs::create_directories(empty);
  const CliRun r = run("--spec " + kSpec + " --fuzz --time 1 --no-corpus --work " + work.string() +
                       " --fuzzer-dir " + empty.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no libFuzzer harness for spec dflash"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(work)) << r.out;
}

// The harness runs in the run's domain (--domain reaches it, as
// KPROP_DOMAIN), and a spec error it meets ends the run, exit 2, with its
// message. (The harness fuzzed the spec's own domain, so crash inputs
// decoded to other cases on import and "did not fail again"; and its
// error, which leaves no crash file, ended in "0 new finding(s)", exit 0.)
// A stand-in harness: it records its environment and stops on an error.
TEST(Cli, FuzzRunsTheHarnessInTheRunsDomainAndStopsOnItsError) {
  const fs::path dir = temp("fake-fuzzer"), work = temp("fake-fuzz-work"), seen = temp("fake-fuzzer-env");
  fs::remove_all(work);
  fs::create_directories(dir);
  const fs::path harness = dir / "fuzz_any_spec";
  std::ofstream(harness)
      << "#!/bin/sh\necho \"$KPROP_DOMAIN\" > " << seen.string()
      << "\necho 'kprop fuzz: error: dflash.yaml:9:13: cannot be evaluated on this case' >&2\n"
         "exit 2\n";
  fs::permissions(harness, fs::perms::owner_all);
  const CliRun r = run("--spec " + kSpec + " --fuzz --time 1 --no-corpus --domain '{vocab: [2, 9]}' --work " +
                       work.string() + " --fuzzer-dir " + dir.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(
      r.out.find("spec dflash: the fuzz harness stopped: dflash.yaml:9:13: cannot be evaluated on this case"),
      std::string::npos)
      << r.out;
  const std::string domain = contents(seen);
  EXPECT_NE(domain.find("vocab: [2, 9]"), std::string::npos) << domain;
  fs::remove_all(work);
  // In a fork job (libFuzzer keeps its output, and its parent exits 0) the
  // harness leaves the error in KPROP_ERROR_FILE: the run stops on it too.
  std::ofstream(harness)
      << "#!/bin/sh\n"
         "case \"$*\" in\n"
         "  *-runs=0*) echo 'kprop fuzz: tally: 2 input(s), 2 checked, 0 declined' >&2;;\n"
         "  *-fork=*) echo 'dflash.yaml:9:13: index 40 is out of range' > \"$KPROP_ERROR_FILE\";;\n"
         "esac\n";
  const CliRun forked = run("--spec " + kSpec + " --fuzz --time 1 --no-corpus --work " + work.string() +
                            " --fuzzer-dir " + dir.string());
  EXPECT_EQ(forked.code, 2) << forked.out;
  EXPECT_NE(
      forked.out.find("spec dflash: the fuzz harness stopped: dflash.yaml:9:13: index 40 is out of range"),
      std::string::npos)
      << forked.out;
  fs::remove_all(work);
}

// --fuzz prints its seed, and --seed S fixes libFuzzer's (-seed, one per
// spec and round, derived from S): the same S gives the same -seed, another
// S another. (It printed no seed and took no --seed: a fuzz run's mutations
// could not be run again.) A stand-in harness records its arguments.
TEST(Cli, FuzzPrintsItsSeedAndPassesItToLibFuzzer) {
  const fs::path dir = temp("fake-fuzzer-seed"), work = temp("fake-fuzz-seed-work"), seen = temp("fuzz-args");
  fs::create_directories(dir);
  const fs::path harness = dir / "fuzz_any_spec";
  std::ofstream(harness) << "#!/bin/sh\n"
                            "case \"$*\" in\n"
                            "  *-runs=0*) echo 'kprop fuzz: tally: 2 input(s), 2 checked, 0 declined' >&2;;\n"
                            "  *-fork=*) echo \"$*\" > "
                         << seen.string() << "; echo 'INFO: exiting: 0' >&2;;\nesac\n";
  fs::permissions(harness, fs::perms::owner_all);
  const auto fuzz = [&](const std::string& seed) {
    fs::remove_all(work);
    fs::remove(seen);
    const CliRun r = run("--spec " + kSpec + " --fuzz --time 1 --no-corpus --work " + work.string() +
                         " --fuzzer-dir " + dir.string() + seed);
    EXPECT_EQ(r.code, 0) << r.out;
    const std::string args = contents(seen);
    const auto at = args.find("-seed=");
    EXPECT_NE(at, std::string::npos) << args;
    return std::pair{r.out, at == std::string::npos ? "" : args.substr(at, args.find(' ', at) - at)};
  };
  const auto [out3, seed3] = fuzz(" --seed 3");
  EXPECT_NE(out3.find("kprop fuzz: seed 3\n"), std::string::npos) << out3;
  EXPECT_NE(out3.find("[dflash] libFuzzer " + seed3 + "\n"), std::string::npos) << out3;
  EXPECT_EQ(fuzz(" --seed 3").second, seed3);
  EXPECT_NE(fuzz(" --seed 4").second, seed3);
  // Without --seed (or with --seed 0): a fresh one, printed.
  const auto [fresh, fresh_seed] = fuzz("");
  EXPECT_NE(fresh.find("kprop fuzz: seed "), std::string::npos) << fresh;
  EXPECT_NE(fresh_seed, "-seed=0");
  fs::remove_all(work);
}

// A stand-in fuzz_any_spec in `dir`: its tally run checks 2 inputs, and its
// fork run does `save` (a shell command) with $d the crash folder prefix.
void write_crashing_harness(const fs::path& dir, const std::string& save) {
  const fs::path harness = dir / "fuzz_any_spec";
  std::ofstream(harness)
      << "#!/bin/sh\n"
         "for a in \"$@\"; do case \"$a\" in -artifact_prefix=*) d=\"${a#-artifact_prefix=}\";; "
         "esac; done\n"
         "case \"$*\" in\n"
         "  *-runs=0*) echo 'kprop fuzz: tally: 2 input(s), 2 checked, 0 declined' >&2;;\n"
         "  *-fork=*) "
      << save
      << ";;\n"
         "esac\n";
  fs::permissions(harness, fs::perms::owner_all);
}

// A crash input the harness saved that fails nothing when re-checked alone
// is no clean run: exit 1, the file named. (It was one stderr line among
// the progress, "0 new finding(s)", exit 0.) A stand-in harness saves one.
TEST(Cli, FuzzCrashInputsThatDoNotFailAgainAreNoCleanRun) {
  const fs::path dir = temp("fake-fuzzer-crash"), work = temp("fake-fuzz-crash-work");
  fs::remove_all(work);
  fs::create_directories(dir);
  write_crashing_harness(dir, "printf 'abcdefgh' > \"${d}crash-0001\"");
  const CliRun r = run("--spec " + kSpec + " --fuzz --time 1 --no-corpus --work " + work.string() +
                       " --fuzzer-dir " + dir.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("UNREPRODUCED dflash: the harness failed on " +
                       (work / "dflash" / "crashes" / "imported" / "crash-0001").string()),
            std::string::npos)
      << r.out;
  fs::remove_all(work);
}

// One bug's crash inputs, however many: one NEW finding, and the inputs
// that shrink onto its file are known, each stored case named with its
// replay (it said "150 new finding(s)" for 2 files with --no-corpus, and
// for known ones only a count). A stand-in harness saves one failing seed
// input twice.
TEST(Cli, FuzzCrashInputsOfOneBugAreOneNewFindingAndKnownOnesAreNamed) {
  const fs::path dir = temp("fake-fuzzer-dup"), work = temp("fake-fuzz-dup-work"), seeds = temp("dup-seeds");
  fs::remove_all(work);
  fs::remove_all(seeds);
  fs::create_directories(dir);
  ASSERT_EQ(run("--spec " + kSpec + " --fuzz-seeds " + seeds.string() + " --seed 3").code, 0);
  const fs::path failing = seeds / "seed-052";  // fails positional_logits (maximal_acceptance)
  ASSERT_TRUE(fs::exists(failing));
  write_crashing_harness(
      dir, "cp " + failing.string() + " \"${d}crash-0001\"; cp " + failing.string() + " \"${d}crash-0002\"");
  const CliRun r = run("--spec " + kSpec + " --fuzz --time 1 --no-corpus --target positional_logits --work " +
                       work.string() + " --fuzzer-dir " + dir.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("1 new finding(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 more crash input(s) reproduced findings already stored:\n    dflash: "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 input(s) -> "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; replay: "), std::string::npos) << r.out;
  fs::remove_all(work);
  fs::remove_all(seeds);
}

// An error and a crash of one target are two findings, each stored with a
// replay that fails that way again: the failure's kind is part of the
// signature, with a corpus and (the run's own) with --no-corpus. (Both were
// the signature (invariant "", target): the crash imported after the error
// was "known" under the error's message, its shrunk file was removed, and
// the replay printed reproduced the error.) A worker that raises on an odd
// row length and aborts on an even one; seed-010 of seed 1 has an odd D,
// seed-012 an even one.
TEST(Cli, ImportKeepsATargetsErrorAndCrashApart) {
  if (std::string(KPROP_PYTHON).empty()) GTEST_SKIP() << "no python3 with NumPy";
  const fs::path dir = temp("import-kinds"), seeds = dir / "seeds", corpus = dir / "corpus";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "worker.py") << "import os, sys\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
                                   << "/python')\nimport kprop_worker\n\n\ndef op(x, **_):\n"
                                      "    if x.shape[-1] % 2 == 1:\n        raise ValueError('odd D')\n"
                                      "    os.abort()\n\n\nkprop_worker.serve({'rmsnorm': op})\n";
  const std::string spec = std::string(KPROP_SOURCE_DIR) + "/specs/ops/rmsnorm.yaml";
  ASSERT_EQ(run("--spec " + spec + " --fuzz-seeds " + seeds.string() + " --seed 1").code, 0);
  const std::string inputs =
      " --import " + (seeds / "seed-010").string() + " " + (seeds / "seed-012").string();
  for (const std::string& where : {" --corpus " + corpus.string(), std::string(" --no-corpus")}) {
    const CliRun r = run("--spec " + spec + where + inputs + " --target " + python_exec(dir / "worker.py"));
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("NEW   " + (seeds / "seed-010").string() + ": target failure (error): "),
              std::string::npos)
        << where << "\n"
        << r.out;
    const auto crash = r.out.find("NEW   " + (seeds / "seed-012").string() + ": target failure (crash): ");
    ASSERT_NE(crash, std::string::npos) << where << "\n" << r.out;
    // The crash's own file, and a replay of it crashes again (a replay of
    // the error's file exits 3 too: the line says which failure it was).
    const auto stored = r.out.find("stored: ", crash), replay = r.out.find("replay: ", crash);
    ASSERT_NE(stored, std::string::npos) << r.out;
    ASSERT_NE(replay, std::string::npos) << r.out;
    const std::string file = r.out.substr(stored + 8, r.out.find('\n', stored) - stored - 8);
    EXPECT_NE(contents(file).find("found_by: crash"), std::string::npos) << file;
    const std::string cmd = r.out.substr(replay + 8, r.out.find('\n', replay) - replay - 8);
    const std::string again = cmd.substr(cmd.find(" --spec ") + 1);
    const CliRun replayed = run(again);
    EXPECT_EQ(replayed.code, 3) << again << "\n" << replayed.out;
    EXPECT_NE(replayed.out.find("target: crash (while checking matches_reference): rmsnorm: the target was "
                                "killed by signal 6"),
              std::string::npos)
        << again << "\n"
        << replayed.out;
  }
  EXPECT_EQ(kprop::list_corpus((corpus / "rmsnorm").string()).size(), 2u);
  fs::remove_all(dir);
}

// The end-of-round merge replaces the coverage corpus only when its output
// is whole: a merge that wrote empty files and exited 0 (libFuzzer on a
// full disk: it does not check its writes) or one that failed leaves the
// corpus as it was, and the run says so in a line, its verdict unchanged.
// (The corpus was replaced by the empty files, 155 of 157 inputs, without
// a word, exit 0.) A stand-in harness adds three inputs to the corpus and
// an empty one (as fuzzing on a full disk leaves them: each empty file of
// the merge's then matched it), and merges as `merge` says ($prev the
// merge's output folder, $last the corpus).
TEST(Cli, FuzzKeepsTheCoverageCorpusWhenItsMergeFails) {
  const fs::path dir = temp("fake-fuzzer-merge"), work = temp("fake-fuzz-merge-work");
  fs::create_directories(dir);
  const fs::path corpus = work / "dflash" / "corpus";
  const auto fuzz = [&](const std::string& merge) {
    std::ofstream(dir / "fuzz_any_spec")
        << "#!/bin/sh\n"
           "for a in \"$@\"; do prev=\"$last\"; last=\"$a\"; done\n"
           "case \"$*\" in\n"
           "  *-runs=0*) echo 'kprop fuzz: tally: 2 input(s), 2 checked, 0 declined' >&2;;\n"
           "  *-fork=*) printf one > \"$prev/a\"; printf two > \"$prev/b\"; printf three > \"$prev/c\"; : > "
           "\"$prev/d\"; "
           "echo 'INFO: exiting: 0' >&2;;\n"
           "  *-merge=1*) "
        << merge << ";;\nesac\n";
    fs::permissions(dir / "fuzz_any_spec", fs::perms::owner_all);
    fs::remove_all(work);
    return run("--spec " + kSpec + " --fuzz --time 1 --no-corpus --seed 1 --work " + work.string() +
               " --fuzzer-dir " + dir.string());
  };
  const auto inputs = [&] {
    std::string all;
    for (const char* name : {"a", "b", "c"})
      all += fs::exists(corpus / name) ? contents(corpus / name) + " " : std::string("- ");
    return all;
  };
  const std::string kept = "[dflash] the coverage corpus was not merged: ";
  // A full disk: every file it wrote is empty, and it exits 0.
  const CliRun full = fuzz("for f in \"$last\"/*; do : > \"$prev/${f##*/}\"; done");
  EXPECT_EQ(full.code, 0) << full.out;
  EXPECT_NE(
      full.out.find(kept + "libFuzzer's merge wrote 4 file(s), 4 of them empty or no whole copy of an input"),
      std::string::npos)
      << full.out;
  EXPECT_EQ(inputs(), "one two three ") << full.out;
  // A merge that fails after writing one input.
  const CliRun failed = fuzz("cp \"$last/a\" \"$prev/\"; echo 'MERGE-OUTER: failed' >&2; exit 1");
  EXPECT_EQ(failed.code, 0) << failed.out;
  EXPECT_NE(failed.out.find(kept + "libFuzzer's merge ended with exit status 1: MERGE-OUTER: failed"),
            std::string::npos)
      << failed.out;
  EXPECT_EQ(inputs(), "one two three ") << failed.out;
  // A whole merge that keeps one input replaces the corpus, without a word.
  const CliRun merged = fuzz("cp \"$last/b\" \"$prev/\"");
  EXPECT_EQ(merged.code, 0) << merged.out;
  EXPECT_EQ(merged.out.find(kept), std::string::npos) << merged.out;
  EXPECT_EQ(inputs(), "- two - ") << merged.out;
  fs::remove_all(work);
}

// Two --fuzz runs of one spec in one work folder: the second refuses (exit
// 2, one line naming the folder) while the first runs, and the first ends
// as it would alone. (Each imported the other's crash inputs against its
// own target: the clean run printed UNREPRODUCED lines and exited 1 with 0
// findings; the other set the first's inputs aside as an earlier run's; and
// their merges replaced the shared coverage corpus under each other.) The
// stand-in harness's fork job notes that it started, then waits for `go`.
TEST(Cli, FuzzRefusesAWorkFolderAnotherRunIsUsing) {
  const fs::path dir = temp("fake-fuzzer-lock"), work = temp("fake-fuzz-lock-work");
  const fs::path started = dir / "started", go = dir / "go";
  fs::remove_all(work);
  fs::create_directories(dir);
  std::ofstream(dir / "fuzz_any_spec")
      << "#!/bin/sh\n"
         "case \"$*\" in\n"
         "  *-runs=0*) echo 'kprop fuzz: tally: 2 input(s), 2 checked, 0 declined' >&2;;\n"
         "  *-fork=*) touch "
      << started.string() << "; i=0; while [ ! -e " << go.string()
      << " ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; echo 'INFO: exiting: 0' >&2;;\n"
         "esac\n";
  fs::permissions(dir / "fuzz_any_spec", fs::perms::owner_all);
  const std::string args = "--spec " + kSpec + " --fuzz --time 1 --no-corpus --seed 1 --work " +
                           work.string() + " --fuzzer-dir " + dir.string();
  CliRun first;
  std::thread running([&] { first = run(args); });
  for (int i = 0; i < 600 && !fs::exists(started); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(started)) << "the first run's harness never started";
  const CliRun second = run(args);
  std::ofstream(go).flush();
  running.join();
  EXPECT_EQ(second.code, 2) << second.out;
  EXPECT_NE(second.out.find("--work " + work.string() + ": another prop_runner --fuzz is using it"),
            std::string::npos)
      << second.out;
  EXPECT_NE(second.out.find("pass --work elsewhere"), std::string::npos) << second.out;
  EXPECT_EQ(first.code, 0) << first.out;
  EXPECT_EQ(first.out.find("set aside"), std::string::npos) << first.out;
  // The folder is free again once the first run has ended.
  const CliRun after = run(args);
  EXPECT_EQ(after.code, 0) << after.out;
  fs::remove_all(work);
}

// A shard's share of the run's cases is rounded: it may run out a little
// short of trials on discards inside its budget, with no case declined.
// That is still a pass, as unsharded (it gave up, exit 2, while the rule
// for cases the target declined was written).
TEST(Cli, AShardShortOnItsOwnDiscardsStillPasses) {
  const fs::path spec = temp("shard_probe.yaml");
  std::ofstream(spec)
      << "spec: shard_probe\nfamily: softmax_topk\ntarget: fused\nreference: reference\n"
         "run: {trials: 4, max_size: 100, seed: 7, max_discard_ratio: 1}\n"
         "domain: {dtype: [f32], rows: [1, 2], vocab: [1, 40]}\n"
         "invariants:\n  - name: rare\n    when: V <= 20\n    expect: all(target.probs >= 0)\n";
  const CliRun r = run("--spec " + spec.string() + " --shard 0/3 --seed 10 --no-corpus");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("cases: 3 drawn, 1 checked"), std::string::npos) << r.out;
}

// A run that ends in an error after --out was accepted leaves the format's
// error report there. (The last run's report stayed, saying it passed.)
TEST(Cli, AnErrorMidRunLeavesAnErrorReportAtOut) {
  const fs::path spec = temp("mid_run_error.yaml"), out = temp("mid_run_error.xml");
  std::ofstream(spec) << "spec: softmax_topk\nfamily: softmax_topk\nrun: {trials: 20, seed: 1}\n"
                         "domain: {vocab: [1, 30]}\ninvariants:\n  - name: idx_expr\n"
                         "    expect: all(target.probs[:, 0] <= 1) and all(logits[:, 40] == logits[:, 40])\n";
  std::ofstream(out) << "<testsuites><testsuite failures=\"0\" errors=\"0\"/></testsuites>\n";
  const CliRun r = run("--spec " + spec.string() + " --no-corpus --format junit --out " + out.string());
  EXPECT_EQ(r.code, 2) << r.out;
  const std::string xml = contents(out);
  EXPECT_NE(xml.find("errors=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<error message=\"exit 2: "), std::string::npos) << xml;
  EXPECT_NE(xml.find("cannot be evaluated"), std::string::npos) << xml;
  // JSON likewise.
  const CliRun j = run("--spec " + spec.string() + " --no-corpus --format json --out " + out.string());
  EXPECT_EQ(j.code, 2) << j.out;
  const std::string json = contents(out);
  EXPECT_NE(json.find("\"status\": \"error\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"exit_code\": 2"), std::string::npos) << json;
}

// What the QA pass found taken silently or as an internal error: each is now
// one line and exit 2.
TEST(Cli, LeftOutValuesAndModesWithoutReportsAreInputErrors) {
  const fs::path nulls = temp("nulls.yaml");
  std::ofstream(nulls) << "spec: nulls\nfamily: dflash\nrun:\n  trials:\n";
  const fs::path tabbed = temp("tabbed.yaml");
  std::ofstream(tabbed) << "spec: t\nfamily: dflash\nrun:\n\ttrials: 3\n  seed: 1\n";
  // An expression with a slice written `a: b` (or `: ,`), unquoted: YAML
  // reads a second key on the line ("illegal map value", no more).
  const fs::path sliced = temp("sliced.yaml");
  std::ofstream(sliced) << "spec: s\nfamily: softmax_topk\ninvariants:\n  - name: a\n"
                           "    expect: all(target.probs[0: 1] >= 0)\n";
  const fs::path when = temp("when.yaml");
  std::ofstream(when)
      << "spec: w\nfamily: dflash\ninvariants:\n  - {name: maximal_acceptance, when: 'true'}\n";
  const std::string ops = std::string(KPROP_SOURCE_DIR) + "/specs/ops/rmsnorm.yaml";
  const fs::path replayed = temp("replayed-folder");
  fs::create_directories(replayed / "dflash");
  const std::pair<std::string, std::string> cases[] = {
      {"--spec " + nulls.string() + " --no-corpus", "nulls.yaml:4:3: 'trials' has no value"},
      // The report would replace a stored case before it is read.
      {"--spec " + kSpec + " --replay " + replayed.string() + " --out " +
           (replayed / "dflash" / "r.json").string(),
       "is inside the folder --replay reads"},
      {"--spec " + kSpec + " --no-corpus --domain '{vocab: null}'", "--domain:1:2: 'vocab' has no value"},
      {"--spec " + ops + " --no-corpus --domain '{t: [2, 3]}'",
       "--domain:1:2: unknown key 't' in the domain of op rmsnorm (its dtypes, dims and attrs) (did you "
       "mean 'T'?); valid: dtypes, T, D, eps"},
      {"--spec " + ops + " --no-corpus --domain '{dtypes: [i32]}'",
       "--domain:1:10: dtypes: the case's dtype is floating (f32, f64, f16, bf16); got i32"},
      // A dtype the op does not declare: drawn, its cases were refused on replay.
      {"--spec " + std::string(KPROP_SOURCE_DIR) +
           "/specs/ops/sort.yaml --no-corpus --domain '{dtypes: [f16]}'",
       "--domain:1:10: dtypes: op sort declares f32, f64 for the case's dtype, not f16"},
      {"--spec " + std::string(KPROP_SOURCE_DIR) + "/tests/external/op_copy.yaml --no-corpus --mutants",
       "--mutants: family op of spec copy has no mutants to run"},
      {"--spec " + kSpec + " --fuzz --out " + temp("fuzz.json").string(), "--fuzz takes no --out"},
      {"--spec " + kSpec + " --import x --format json", "--import takes no --format"},
      // What a fuzz mode does not do is refused, not silently dropped (--fuzz
      // --mutants fuzzed the reference and exited 0; --fuzz --replay fuzzed).
      {"--spec " + kSpec + " --fuzz --mutants", "--fuzz takes no --mutants: it fuzzes one target"},
      // Its one health check is `declined` (its seed run's); --padded-tensors
      // would not reach the harness, which reads the spec itself.
      {"--spec " + kSpec + " --fuzz --suppress-health-check too_slow",
       "--fuzz takes --suppress-health-check declined only, not too_slow"},
      {"--spec " + kSpec + " --fuzz --padded-tensors", "--fuzz takes no --padded-tensors"},
      {"--spec " + kSpec + " --no-corpus --domain '{vocab:[2, 3]}'",
       "('vocab:[' has no space after its ':', so it is no key: write 'vocab: [')"},
      // An external target without its scheme.
      {"--spec " + kSpec + " --no-corpus --target ./libmine.so", "(did you mean 'plugin:./libmine.so'?"},
      {"--spec " + kSpec + " --no-corpus --target 'python3 w.py'", "(did you mean 'exec:python3 w.py'?"},
      {"--spec " + kSpec + " --no-corpus --target dir/w.py", "(did you mean 'exec:python3 dir/w.py'?"},
      {"--spec " + kSpec + " --no-corpus --target plugins:./x.so", "no scheme 'plugins:'"},
      {"--spec " + kSpec + " --fuzz --replay x", "--fuzz takes no --replay"},
      {"--spec " + kSpec + " --fuzz --search --trials 7", "--fuzz takes no --trials"},
      {"--spec " + kSpec + " --fuzz --seed x", "--seed x: expected a decimal integer"},
      {"--spec " + kSpec + " --fuzz --reference reference", "--fuzz takes no --reference"},
      {"--spec " + kSpec + " --import x --time 5", "--import takes no --time"},
      {"--spec " + kSpec + " --import x --jobs 2", "--import takes no --jobs"},
      {"--spec " + kSpec + " --fuzz-seeds x --target reference", "--fuzz-seeds takes no --target"},
      {"--spec " + kSpec + " --fuzz-seeds x --import y", "--import takes no --fuzz-seeds"},
      {"--spec " + kSpec + " --fuzz-seeds x --seed 0", "--fuzz-seeds --seed 0: give a seed S > 0"},
      {"--spec " + kSpec + " --fuzz-seeds x --work w", "--fuzz-seeds takes no --work"},
      {"--spec " + kSpec + " --no-corpus --fuzzer-dir d", "--fuzzer-dir applies to --fuzz only"},
      {"--spec " + kSpec + " --no-corpus --profile ''", "--profile: names no profile"},
      {"--spec " + kSpec + " --no-corpus --domain ''", "--domain: overrides nothing"},
      {"--spec " + kSpec + " --replay x --trials 5", "--replay takes no --trials"},
      {"--spec " + kSpec + " --replay x --shard 0/2", "--replay takes no --shard"},
      {"--list --spec " + kSpec + " --out " + temp("list.txt").string(), "--list takes no --out"},
      {"--list --spec " + kSpec + " --shard 3/2", "--list takes no --shard"},
      {"--list --invariant nope", "--list takes no --invariant: it lists and runs nothing"},
      {"--spec " + kSpec + " --replay x --search", "--replay takes no --search"},
      {"--spec " + kSpec + " --replay x --search-time 1", "--replay takes no --search"},
      {"--spec " + kSpec + " --no-corpus --search-trials 10 --search=false",
       "--search=false contradicts --search-trials, which implies --search"},
      {"--spec " + kSpec + " --no-corpus --search-time 1 --search=false",
       "--search=false contradicts --search-time, which implies --search"},
      // A profile's own invariant list: the invariant is the spec's, not the profile's.
      {"--spec " + std::string(KPROP_SOURCE_DIR) +
           "/specs/beam.yaml --no-corpus --invariant matches_exhaustive --profile large",
       "--invariant matches_exhaustive: not in spec beam under profile large; the spec checks there: "},
      // A mutant is no oracle (it failed the correct target, stored as a finding).
      {"--spec " + kSpec + " --no-corpus --reference positional_logits",
       "reference 'positional_logits' is a mutant of family dflash (a planted bug), not an oracle"},
      {"--list --skipped-exit 77", "--list takes no --skipped-exit"},
      {"--spec " + kSpec + " --no-corpus --skipped-exit 256",
       "--skipped-exit: '256' is not an exit code in [0, 255]"},
      // An empty name is not the spec's default.
      {"--spec " + kSpec + " --no-corpus --target ''", "--target: names no implementation"},
      {"--spec " + kSpec + " --no-corpus --reference ''", "--reference: names no implementation"},
      {"--spec " + kSpec + " --replay x --seed 3", "--replay takes no --seed"},
      {"--spec " + kSpec + " --no-corpus --shard 1/2",
       "--shard 1/2: the shards must draw the same cases, so "
       "they need one fixed seed: pass the same --seed S"},
      {"--spec " + kSpec + " --no-corpus --seed 0 --shard 1/2",
       "--shard 1/2: the shards must draw the same cases, so they need one fixed seed: pass the same --seed "
       "S "
       "to every shard (--seed 0 asks for a fresh seed each run)"},
      // A tab in an indentation: yaml-cpp's "illegal map value" says why.
      {"--spec " + tabbed.string() + " --no-corpus",
       "(line 4 indents with a tab: YAML indents with spaces only)"},
      {"--spec " + sliced.string() + " --no-corpus",
       "sliced.yaml:5:31: invalid YAML: illegal map value (the value after 'expect:' holds a ':' (a slice?): "
       "quote it, or write it as a block, 'expect: >-' with the text on the lines below)"},
      {"--spec " + when.string() + " --no-corpus",
       "when.yaml:4:38: 'when' is for expression invariants: the built-in invariant 'maximal_acceptance'"},
      {"--spec " + kSpec + " --no-corpus --seed 3 --trials 2 --shard 5/10",
       "--shard 5/10: the run has 2 trial(s), so shard 5 would check none"},
      {"--spec " + kSpec + " --fuzz-seeds " + nulls.string(),
       "--fuzz-seeds " + nulls.string() + ": cannot create the folder"},
  };
  expect_input_errors(cases, "internal error");
  EXPECT_FALSE(fs::exists(temp("fuzz.json")));
  // A spec without a domain: section takes --domain (it was an internal error, exit 3).
  const fs::path bare = temp("bare.yaml");
  std::ofstream(bare) << "spec: bare\nfamily: softmax_topk\n";
  const CliRun r = run("--spec " + bare.string() + " --no-corpus --trials 5 --domain '{rows: [1, 2]}'");
  EXPECT_EQ(r.code, 0) << r.out;
}

// A run whose --domain needs --max-case-mb: its printed replay passes it on
// (the replay left it out, exited 2 "over run.max_case_mb" and every
// finding carried "the replay command ... did not run through").
TEST(Cli, APrintedReplayKeepsTheRunsMemoryBudget) {
  std::string text = contents(std::string(KPROP_SOURCE_DIR) + "/specs/softmax_topk.yaml");
  ASSERT_NE(text.find("\nrun: {"), std::string::npos);
  text.replace(text.find("\nrun: {"), 7, "\nrun: {max_case_mb: 1, ");
  const fs::path spec = temp("budget.yaml"), corpus = temp("budget_corpus");
  std::ofstream(spec) << text;
  const std::string args = "--spec " + spec.string() +
                           " --domain '{vocab: [1, 3000]}' --target no_max_subtraction --seed 1 --jobs 1";
  ASSERT_EQ(run(args + " --no-corpus --trials 1").code, 2);  // over 1 MB without it
  const CliRun r = run(args + " --max-case-mb 16 --corpus " + corpus.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--max-case-mb 16 --invariant"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("did not run through"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("WARNING"), std::string::npos) << r.out;
  fs::remove_all(corpus);
}

// A worker that dies while a process it started holds its stdout open: a
// crash, shrunk like any (it waited for EOF, so it was a hang after
// case_timeout_s, not shrunk).
TEST(Cli, AWorkerThatDiesWhileItsChildHoldsThePipeIsACrash) {
  if (std::string(KPROP_PYTHON).empty()) GTEST_SKIP() << "no python3 with NumPy";
  const fs::path worker = temp("dies.py");
  std::ofstream(worker) << "import os, signal, subprocess, sys\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
                        << "/python')\nimport kprop_worker\n\n\ndef op(**_):\n"
                           "    subprocess.Popen(['sleep', '60'])  # inherits the reply pipe\n"
                           "    os.kill(os.getpid(), signal.SIGSEGV)\n\n\n"
                           "kprop_worker.serve({'layernorm': op})\n";
  const CliRun r = run("--spec " + std::string(KPROP_SOURCE_DIR) +
                       "/specs/layernorm.yaml --no-corpus --trials 5 --seed 1 --jobs 1 --case-timeout 20 "
                       "--target " +
                       python_exec(worker));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("was killed by signal 11 (Segmentation fault) during the call"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("hung"), std::string::npos) << r.out;
}

// The running `sleep MARKER` processes (a test's workers start them with a
// marker of their own).
int sleeps_running(const std::string& marker) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string text((std::istreambuf_iterator<char>(cmdline)), {});
    n += text.find(std::string("sleep") + '\0' + marker) != std::string::npos;
  }
  return n;
}

// Processes an exec: worker starts in a session of their own die with it
// under --jobs too: each job stops its children's whole trees before it
// exits (it killed their process groups only, and these outlived the run).
TEST(Cli, AWorkersSetsidDescendantsDieUnderJobs) {
  if (std::string(KPROP_PYTHON).empty()) GTEST_SKIP() << "no python3 with NumPy";
  const std::string marker = "61." + std::to_string(::getpid());  // sleep's argument: this test's processes
  const fs::path worker = temp("daemonises.py");
  std::ofstream(worker) << "import subprocess, sys\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
                        << "/python')\nimport kprop_worker\ncalls = 0\n\n\ndef op(**_):\n"
                           "    global calls\n    calls += 1\n    if calls <= 2:\n"
                           "        subprocess.Popen(['sleep', '"
                        << marker
                        << "'], start_new_session=True, stdin=subprocess.DEVNULL,\n"
                           "                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                           "    raise kprop_worker.Unsupported('declines every case')\n\n\n"
                           "kprop_worker.serve({'layernorm': op})\n";
  const CliRun r =
      run("--spec " + std::string(KPROP_SOURCE_DIR) +
          "/specs/layernorm.yaml --no-corpus --trials 20 --seed 1 --jobs 2 --target " + python_exec(worker));
  EXPECT_EQ(r.code, 0) << r.out;  // skipped: every case declined
  EXPECT_EQ(sleeps_running(marker), 0) << r.out;
}

// ... and so do those of a worker stopped mid-call: the pool's SIGTERM
// handler kills process groups only, so the runner kills what carries the
// stopped job's tokens (a slow worker's setsid helper outlived the run, and
// held `prop_runner | tail` open until it died).
TEST(Cli, ASetsidDescendantOfAWorkerStoppedMidCallDies) {
  if (std::string(KPROP_PYTHON).empty()) GTEST_SKIP() << "no python3 with NumPy";
  const std::string marker = "62." + std::to_string(::getpid());
  const fs::path worker = temp("slow_daemonises.py");
  std::ofstream(worker)
      << "import subprocess, sys, time\nimport numpy as np\nsys.path.insert(0, '" << KPROP_SOURCE_DIR
      << "/python')\nimport kprop_worker\nsubprocess.Popen(['sleep', '" << marker
      << "'], start_new_session=True, stdin=subprocess.DEVNULL,\n"
         "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n\n\n"
         "def rmsnorm(x, w, eps, **_):\n    time.sleep(0.7)\n"
         "    xf = x.astype(np.float64)\n"
         "    return {'y': xf / np.sqrt((xf * xf).mean(axis=-1, keepdims=True) + eps) * w}\n\n\n"
         "kprop_worker.serve({'rmsnorm': rmsnorm})\n";
  const CliRun r = run("--spec " + std::string(KPROP_SOURCE_DIR) +
                       "/specs/ops/rmsnorm.yaml --no-corpus --trials 1 --seed 3 --jobs 2 --domain '{dtypes: "
                       "[f64]}' --target " +
                       python_exec(worker));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(sleeps_running(marker), 0) << r.out;
}

// A run that cannot start says so in one line, before the run's header
// (these printed "kprop: spec ... seed N" first: two lines, the spec's
// target without its position).
TEST(Cli, ARunThatCannotStartSaysSoInOneLine) {
  std::string text = contents(kSpec);
  const size_t at = text.find("\ntarget: ");
  ASSERT_NE(at, std::string::npos);
  text.replace(at + 1, text.find('\n', at + 1) - at - 1, "target: \"exec:   \"");
  const fs::path spec = temp("exec_target.yaml");
  std::ofstream(spec) << text;
  const int line = int(std::count(text.begin(), text.begin() + long(at) + 1, '\n')) + 1;
  const fs::path folder = temp("plugin_folder");
  fs::create_directories(folder);
  const std::pair<std::string, std::string> cases[] = {
      {"--spec " + kSpec + " --no-corpus --target 'exec:  '", "exec: needs a command"},
      {"--spec " + spec.string() + " --no-corpus",
       fmt::format("exec_target.yaml:{}:9: exec: needs a command", line)},
      {"--spec " + kSpec + " --no-corpus --target plugin:" + folder.string(),
       ": a folder, not a shared library"},
      {"--spec " + kSpec + " --no-corpus --output-coverage",
       "--output-coverage corrupts the replies of a kernel built elsewhere"},
      {"--spec " + std::string(KPROP_SOURCE_DIR) + "/tests/external/op_copy.yaml --no-corpus --mutants",
       "--mutants: family op of spec copy has no mutants to run"},
  };
  for (const auto& [args, expect] : cases) {
    const CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << "\n" << r.out;
  }
}

// --mutants checks each case in a forked child unless --no-isolate (it never
// did: CLI11 set the optional flag to false when it was not given).
// (ternary: a case each in 0.3 s; dflash's mutants that die on the first
// case shrink a 33-node tree and a 131,072-token vocabulary, 42 s of the
// sanitizer suite.)
TEST(Cli, MutantsAreIsolatedByDefault) {
  const std::string run_args = "--spec " + std::string(KPROP_SOURCE_DIR) +
                               "/specs/ternary.yaml --trials 1 --seed 1 --no-corpus --jobs 1";
  const auto header = [&](const std::string& extra) {
    const CliRun r = run(run_args + extra);
    const size_t at = r.out.find("kprop: spec ternary seed 1");
    return at == std::string::npos ? "no header: " + r.out : r.out.substr(at, r.out.find('\n', at) - at);
  };
  EXPECT_NE(header(" --mutants").find(" isolated"), std::string::npos) << header(" --mutants");
  EXPECT_EQ(header(" --mutants --no-isolate").find(" isolated"), std::string::npos);
  EXPECT_EQ(header("").find(" isolated"), std::string::npos);
  EXPECT_NE(header(" --isolate").find(" isolated"), std::string::npos);
  EXPECT_EQ(run(run_args + " --isolate --no-isolate").code, 2);
}

// Corpus files that looked fine and were not: each is an error naming the file.
TEST(Cli, CorpusFilesWithAnEmptyCaseATypoAKeyTwiceOrAnAliasAreErrors) {
  const std::string head =
      "kprop_corpus: 1\nspec: dflash\nfamily: dflash\ninvariant: {}\nfound_against: reference\nseed: 1\n"
      "message: x\ncase:\n  prompt: [0]\n";
  const std::string model = "  model: {vocab: 2, d_model: 1, layers: 1, heads: 1, seed: 1}\n";
  const std::string cycles = "  cycles:\n    - {tokens: [], parents: []}\n";
  const std::pair<std::string, std::string> files[] = {
      {fmt::format(fmt::runtime(head), "progress") + model + "  cycles: []\n", "cycles must not be empty"},
      {fmt::format(fmt::runtime(head), "no_such_invariant") + model + cycles,
       "its invariant 'no_such_invariant' is neither in the spec nor registered"},
      {fmt::format(fmt::runtime(head), "progress") + "  prompt: [1]\n" + model + cycles,
       "key 'prompt' appears twice"},
      {fmt::format(fmt::runtime(head), "no_such_invariant") + model + cycles +
           "also_found_against:\n  - {found_against: reference, invariant: nor_this}\n",
       "its invariants 'no_such_invariant', 'nor_this' are neither in the spec nor registered"},
      // kprop writes no aliases; nested ones expand exponentially (9 levels
      // of 10 took 45 s of CPU before the case was found too large).
      {fmt::format(fmt::runtime(head), "progress") + model +
           "  cycles:\n    - &c {tokens: [], parents: []}\n" + "    - *c\n",
       ":13:7: corrupt corpus file: a YAML alias; a corpus file holds none"},
  };
  for (const auto& [text, expect] : files) {
    const fs::path file = temp("case.yaml");
    std::ofstream(file) << text;
    const CliRun r = run("--spec " + kSpec + " --replay " + file.string());
    EXPECT_EQ(r.code, 2) << text << "\n" << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << text << "\n" << r.out;
  }
  // A file kprop.check found (found_by: python) by two tests needs one
  // invariant this run has (another test's extra invariant is that test's):
  // replayed, and its row names it.
  const fs::path file = temp("case.yaml");
  std::string python = fmt::format(fmt::runtime(head), "another_runs_invariant") + model + cycles +
                       "also_found_against:\n  - {found_against: reference, invariant: progress}\n";
  python.insert(python.find("case:"), "found_by: python\n");
  std::ofstream(file) << python;
  const CliRun r = run("--spec " + kSpec + " --replay " + file.string() + " --format json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"invariant\": \"progress\""), std::string::npos) << r.out;
  // Verdicts in lower case, as docs/REPORT.md lists them (they were PASSED).
  EXPECT_NE(r.out.find("\"verdict\": \"passed\""), std::string::npos) << r.out;
}

// A finding whose invariant nothing has is an error wherever the file
// names it: beside one this run has (also_found_against, at the top or in
// the list), the file replayed PASSED on the other, exit 0, its JSON row
// naming the other invariant, and the stale one was never checked.
TEST(Cli, AStaleInvariantBesideAKnownOneIsStillAnError) {
  const std::string head =
      "kprop_corpus: 1\nspec: dflash\nfamily: dflash\ninvariant: {}\nfound_against: reference\n"
      "found_by: rapidcheck\nseed: 1\nmessage: x\n";
  const std::string body =
      "case:\n  prompt: [0]\n  model: {vocab: 2, d_model: 1, layers: 1, heads: 1, seed: 1}\n"
      "  cycles:\n    - {tokens: [], parents: []}\n";
  const auto also = [](const std::string& invariant) {
    return "also_found_against:\n  - {found_against: reference, invariant: " + invariant + "}\n";
  };
  const std::tuple<std::string, std::string, std::string> files[] = {
      {fmt::format(fmt::runtime(head), "progres") + also("progress") + body,
       "case.yaml:4:12: its invariant 'progres' is neither in the spec nor registered by family 'dflash' "
       "(did you mean 'progress'?) (renamed? fix the file's invariant: line)",
       "'progres'"},
      {fmt::format(fmt::runtime(head), "progress") + also("progres") + body,
       "case.yaml:10:43: its invariant 'progres' is neither in the spec nor registered by family 'dflash' "
       "(did you mean 'progress'?)",
       "'progres'"},
  };
  for (const auto& [text, expect, named] : files) {
    const fs::path file = temp("case.yaml");
    std::ofstream(file) << text;
    const CliRun r = run("--spec " + kSpec + " --replay " + file.string());
    EXPECT_EQ(r.code, 2) << text << "\n" << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << text << "\n" << r.out;
    const CliRun j = run("--spec " + kSpec + " --replay " + file.string() + " --format json");
    EXPECT_EQ(j.code, 2) << j.out;
    EXPECT_NE(j.out.find("\"verdict\": \"error\""), std::string::npos) << j.out;
    EXPECT_NE(j.out.find(named), std::string::npos) << j.out;
  }
}

// The same whoever found the file: a registered mutant's file (found_against:
// no_max_subtraction) naming an invariant nothing has was a FAIL ("stale
// file"), exit 1, with no position, where the same file found against the
// reference was this error, exit 2. In an also_found_against entry, the
// JSON row's invariant and found_against, and the message's advice, are that
// entry's (they named the file's top-level invariant: line).
TEST(Cli, AStaleInvariantInAMutantsFileIsTheSameErrorAsInAnyOther) {
  const std::string spec = std::string(KPROP_SOURCE_DIR) + "/specs/softmax_topk.yaml";
  const std::string head =
      "kprop_corpus: 1\nspec: softmax_topk\nfamily: softmax_topk\ninvariant: {}\nfound_against: {}\n"
      "found_by: rapidcheck\nseed: 5\nmessage: x\n";
  const std::string body = "case:\n  dtype: f64\n  k: 1\n  block: 1\n  logits:\n    - [0]\n";
  for (const char* by : {"no_max_subtraction", "fused"}) {
    const fs::path file = temp("typo.yaml");
    std::ofstream(file) << fmt::format(fmt::runtime(head), "shift_invariants", by) << body;
    const CliRun r = run("--spec " + spec + " --replay " + file.string());
    EXPECT_EQ(r.code, 2) << by << "\n" << r.out;
    EXPECT_NE(r.out.find("ERROR " + file.string() +
                         ":4:12: its invariant 'shift_invariants' is neither in the spec nor registered by "
                         "family 'softmax_topk' (did you mean 'shift_invariance'?) (renamed? fix the file's "
                         "invariant: line)"),
              std::string::npos)
        << by << "\n"
        << r.out;
    EXPECT_EQ(r.out.find("stale file"), std::string::npos) << by << "\n" << r.out;
  }
  const fs::path file = temp("also.yaml");
  std::ofstream(file) << fmt::format(fmt::runtime(head), "sorted", "no_max_subtraction")
                      << "also_found_against:\n  - {found_against: no_max_subtraction, invariant: "
                         "sorted_expr}\n"
                      << body;
  const fs::path out = temp("also.json");
  const CliRun r =
      run("--spec " + spec + " --replay " + file.string() + " --format json --out " + out.string());
  EXPECT_EQ(r.code, 2) << r.out;
  const nlohmann::json j = nlohmann::json::parse(contents(out));
  ASSERT_EQ(j["files"].size(), 1u) << r.out;
  const nlohmann::json& row = j["files"][0];
  EXPECT_EQ(row["verdict"], "error");
  EXPECT_EQ(row["invariant"], "sorted_expr");
  EXPECT_EQ(row["found_against"], "no_max_subtraction");
  EXPECT_NE(row["error"].get<std::string>().find(
                ":10:52: its invariant 'sorted_expr' is neither in the spec nor registered by family "
                "'softmax_topk'"),
            std::string::npos)
      << row["error"];
  EXPECT_NE(row["error"].get<std::string>().find(
                "(renamed? fix the file's also_found_against entry 1 (found_against: no_max_subtraction, "
                "invariant: sorted_expr))"),
            std::string::npos)
      << row["error"];
}

// A case that overruns case_timeout_s but then finishes: the watchdog saves
// it while the check's own thread returns, which must wait for the save, not
// free the case under it (it did: a segfault, exit 139, nothing stored).
// Large cases make the save slower than the rest of the check.
TEST(Cli, ACaseThatOverrunsItsTimeoutIsSavedWhenItFinishesDuringTheSave) {
  const fs::path corpus = temp("overrun");
  fs::remove_all(corpus);
  const CliRun r = run("--spec " + std::string(KPROP_SOURCE_DIR) +
                       "/specs/attention_fwd.yaml --domain '{nq: [300, 400], nk: [300, 400], dim: [60, 64]}' "
                       "--case-timeout 0.005 --trials 3 --jobs 1 --seed 1 --corpus " +
                       corpus.string());
  EXPECT_EQ(r.code, 3) << r.out.substr(0, 2000);
  EXPECT_NE(
      r.out.find("hung (a call ran past case_timeout_s = 0.005 s; --case-timeout S allows a slower case)"),
      std::string::npos);
  EXPECT_EQ(kprop::list_corpus((corpus / "attention_fwd").string()).size(), 1u) << r.out.substr(0, 2000);
  // The case, ~100 kB of text, is printed cut short: the file holds it.
  EXPECT_NE(r.out.find("(cut short: the whole case is in " + corpus.string()), std::string::npos)
      << r.out.substr(0, 2000);
  EXPECT_LT(r.out.size(), 60000u);
  fs::remove_all(corpus);
}

// coreutils' `timeout -s INT` signals the process and its group: two
// SIGINTs at once are one interrupt, whose report must come out (the second
// quit at once, losing it, while the first was still being wound down: here
// a shrink of softmax_topk's large profile, stopped and stored; a 131072-wide
// row's shrinks take its whole 2 s budget, so the run is still going at 1 s).
TEST(Cli, OneInterruptDeliveredTwiceStillReports) {
  const fs::path scratch = temp("interrupt");
  const std::string cmd = "sh -c '" + std::string(KPROP_RUNNER) + " --spec " + std::string(KPROP_SOURCE_DIR) +
                          "/specs/softmax_topk.yaml --profile large --target indices_u16 --seed 1 "
                          "--jobs 1 --corpus " +
                          scratch.string() +
                          " & pid=$!; sleep 1; kill -INT $pid; sleep 0.05; kill -INT $pid; wait $pid' 2>&1";
  std::array<char, 4096> buf{};
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  while (p && fgets(buf.data(), buf.size(), p)) out += buf.data();
  pclose(p);
  EXPECT_NE(out.find("INTERRUPTED after"), std::string::npos) << out;
  fs::remove_all(scratch);
}

// A corpus file stops guarding its mutant only with a word: a found_against
// that names no implementation (a renamed mutant, a typo), or an invariant
// the spec no longer lists (checked with the family's defaults, it could
// pass on a bound the spec never stated), fails the replay.
TEST(Cli, AStaleCorpusFileFailsItsReplay) {
  const std::string src = std::string(KPROP_SOURCE_DIR) + "/corpus/layernorm/059791fc370c9226.yaml";
  const std::string text = contents(src);
  ASSERT_NE(text.find("found_against: naive_variance\n"), std::string::npos) << text;
  ASSERT_NE(text.find("invariant: matches_reference\n"), std::string::npos) << text;
  const fs::path dir = temp("stale-corpus");
  fs::remove_all(dir);
  fs::create_directories(dir / "layernorm");
  std::string renamed = text;
  renamed.replace(renamed.find("found_against: naive_variance"), 29, "found_against: naive_variancee");
  std::ofstream(dir / "layernorm" / "renamed.yaml") << renamed;
  const std::string spec = std::string(KPROP_SOURCE_DIR) + "/specs/layernorm.yaml";
  const CliRun r = run("--spec " + spec + " --replay " + (dir / "layernorm" / "renamed.yaml").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(
      r.out.find(
          "stale file: found_against 'naive_variancee' is no implementation of family 'layernorm' (a mutant "
          "renamed? fix the file's found_against: line) (did you mean 'naive_variance'?)"),
      std::string::npos)
      << r.out;
  // A stale also_found_against entry is named as such (the message pointed
  // at the file's found_against: line, which is fine, and suggested its name).
  std::string also = text;
  also.insert(also.find("case:"),
              "also_found_against:\n  - {found_against: naive_variancf, invariant: matches_reference}\n");
  std::ofstream(dir / "layernorm" / "also.yaml") << also;
  const CliRun a = run("--spec " + spec + " --replay " + (dir / "layernorm" / "also.yaml").string());
  EXPECT_EQ(a.code, 1) << a.out;
  EXPECT_NE(
      a.out.find("stale file: found_against 'naive_variancf' is no implementation of family 'layernorm' (a "
                 "mutant renamed? fix the file's also_found_against entry 1 (found_against: "
                 "naive_variancf, invariant: matches_reference))"),
      std::string::npos)
      << a.out;
  EXPECT_EQ(a.out.find("did you mean 'naive_variance'?"), std::string::npos) << a.out;
  // The spec without matches_reference: the file's invariant is gone from it.
  std::string spec_text = contents(spec);
  const std::string entry = "  - name: matches_reference\n    k: 2\n    floor_ulps: 64\n";
  const size_t at = spec_text.find(entry);
  ASSERT_NE(at, std::string::npos);
  spec_text.erase(at, entry.size());
  std::ofstream(dir / "layernorm.yaml") << spec_text;
  fs::copy_file(src, dir / "layernorm" / "059791fc370c9226.yaml");
  const CliRun gone = run("--spec " + (dir / "layernorm.yaml").string() + " --replay " +
                          (dir / "layernorm" / "059791fc370c9226.yaml").string());
  EXPECT_EQ(gone.code, 1) << gone.out;
  EXPECT_NE(
      gone.out.find("stale file: its invariant 'matches_reference' is no longer in spec layernorm (removed?"),
      std::string::npos)
      << gone.out;
  // Found under a profile: stale as well when that profile lists it no more
  // (a `profile:` line, of any name, made the file pass on the family's
  // defaults); a profile the spec does not declare is named at its line.
  auto under = [&](const std::string& profile) {
    std::string found = text;
    found.replace(found.find("family: layernorm\n"), 18, "profile: " + profile + "\nfamily: layernorm\n");
    std::ofstream(dir / "layernorm" / "059791fc370c9226.yaml") << found;
    return run("--spec " + (dir / "layernorm.yaml").string() + " --replay " +
               (dir / "layernorm" / "059791fc370c9226.yaml").string());
  };
  const CliRun large = under("large");
  EXPECT_EQ(large.code, 1) << large.out;
  EXPECT_NE(large.out.find("stale file: its invariant 'matches_reference' is no longer in spec layernorm"),
            std::string::npos)
      << large.out;
  const CliRun unknown = under("larg");
  EXPECT_EQ(unknown.code, 2) << unknown.out;
  EXPECT_NE(
      unknown.out.find("059791fc370c9226.yaml:3:10: corpus case was found under profile 'larg', which "
                       "spec layernorm does not declare (its profiles: gpu, large) (did you mean 'large'?)"),
      std::string::npos)
      << unknown.out;
  fs::remove_all(dir);
}

// A shrink cut short ends where the clock stopped it: each run of a mutant
// stored another near-copy in the corpus (ternary's large profile grew by a
// 49 KB file a run). Once the corpus holds a case of the finding, a cut-short
// one is kept out of it, in the scratch folder, whose replay it prints.
TEST(Cli, ACutShortShrinkAddsNoSecondCaseOfAFindingToTheCorpus) {
  const fs::path dir = temp("cut-short");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string spec = contents(std::string(KPROP_SOURCE_DIR) + "/specs/layernorm.yaml");
  const std::string budget = "shrink_budget_s: 20}";
  ASSERT_NE(spec.find(budget), std::string::npos);
  spec.replace(spec.find(budget), budget.size(), "shrink_budget_s: 0}");
  std::ofstream(dir / "layernorm.yaml") << spec;
  const std::string args = "--spec " + (dir / "layernorm.yaml").string() +
                           " --target bf16_truncate --corpus " + (dir / "corpus").string() +
                           " --invariant matches_reference --seed ";
  const CliRun first = run(args + "3");
  EXPECT_EQ(first.code, 1) << first.out;
  ASSERT_EQ(std::distance(fs::directory_iterator(dir / "corpus" / "layernorm"), fs::directory_iterator()), 1);
  const fs::path stored = fs::directory_iterator(dir / "corpus" / "layernorm")->path();
  for (const char* seed : {"4", "5"}) {
    const CliRun again = run(args + seed);
    EXPECT_EQ(again.code, 1) << again.out;
    EXPECT_NE(
        again.out.find("its shrink was cut short and the corpus already holds a case of this finding (" +
                       stored.string() + "): this one is kept out of it"),
        std::string::npos)
        << again.out;
    EXPECT_NE(again.out.find("(not in the corpus)"), std::string::npos) << again.out;
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "corpus" / "layernorm"), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(Cli, CorruptCorpusFileExitsTwoNamingTheFile) {
  const fs::path bad = temp("broken.yaml");
  std::ofstream(bad) << "kprop_corpus: 1\nspec: dflash\nfamily: dflash\ncase:\n  prompt: [1]\n  model: "
                        "{vocab: 3}\n  cycles: []\n";
  const CliRun r = run("--spec " + kSpec + " --replay " + bad.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("broken.yaml:6:"), std::string::npos) << r.out;
}

TEST(Cli, ListShowsFamiliesImplementationsAndInvariants) {
  const CliRun r = run("--list");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("family dflash"), std::string::npos);
  EXPECT_NE(r.out.find("positional_logits          mutant"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tie_margin"), std::string::npos);
}

}  // namespace
