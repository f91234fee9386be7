// The targeted search (kprop/search.h) on a constructed precision bug: it
// finds a failure that random sampling misses at the same budget, its
// finding is shrunk, stored and replays; the same seed gives the same search
// path and report; search cases are accounted apart and never as random
// trials.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kprop/case_yaml.h"
#include "kprop/report.h"
#include "kprop/runner.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

// toy.precision: the sum of a short list of reals drawn in [-1, 1]. Its
// mutant `cubic_drift` adds 1e-4 · max|x|³: a precision bug whose error
// grows with the magnitude of the inputs, so on the drawn values
// (|x| <= 1) its error/allowed ratio stays below 1e-4 / 1e-2 = 0.01, and it
// exceeds 1 only for inputs some tens of times larger, which no random case
// reaches and a few scalings do.
struct PCase {
  std::vector<double> xs;
};
struct PResult {
  double sum = 0;
};

struct PTraits {
  using Case = PCase;
  using Result = PResult;
  static constexpr const char* name = "toy.precision";
  static constexpr const char* description = "sum of reals (search tests)";
  static Schema domain_schema() {
    return {field::int_range("length", {1, 8}, 1, 1000, "list length"),
            field::real_range("value", {-1, 1}, -1e6, 1e6, "element values as drawn")};
  }
  static Case build(Draw& draw, const Values& d) {
    Case c;
    const int64_t n = draw.sized(d.int_range("length"));
    for (int64_t i = 0; i < n; ++i) c.xs.push_back(draw.any(d.real_range("value")));
    return c;
  }
  static rc::Seq<Case> shrinks(const Case& c, const Values&) {
    std::vector<Case> out;
    for (size_t i = 0; c.xs.size() > 1 && i < c.xs.size(); ++i) {
      Case s = c;
      s.xs.erase(s.xs.begin() + long(i));
      out.push_back(s);
    }
    return rc::seq::fromContainer(out);
  }
  // Only the length: values are data, as in the real families (drawn from
  // seeds there), so the search may move them anywhere finite.
  static std::string in_domain(const Case& c, const Values& d) {
    return outside_int_range(d, "length", int64_t(c.xs.size()));
  }
  static double case_bytes(const Case& c) { return double(c.xs.size() * sizeof(double)); }
  static CaseSize max_case_bytes(const Values& d) {
    return {double(d.int_range("length").hi) * sizeof(double), "length", "length"};
  }
  static YAML::Node to_yaml(const Case& c) {
    YAML::Node n(YAML::NodeType::Map);
    n["xs"] = case_yaml::real_list(c.xs);
    return n;
  }
  static Case from_yaml(const YAML::Node& n) {
    case_yaml::expect_keys(n, {"xs"}, "toy.precision case");
    Case c{case_yaml::read_list<double>(n, "xs")};
    if (c.xs.empty()) case_yaml::fail(n, "'xs' is empty");
    return c;
  }
  static CaseStats stats(const Case& c) {
    return {int64_t(c.xs.size()), fmt::format("{} reals", c.xs.size())};
  }
};

double plain_sum(const PCase& c) {
  double s = 0;
  for (double x : c.xs) s += x;
  return s;
}

KPROP_REGISTER_FAMILY(PTraits, [](FamilyDef<PTraits>& f) {
  f.implementation({"reference", ImplKind::reference, "plain sum"},
                   [](const PCase& c) { return PResult{plain_sum(c)}; });
  f.mutant("cubic_drift", "adds 1e-4 max|x|^3", [](const PCase& c) {
    double m = 0;
    for (double x : c.xs) m = std::max(m, std::fabs(x));
    return PResult{plain_sum(c) + 1e-4 * m * m * m};
  });
  // Right, but its device is lost on any value past the drawn range
  // (|x| > 2): no random case gets there, the search's scalings do.
  f.implementation(
      {"loses_device_past_2", ImplKind::optimized, "right, until |x| > 2: then unavailable", "cuda"},
      [](const PCase& c) {
        for (double x : c.xs)
          if (std::fabs(x) > 2) throw TargetUnavailable("device lost");
        return PResult{plain_sum(c)};
      });
  // Allowed: 1e-2 · (1 + Σ|x|), a bound that grows linearly with the inputs.
  f.invariant({"close_sum", "within 1e-2 (1 + sum |x|) of the reference", {}},
              [](Trial<PTraits>& t, const Values&) {
                double mass = 1;
                for (double x : t.input().xs) mass += std::fabs(x);
                const double err = std::fabs(t.target().sum - t.reference().sum), allowed = 1e-2 * mass;
                if (err <= allowed) return Verdict::pass({{kErrorRatio, err / allowed}});
                return Verdict::fail(fmt::format("sum off by {:.3g} > allowed {:.3g}", err, allowed),
                                     {{"error", err}, {"allowed", allowed}});
              });
  f.reads({{"close_sum", {"*"}}});
});

