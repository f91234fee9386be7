// Every committed spec, every implementation of its family: each mutant dies
// on three fixed seeds (one under the sanitizers, where a mutant only a
// profile's sizes reach is skipped), and every other
// implementation passes (CUDA ones pass or report skipped). New specs and families are covered without a
// line of test code; the 20-seed numbers come from scripts/mutant_stats.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "kprop/output_reads.h"
#include "kprop/runner.h"
#include "kprop/sanitizer.h"
#include "tests/support/budget.h"
#include "tests/support/registered.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

struct SpecTarget {
  std::string spec_path;
  std::string target;
  bool mutant;
  std::string name;  // test name
};

std::vector<SpecTarget> all_spec_targets() {
  std::vector<SpecTarget> out;
  for (const testing::ShippedSpec& s : testing::shipped_spec_heads()) {
    const Family* family = Registry::instance().find(s.family);
    if (!family) continue;  // a partial build (KPROP_FAMILIES) lacks this spec's family
    for (const auto& impl : family->implementations()) {
      std::string name = s.name + "_" + impl.name;
      std::replace_if(
          name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
      out.push_back({s.path, impl.name, impl.kind == ImplKind::mutant, name});
    }
  }
  return out;
}

// Test listings show "dflash positional_logits", not the struct's bytes.
void PrintTo(const SpecTarget& p, std::ostream* os) {
  *os << p.name;
}

class SpecSuite : public ::testing::TestWithParam<SpecTarget> {};

TEST_P(SpecSuite, MutantsDieAndCorrectImplementationsPass) {
  const SpecTarget& p = GetParam();
  // A profile named after the implementation narrows the domain to what it
  // supports (kvcache's int8 cache takes f64 cases only).
  const Spec declared = load_spec(p.spec_path);
  const bool own = std::count(declared.profiles.begin(), declared.profiles.end(), p.target) > 0;
  // A mutant that only a profile's sizes reach (profiles: {P: {mutants: [...]}})
  // dies under that profile.
  const auto needs = declared.mutant_profiles.find(p.target);
  // Under the sanitizers, a mutant only a profile's sizes reach is left to
  // the optimised build (three seeds here, and mutants.<spec>): its one kill
  // there goes through the paths the other mutants' take, at sizes where
  // ASan made it 10 s (kvcache's 4,096 table entries, ternary's 8,192-wide
  // chunks; 51 s of the sanitizer suite for the ten of them).
  if (kAddressSanitizer && p.mutant && needs != declared.mutant_profiles.end())
    GTEST_SKIP() << p.target << " needs profile sizes: killed in the optimised build";
  const Spec spec = own                                       ? load_spec(p.spec_path, p.target)
                    : needs != declared.mutant_profiles.end() ? *needs->second
                                                              : declared;
  // Under the sanitizers one seed each (support/budget.h). This is where the
  // sanitizer build kills every mutant and shrinks its failure; the
  // mutants.* ctests (the optimised build's) kill them on a fourth seed.
  std::vector<uint64_t> seeds = p.mutant ? std::vector<uint64_t>{1, 2, 3} : std::vector<uint64_t>{11, 12};
  if (kAddressSanitizer) seeds.resize(1);
  for (uint64_t seed : seeds) {
    RunOptions o;
    o.target = p.target;
    o.seed = seed;
    o.write_corpus = false;
    o.stop_on_first_failure = p.mutant;
    // A mutant whose bug reads out of bounds (ImplInfo::out_of_bounds) is
    // checked in forked children under ASan without asking: its report kills
    // a child, and the run reports the crash.
    if (!p.mutant) o.trials = std::min<int64_t>(spec.run.trials, testing::sanitizer_scaled(100));
    const RunReport r = run_spec(spec, o);
    if (p.mutant) {
      // Under ASan an out-of-bounds read kills the forked check: a crash,
      // and only of a mutant registered as out_of_bounds.
      const bool crash_kill = kAddressSanitizer && r.status == RunStatus::crashed &&
                              resolve_target(spec, p.target).info.out_of_bounds;
      EXPECT_TRUE(r.status == RunStatus::failed || crash_kill)
          << p.target << " survived seed " << seed << ": " << run_status_name(r.status);
    } else if (r.status == RunStatus::skipped) {
      EXPECT_NE(resolve_target(spec, p.target).info.device, "cpu") << r.detail;
    } else {
      EXPECT_EQ(r.status, RunStatus::passed)
          << p.target << " seed " << seed << ": " << run_status_name(r.status);
    }
  }
}

// Every shipped spec (specs/, specs/ops/, specs/examples/) reads every output
// of its family's kernel with some invariant (prop_runner --list --spec S
// prints the table this checks).
TEST(ShippedSpecs, LeaveNoOutputUnchecked) {
  int specs = 0;
  for (const char* dir : {"specs", "specs/ops", "specs/examples"})
    for (const auto& e : fs::directory_iterator(fs::path(KPROP_SOURCE_DIR) / dir)) {
      if (e.path().extension() != ".yaml") continue;
      Spec spec;
      try {
        spec = load_spec(e.path().string());
      } catch (const InputError&) {
        continue;  // a partial build (KPROP_FAMILIES) lacks this spec's family
      }
      ++specs;
      EXPECT_EQ(join(unchecked_outputs(spec)), "") << e.path() << " leaves these outputs unchecked";
    }
  EXPECT_GT(specs, 0);
}

INSTANTIATE_TEST_SUITE_P(Committed, SpecSuite, ::testing::ValuesIn(all_spec_targets()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kprop
