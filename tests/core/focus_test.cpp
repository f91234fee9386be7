// Where a run draws its cases (kprop/focus.h): once every invariant still
// checking declares where it observes (InvariantInfo::observes), from there.
// On attention_bwd, whose dq_dk_rounded_to_nearest observes f16/bf16 cases
// only. That the cases and verdicts stay those of one job is
// Cli.JobsGiveTheReportOfOneJob's; that an invariant discards every case
// outside its focus, and that the focus holds the whole domain's cases in
// the same proportions, FamilyContract's.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kprop/report.h"
#include "kprop/runner.h"
#include "kprop/spec.h"

namespace kprop {
namespace {

const std::string kBwd = std::string(KPROP_SOURCE_DIR) + "/specs/attention_bwd.yaml";
const std::string kHalf = "{dtypes: [f16, bf16]}";

RunOptions run_of(std::vector<std::string> only, bool focus) {
  RunOptions o;
  o.target = "tiled_d";  // the reference keeps dQ in fp64: n/a on it
  o.seed = 3;
  o.trials = 40;
  o.write_corpus = false;
  o.only_invariants = std::move(only);
  o.focus = focus;
  return o;
}

// Discards of f32/f64 cases, the ones a focus on the half types leaves undrawn.
int64_t wide_dtype_discards(const InvariantReport& r) {
  int64_t n = 0;
  for (const auto& [reason, count] : r.discard_reasons)
    if (reason.rfind("an f32 case", 0) == 0 || reason.rfind("an f64 case", 0) == 0) n += count;
  return n;
}

TEST(Focus, AnInvariantOfTheHalfTypesIsDrawnOnlyTheirCases) {
  const Spec spec = load_spec(kBwd);
  const RunReport focused = run_spec(spec, run_of({"dq_dk_rounded_to_nearest"}, true));
  ASSERT_EQ(focused.status, RunStatus::passed) << focused.detail;
  ASSERT_EQ(focused.invariants.size(), 1u);
  EXPECT_EQ(focused.invariants[0].passed, 40);
  EXPECT_EQ(focused.focused, (std::map<std::string, int64_t>{{kHalf, focused.trials}}));
  EXPECT_EQ(wide_dtype_discards(focused.invariants[0]), 0);
  // Every report says so: text, JSON, HTML.
  const std::string said = fmt::format("focused: of the cases drawn, {} came from {}", focused.trials, kHalf);
  EXPECT_NE(make_reporter("text")->run(focused).find(said), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(make_reporter("json")->run(focused))["focused"][kHalf], focused.trials);
  EXPECT_NE(make_reporter("html")->run(focused).find(said), std::string::npos);

  // --no-focus: the same invariant, from the whole domain, discards the
  // f32 and f64 cases it drew, and draws more for its 40 trials.
  const RunReport whole = run_spec(spec, run_of({"dq_dk_rounded_to_nearest"}, false));
  ASSERT_EQ(whole.status, RunStatus::passed) << whole.detail;
  EXPECT_EQ(whole.invariants[0].passed, 40);
  EXPECT_TRUE(whole.focused.empty());
  EXPECT_EQ(make_reporter("text")->run(whole).find("focused:"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(make_reporter("json")->run(whole)).contains("focused"));
  EXPECT_GT(wide_dtype_discards(whole.invariants[0]), 0);
  EXPECT_GT(whole.trials, focused.trials);
}

// matches_reference observes every case: while it checks, the run draws
// from the whole domain, and from the half types once it has its trials.
TEST(Focus, BeginsWhenTheLastInvariantWithoutOneIsDone) {
  const Spec spec = load_spec(kBwd);
  const RunReport r = run_spec(spec, run_of({"matches_reference", "dq_dk_rounded_to_nearest"}, true));
  ASSERT_EQ(r.status, RunStatus::passed) << r.detail;
  ASSERT_EQ(r.invariants.size(), 2u);
  const InvariantReport& common = r.invariants[0];
  ASSERT_EQ(common.name, "matches_reference");
  // The cases drawn until matches_reference had its trials, then the focus's.
  const int64_t unfocused = common.passed + common.discarded + common.declined;
  ASSERT_GT(r.trials, unfocused);
  EXPECT_EQ(r.focused, (std::map<std::string, int64_t>{{kHalf, r.trials - unfocused}}));
  EXPECT_GT(wide_dtype_discards(r.invariants[1]), 0);  // of the whole domain's first cases
}

// A domain the focus would not narrow (--domain '{dtypes: [bf16]}') is drawn
// from as it is, and the report says no case was focused.
TEST(Focus, ADomainInsideTheFocusIsDrawnWhole) {
  const Spec spec = load_spec(kBwd, "", "{dtypes: [bf16]}");
  const RunReport r = run_spec(spec, run_of({"dq_dk_rounded_to_nearest"}, true));
  ASSERT_EQ(r.status, RunStatus::passed) << r.detail;
  EXPECT_TRUE(r.focused.empty());
}

}  // namespace
}  // namespace kprop