using testing::TempDir;

Spec precision_spec(const std::string& search) {
  return parse_spec("spec: precision\nfamily: toy.precision\nrun: {trials: 100, seed: 11" + search + "}\n",
                    "precision.yaml");
}

RunOptions options(const std::string& target, const TempDir& dir) {
  return testing::options_in(dir, target);
}

TEST(Search, FindsAPrecisionBugRandomSamplingMissesAtTheSameBudget) {
  TempDir dir;
  // Random sampling alone, 300 cases: the bug stays below its bound.
  RunOptions random_only = options("cubic_drift", dir);
  random_only.trials = 300;
  const RunReport plain = run_spec(precision_spec(""), random_only);
  ASSERT_EQ(plain.status, RunStatus::passed) << plain.detail;
  EXPECT_LT(plain.invariants[0].max_error_ratio, 0.011);  // 1e-4 / 1e-2 at |x| <= 1
  EXPECT_FALSE(plain.search.ran);

  // 100 random cases and at most 200 search cases: broken.
  const RunReport r =
      run_spec(precision_spec(", search: {enabled: true, trials: 200}"), options("cubic_drift", dir));
  ASSERT_EQ(r.status, RunStatus::failed) << r.detail;
  ASSERT_TRUE(r.search.ran);
  const InvariantReport& inv = r.invariants[0];
  ASSERT_EQ(inv.status, InvariantStatus::failed);
  EXPECT_GT(inv.trials_to_fail, r.trials);  // found by the search, after the random cases
  EXPECT_LE(inv.trials_to_fail, r.trials + 200);
  ASSERT_EQ(r.search.invariants.size(), 1u);
  EXPECT_TRUE(r.search.invariants[0].failed);
  EXPECT_GT(r.search.invariants[0].improvements, 0);
  // Said as a search case, not "after N trials" of drawn cases (or, sharded,
  // "case N of the unsharded run", which has no search cases); the JSON's
  // worst_ratio is null (the text's "FAILED") and search_case says which.
  const std::string text = make_reporter("text")->run(r);
  EXPECT_NE(text.find(fmt::format("FAILED   on search case {} (after {} drawn;",
                                  inv.trials_to_fail - r.trials, r.trials)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("-> FAILED on a search case"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(make_reporter("json")->run(r));
  const auto& sj = j["search"]["invariants"][0];
  EXPECT_TRUE(sj["worst_ratio"].is_null()) << sj;  // no ratio under 1 for a failure
  EXPECT_EQ(j["invariants"][0]["search_case"], inv.trials_to_fail - r.trials);
  EXPECT_EQ(sj["search_ratio"].get<double>(), r.search.invariants[0].worst_ratio);

  // Shrunk, stored (found_by: search) and its replay reproduces it.
  ASSERT_TRUE(inv.counterexample);
  const Finding& f = *inv.counterexample;
  ASSERT_FALSE(f.corpus_path.empty());
  const CorpusEntry e = read_entry(f.corpus_path);
  EXPECT_EQ(e.found_by, "search");
  EXPECT_EQ(e.found_against, "cubic_drift");
  EXPECT_NE(f.replay_command.find("--replay"), std::string::npos);
  const auto rows = replay_corpus(precision_spec(""), f.corpus_path, options("", dir));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].target_ok) << rows[0].target_detail;  // the reference holds on it
  EXPECT_TRUE(rows[0].mutant_checked);
  EXPECT_TRUE(rows[0].mutant_still_fails) << rows[0].mutant_detail;
}

TEST(Search, SameSeedSameSearchPathAndReport) {
  TempDir dir;
  const Spec spec = precision_spec(", search: {enabled: true, trials: 150}");
  for (const char* target : {"cubic_drift", "reference"}) {
    const RunReport a = run_spec(spec, options(target, dir));
    const RunReport b = run_spec(spec, options(target, dir));
    auto strip = [](const RunReport& r) {
      std::string json = make_reporter("json")->run(r);
      // Timings are the only thing allowed to differ.
      nlohmann::json j = nlohmann::json::parse(json);
      j.erase("seconds");
      j["search"].erase("seconds");
      j["statistics"].erase("time_s");  // the run's time split
      for (auto& inv : j["invariants"]) {
        inv.erase("seconds_to_fail");
        if (inv.contains("counterexample")) inv["counterexample"].erase("shrink_seconds");
      }
      return j.dump();
    };
    EXPECT_EQ(strip(a), strip(b)) << target;
    EXPECT_EQ(a.search.cases, b.search.cases) << target;
  }
}

TEST(Search, SearchCasesAreAccountedApart) {
  TempDir dir;
  RunOptions o = options("reference", dir);
  const RunReport plain = run_spec(precision_spec(""), o);
  o.search = true;
  o.search_trials = 120;
  const RunReport r = run_spec(precision_spec(""), o);
  ASSERT_EQ(r.status, RunStatus::passed) << r.detail;
  ASSERT_TRUE(r.search.ran);
  // Random trials are the same cases as without the search; the search's
  // are counted apart, and every one of them checked (the reference never
  // declines or discards).
  EXPECT_EQ(r.trials, plain.trials);
  EXPECT_EQ(r.invariants[0].passed, plain.invariants[0].passed);
  EXPECT_EQ(r.search.cases, 120);
  EXPECT_EQ(r.search.checked, 120);
  EXPECT_EQ(r.checked, plain.checked + r.search.checked);
  ASSERT_EQ(r.search.invariants.size(), 1u);
  EXPECT_EQ(r.search.invariants[0].passed, 120);
  EXPECT_EQ(r.search.invariants[0].worst_ratio, 0);  // the reference against itself
  // The histogram counts every checked case's ratio, random and search.
  EXPECT_EQ(r.invariants[0].ratios.total(), plain.invariants[0].passed + 120);
  const std::string text = make_reporter("text")->run(r);
  EXPECT_NE(text.find("search: 120 of 120 cases"), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("cases: {} drawn + 120 by the search, {} checked", r.trials, r.checked)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(fmt::format("{} checked + 120 by the search", plain.invariants[0].passed)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ratios close_sum"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(make_reporter("json")->run(r));
  EXPECT_EQ(j["search"]["cases"], 120);
  EXPECT_EQ(j["invariants"][0]["error_ratio_histogram"]["counts"].size(), RatioHistogram::edges().size() + 1);
}

// A target lost during the search ends the search, and the run is no pass
// (health check `unavailable`), as when it is lost among the random cases.
// (It passed: the search counted the lost device's answers as declines.)
TEST(Search, ATargetLostDuringTheSearchIsNoPass) {
  TempDir dir;
  RunOptions o = options("loses_device_past_2", dir);
  const RunReport plain = run_spec(precision_spec(""), o);
  ASSERT_EQ(plain.status, RunStatus::passed) << plain.detail;  // no random case reaches |x| > 2
  o.search = true;
  o.search_trials = 200;
  const RunReport r = run_spec(precision_spec(""), o);
  EXPECT_EQ(r.status, RunStatus::gave_up) << r.detail;
  ASSERT_EQ(r.health.size(), 1u);
  EXPECT_EQ(r.health[0].check, "unavailable");
  EXPECT_NE(r.detail.find("the target became unavailable during the search"), std::string::npos) << r.detail;
  EXPECT_LT(r.search.cases, 200);  // it ended there
}

// RunOptions::search_time_budget_s (--search-time) caps the search, which
// --time does not: a budget of cases it cannot reach ends on the time.
TEST(Search, ItsOwnTimeBudgetStopsIt) {
  TempDir dir;
  RunOptions o = options("reference", dir);
  o.search = true;
  o.search_trials = 1000000000;
  o.search_time_budget_s = 0.2;
  // The spec's own budget is 120 s: only the option can stop it well before.
  const RunReport r = run_spec(precision_spec(", search: {time_budget_s: 120}"), o);
  ASSERT_EQ(r.status, RunStatus::passed) << r.detail;
  EXPECT_TRUE(r.search.time_budget_hit);
  EXPECT_LT(r.search.cases, 1000000000);
  EXPECT_LT(r.search.seconds, 60);
  EXPECT_NE(make_reporter("text")->run(r).find("stopped by its time budget (--search-time"),
            std::string::npos);
}

TEST(Search, OffUnlessAsked) {
  TempDir dir;
  const RunReport off = run_spec(precision_spec(""), options("reference", dir));
  EXPECT_FALSE(off.search.ran);
  EXPECT_EQ(make_reporter("text")->run(off).find("search:"), std::string::npos);
}

TEST(RatioHistogram, BinsByUpperEdge) {
  RatioHistogram h;
  for (double r : {0.0, 0.001, 0.002, 0.5, 0.95, 1.0, 3.0}) h.add(r);
  ASSERT_EQ(h.counts.size(), RatioHistogram::edges().size() + 1);
  EXPECT_EQ(h.counts.front(), 2);  // 0 and 1e-3: (.., 1e-3]
  EXPECT_EQ(h.counts.back(), 1);   // above 1
  EXPECT_EQ(h.total(), 7);
  EXPECT_EQ(h.text(), "<=0.001: 2, <=0.01: 1, <=0.5: 1, <=1: 2, >1: 1");
}

}  // namespace
}  // namespace kprop
