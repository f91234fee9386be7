// Dim constraints (one_of, multiple_of, offsets) in integer ranges and spec
// profiles (docs/SPEC.md, "Dim constraints" and "Profiles"): parsing, every
// load error with its file:line:col, draws (RapidCheck and fuzz bytes) that
// give only allowed values, shrinking that stays inside, and profile
// overrides, errors and corpus recording.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

#include "kprop/corpus.h"
#include "kprop/draw.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "tests/support/spec_error.h"
#include "toy_family.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

// toy.sum: length [0, 1000] (schema bounds), value [-1000, 1000].
Spec toy(const std::string& domain, const std::string& extra = "") {
  return parse_spec("spec: toy\nfamily: toy.sum\nrun: {trials: 200, seed: 5}\ndomain:\n" + domain + extra,
                    "t.yaml");
}

std::string load_error(const std::string& text, const std::string& profile = "") {
  return testing::spec_load_error(text, "t.yaml", profile);
}

std::string domain_error(const std::string& domain) {
  return load_error("spec: toy\nfamily: toy.sum\ndomain:\n" + domain);
}

// Every value of [lo, hi] that the constraint's definition allows, by brute force.
std::vector<int64_t> brute(const IntRange& r) {
  std::vector<int64_t> out;
  for (int64_t v = r.lo; v <= r.hi; ++v) {
    bool ok = false;
    if (!r.one_of.empty()) {
      ok = std::find(r.one_of.begin(), r.one_of.end(), v) != r.one_of.end();
    } else {
      const std::vector<int64_t> offsets = r.offsets.empty() ? std::vector<int64_t>{0} : r.offsets;
      for (int64_t o : offsets) ok = ok || ((v - o) % r.multiple_of == 0);
    }
    if (ok) out.push_back(v);
  }
  return out;
}

const std::vector<IntRange> kRanges = {
    IntRange{0, 4},
    IntRange{1, 1024, 64},
    IntRange{1, 1024, 64, {-1, 0, 1}},
    IntRange{-100, 37, 8, {-3, 2}},
    IntRange{5, 7, 2, {1}},
    IntRange{2, 200, 3, {-2, 1}},  // the same residue twice
    IntRange{64, 128, 1, {}, {64, 128}},
    IntRange{-7, 90, 1, {}, {-7, 3, 90}},
};

// ---------------------------------------------------------------- IntRange

TEST(IntRangeConstraint, CountAtAllowsNearestAndShrinkTargetsAgreeWithTheDefinition) {
  for (const IntRange& r : kRanges) {
    const auto values = brute(r);
    SCOPED_TRACE(format_value(r));
    ASSERT_EQ(r.count(), static_cast<int64_t>(values.size()));
    for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(r.at(static_cast<int64_t>(i)), values[i]);
    for (int64_t v = r.lo - 3; v <= r.hi + 3; ++v) {
      EXPECT_EQ(r.allows(v), std::binary_search(values.begin(), values.end(), v)) << v;
      int64_t best = values.front();
      for (int64_t a : values)
        if (std::llabs(a - v) < std::llabs(best - v)) best = a;
      EXPECT_EQ(r.nearest(v), best) << v;
      // shrink_targets: the least allowed value, the largest at most v/2
      // (else the least) and the largest below v, distinct, in that order.
      std::vector<int64_t> want;
      auto add = [&want](int64_t t) {
        if (std::find(want.begin(), want.end(), t) == want.end()) want.push_back(t);
      };
      const auto below = std::lower_bound(values.begin(), values.end(), v) - values.begin();
      if (below > 0) {
        const auto half = std::upper_bound(values.begin(), values.end(), v / 2) - values.begin();
        add(values.front());
        add(half > 0 ? values[static_cast<size_t>(half - 1)] : values.front());
        add(values[static_cast<size_t>(below - 1)]);
      }
      EXPECT_EQ(r.shrink_targets(v), want) << v;
    }
  }
  // A one_of dimension shrinks to the next listed size down, which neither
  // halving nor dropping one element reaches.
  EXPECT_EQ((IntRange{4097, 65537, 1, {}, {4097, 8191, 65537}}).shrink_targets(8191),
            std::vector<int64_t>{4097});
  EXPECT_EQ((IntRange{1, 100}).shrink_targets(10), (std::vector<int64_t>{1, 5, 9}));
  // The plain range is unchanged: every value, no constraint.
  EXPECT_FALSE((IntRange{0, 4}).constrained());
  EXPECT_EQ((IntRange{0, 4}).constraint(), "");
  EXPECT_EQ((IntRange{1, 1024, 64, {-1, 0, 1}}).constraint(), "multiple_of 64 with offsets [-1, 0, 1]");
  // upto keeps the constraint and at least one allowed value.
  EXPECT_EQ((IntRange{64, 1024, 64}).upto(10).hi, 64);
  EXPECT_EQ((IntRange{64, 1024, 64}).upto(300).count(), 4);
}

// ---------------------------------------------------------------- parsing

TEST(ConstraintParsing, MapFormsAndTheListForm) {
  const Spec s =
      toy("  length: {range: [1, 40], multiple_of: 8, offsets: [-1, 0, 1]}\n"
          "  value: {one_of: [9, -4, 7]}\n");
  const IntRange length = s.domain.int_range("length");
  EXPECT_EQ(length, (IntRange{1, 40, 8, {-1, 0, 1}}));
  EXPECT_EQ(s.domain.int_range("value"), (IntRange{-4, 9, 1, {}, {-4, 7, 9}}));  // sorted, lo/hi from it
  EXPECT_EQ(format_value(length), "{range: [1, 40], multiple_of: 8, offsets: [-1, 0, 1]}");
  EXPECT_EQ(format_value(s.domain.int_range("value")), "{one_of: [-4, 7, 9]}");
  // The list form and a map with only a range are plain ranges.
  EXPECT_EQ(toy("  length: [2, 9]\n").domain.int_range("length"), (IntRange{2, 9}));
  EXPECT_EQ(toy("  length: {range: [2, 9]}\n").domain.int_range("length"), (IntRange{2, 9}));
  EXPECT_EQ(toy("  length: {range: [0, 64], multiple_of: 16}\n").domain.int_range("length"),
            (IntRange{0, 64, 16}));
  // one_of may name a range its values must lie in.
  EXPECT_EQ(toy("  length: {range: [1, 8], one_of: [2, 8]}\n").domain.int_range("length"),
            (IntRange{2, 8, 1, {}, {2, 8}}));
}

TEST(ConstraintParsing, EachErrorNamesFileLineAndColumn) {
  EXPECT_EQ(domain_error("  length: {one_of: []}\n"), "t.yaml:4:20: 'length.one_of' is empty");
  EXPECT_EQ(domain_error("  length: {range: [1, 8], multiple_of: 0}\n"),
            "t.yaml:4:40: 'length.multiple_of' = 0 must be >= 1");
  EXPECT_EQ(domain_error("  length: {range: [5, 7], multiple_of: 8}\n"),
            "t.yaml:4:11: 'length' = {range: [5, 7], multiple_of: 8} holds no allowed value");
  EXPECT_EQ(domain_error("  length: {range: [1, 6], multiple_of: 8, offsets: [0]}\n"),
            "t.yaml:4:11: 'length' = {range: [1, 6], multiple_of: 8, offsets: [0]} holds no allowed value");
  EXPECT_EQ(domain_error("  length: {one_of: [4, 2000]}\n"),
            "t.yaml:4:24: 'length.one_of' = 2000 is out of bounds [0, 1000]");
  EXPECT_EQ(domain_error("  length: {range: [-1, 8], multiple_of: 2}\n"),
            "t.yaml:4:19: 'length.range' = -1 is out of bounds [0, 1000]");
  EXPECT_EQ(domain_error("  length: {range: [1, 8], multiple: 2}\n"),
            "t.yaml:4:27: unknown key 'multiple' in 'length' (did you mean 'multiple_of'?); valid: range, "
            "one_of, multiple_of, offsets");
  EXPECT_EQ(domain_error("  length: {range: [1, 8], offsets: [1]}\n"),
            "t.yaml:4:27: 'length.offsets' needs multiple_of");
  EXPECT_EQ(domain_error("  length: {range: [1, 80], multiple_of: 8, offsets: [8]}\n"),
            "t.yaml:4:54: 'length.offsets' value 8 must be within (-8, 8) (multiple_of 8)");
  EXPECT_EQ(domain_error("  length: {one_of: [2, 4], multiple_of: 2}\n"),
            "t.yaml:4:28: 'length' takes one_of or multiple_of/offsets, not both");
  EXPECT_EQ(domain_error("  length: {range: [1, 8], one_of: [2, 9]}\n"),
            "t.yaml:4:39: 'length.one_of' value 9 is outside its range [1, 8]");
  EXPECT_EQ(domain_error("  length: {one_of: [2, 2]}\n"), "t.yaml:4:24: 'length.one_of' lists 2 twice");
  EXPECT_EQ(domain_error("  length: {multiple_of: 2}\n"),
            "t.yaml:4:11: 'length' needs range: [lo, hi] (with multiple_of: M) or one_of: [values]");
}

TEST(ConstraintParsing, ListingShowsTheConstraint) {
  Field f = field::int_range("nq", IntRange{64, 1024, 64}, 1, 4096, "query length");
  EXPECT_NE(describe_schema({f}, 0).find("default {range: [64, 1024], multiple_of: 64}"), std::string::npos)
      << describe_schema({f}, 0);
}

TEST(ConstraintParsing, OutsideIntRangeNamesTheConstraint) {
  const Spec s =
      toy("  length: {range: [1, 40], multiple_of: 8, offsets: [-1, 0, 1]}\n  value: {one_of: [3, 5]}\n");
  EXPECT_EQ(outside_int_range(s.domain, "length", 9), "");
  EXPECT_EQ(outside_int_range(s.domain, "length", 12),
            "length = 12 breaks multiple_of 8 with offsets [-1, 0, 1] of [1, 40]");
  EXPECT_EQ(outside_int_range(s.domain, "length", 48), "length = 48 is outside [1, 40]");
  EXPECT_EQ(outside_int_range(s.domain, "value", 4), "value = 4 is not one_of [3, 5]");
  EXPECT_EQ(outside_int_range(s.domain, "value", 5), "");
}

// ---------------------------------------------------------------- draws

TEST(ConstraintDraws, RapidCheckAndBytesDrawOnlyAllowedValuesAndRecordThem) {
  for (const IntRange& r : kRanges) {
    SCOPED_TRACE(format_value(r));
    const auto values = brute(r);
    std::set<int64_t> seen;
    for (int i = 0; i < 300; ++i) {
      std::vector<uint8_t> bytes;
      const int size = i % 101;
      const auto drawn = rc::gen::exec([&r, &bytes] {
                           RapidCheckDraw draw(&bytes);
                           const int64_t first = draw.sized(r);  // in this order: the bytes follow it
                           return std::make_pair(first, draw.any(r));
                         })(rc::Random(uint64_t(77 + i)), size)
                             .value();
      for (int64_t v : {drawn.first, drawn.second}) {
        ASSERT_TRUE(r.allows(v)) << v;
        seen.insert(v);
      }
      // The recorded bytes decode to the same values.
      ByteReader reader(bytes.data(), bytes.size());
      BytesDraw bd(reader);
      EXPECT_EQ(bd.sized(r), drawn.first);
      EXPECT_EQ(bd.any(r), drawn.second);
      // Arbitrary bytes decode to allowed values too.
      std::vector<uint8_t> noise(16);
      for (size_t k = 0; k < noise.size(); ++k) noise[k] = static_cast<uint8_t>((i * 131 + k * 17) & 0xff);
      ByteReader noisy(noise.data(), noise.size());
      BytesDraw nd(noisy);
      EXPECT_TRUE(r.allows(nd.sized(r)));
      EXPECT_TRUE(r.allows(nd.any(r)));
    }
    // Draws reach beyond the smallest values (not stuck at one).
    EXPECT_GE(seen.size(), std::min<size_t>(values.size(), 3));
  }
}

TEST(ConstraintDraws, SizedDrawsStartSmall) {
  const IntRange r{1, 1024, 64, {-1, 0, 1}};
  for (int i = 0; i < 50; ++i) {
    const int64_t v = rc::gen::exec([&r] {
                        RapidCheckDraw draw;
                        return draw.sized(r);
                      })(rc::Random(uint64_t(i)), 0)
                          .value();
    EXPECT_EQ(v, 1);  // size 0: the least allowed value
  }
}

TEST(ConstraintDraws, FamilyGeneratorStaysInTheConstrainedDomain) {
  const Spec s =
      toy("  length: {range: [0, 40], multiple_of: 4, offsets: [-1]}\n  value: {range: [-20, 20], "
          "multiple_of: 5}\n");
  for (int i = 0; i < 200; ++i) {
    const AnyCase c = s.family->generator(s.domain)(rc::Random(uint64_t(i)), i % 101).value();
    EXPECT_EQ(s.family->in_domain(c, s.domain), "") << s.family->stats(c).summary;
  }
}

// ---------------------------------------------------------------- shrinking

// drops_last fails on every list of 3+ whose last element is not 0; the
// shrinker removes one element or halves one value at a time, which the
// constraint often forbids: the counterexample must still be a case of the
// domain (length 3, 4, 7, 8, ...; values multiples of 5), never the
// unconstrained minimum [0, 0, 1].
TEST(ConstraintShrinking, ShrunkCaseStaysInTheConstrainedDomain) {
  const Spec s =
      toy("  length: {range: [3, 40], multiple_of: 4, offsets: [-1, 0]}\n"
          "  value: {range: [-40, 40], multiple_of: 5}\n",
          "invariants: [matches_reference]\n");
  RunOptions o;
  o.target = "drops_last";
  o.write_corpus = false;
  o.scratch_dir =
      (fs::temp_directory_path() / ("kprop_constraint_test_" + std::to_string(::getpid()))).string();
  const RunReport r = run_spec(s, o);
  fs::remove_all(o.scratch_dir);
  ASSERT_EQ(r.status, RunStatus::failed);
  const auto& cx = r.invariants[0].counterexample;
  ASSERT_TRUE(cx);
  const toy::Case c = toy::Traits::from_yaml(YAML::Load(cx->case_yaml));
  EXPECT_TRUE(c.xs.size() % 4 == 3 || c.xs.size() % 4 == 0) << cx->case_yaml;
  for (int x : c.xs) EXPECT_EQ(x % 5, 0) << cx->case_yaml;
  ASSERT_FALSE(c.xs.empty());
  EXPECT_NE(c.xs.back(), 0) << cx->case_yaml;
  EXPECT_EQ(s.family->in_domain(s.family->from_yaml(YAML::Load(cx->case_yaml)), s.domain), "");
  EXPECT_GT(cx->shrink_steps, 0) << cx->case_yaml << " from size " << cx->original_size;  // it did shrink
}

// ---------------------------------------------------------------- profiles

const std::string kProfiled = R"(spec: toy
family: toy.sum
run: {trials: 200, seed: 5}
domain:
  length: [1, 5]
  value: [-5, 20]
profiles:
  big:
    description: longer lists of multiples of 4
    domain:
      length: {range: [1, 64], multiple_of: 8, offsets: [-1, 0, 1]}
      value: {one_of: [0, 4, 8]}
    run: {trials: 30}
  ci:
    run: {trials: 50, seed: 9}
)";

TEST(Profiles, WithoutAProfileTheBaseSpecIsUnchanged) {
  const Spec s = parse_spec(kProfiled, "t.yaml");
  EXPECT_EQ(s.profile, "");
  EXPECT_EQ(s.profiles, (std::vector<std::string>{"big", "ci"}));
  EXPECT_EQ(s.domain.int_range("length"), (IntRange{1, 5}));
  EXPECT_EQ(s.run.trials, 200);
}

TEST(Profiles, OverridesReplaceKeysOfDomainAndRun) {
  const Spec big = parse_spec(kProfiled, "t.yaml", "big");
  EXPECT_EQ(big.profile, "big");
  EXPECT_EQ(big.domain.int_range("length"), (IntRange{1, 64, 8, {-1, 0, 1}}));
  EXPECT_EQ(big.domain.int_range("value"), (IntRange{0, 8, 1, {}, {0, 4, 8}}));
  EXPECT_EQ(big.run.trials, 30);
  EXPECT_EQ(big.run.seed, 5u);  // not overridden: the base spec's
  const Spec ci = parse_spec(kProfiled, "t.yaml", "ci");
  EXPECT_EQ(ci.domain.int_range("length"), (IntRange{1, 5}));
  EXPECT_EQ(ci.run.trials, 50);
  EXPECT_EQ(ci.run.seed, 9u);
}

TEST(Profiles, NestedMapsMergeKeyByKey) {
  const std::string text =
      "spec: ln\nfamily: layernorm\ndomain:\n  dim: [1, 64]\n  x: {offset_rate: 0.3, constant_rate: 0.2}\n"
      "profiles:\n  gpu:\n    domain:\n      dim: {one_of: [64, 128]}\n      x: {constant_rate: 0}\n";
  const Spec s = parse_spec(text, "ln.yaml", "gpu");
  EXPECT_EQ(s.domain.int_range("dim"), (IntRange{64, 128, 1, {}, {64, 128}}));
  EXPECT_DOUBLE_EQ(s.domain.real("x.constant_rate"), 0);
  EXPECT_DOUBLE_EQ(s.domain.real("x.offset_rate"), 0.3);  // kept from the base
  EXPECT_DOUBLE_EQ(s.domain.real("dim_one_rate"), 0.1);   // the schema default
}

TEST(Profiles, UnknownProfileListsTheSpecsProfiles) {
  EXPECT_EQ(load_error(kProfiled, "bigg"),
            "t.yaml:7:1: unknown profile 'bigg' for spec toy (did you mean 'big'?); valid: big, ci");
  EXPECT_EQ(load_error("spec: toy\nfamily: toy.sum\n", "gpu"),
            "t.yaml: unknown profile 'gpu': spec toy declares no profiles");
}

TEST(Profiles, ErrorsInsideAProfilePointAtItsOwnLines) {
  auto with = [](const std::string& from, const std::string& to) {
    std::string s = kProfiled;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  // Checked whichever profile is selected (here none): validated as the base keys are.
  EXPECT_EQ(load_error(with("value: {one_of: [0, 4, 8]}", "value: {one_of: []}")),
            "t.yaml:12:23: 'value.one_of' is empty");
  EXPECT_EQ(
      load_error(with("run: {trials: 30}", "run: {trails: 30}")),
      "t.yaml:13:11: unknown key 'trails' in run (profile big) (did you mean 'trials'?); valid: trials, "
      "max_size, seed, time_budget_s, shrink_budget_s, shrink_budget_checks, max_discard_ratio, "
      "case_timeout_s, "
      "suppress_health_check, max_case_mb, padded_tensors, search");
  EXPECT_EQ(load_error(with("run: {trials: 50, seed: 9}", "run: {trials: 0}")),
            "t.yaml:15:19: 'trials' = 0 is out of bounds [1, 1000000000]");
  EXPECT_EQ(load_error(with("  ci:\n", "  ci:\n    domian: {}\n")),
            "t.yaml:15:5: unknown key 'domian' in profile ci (did you mean 'domain'?); valid: description, "
            "domain, run, mutants, skip_invariants");
  EXPECT_EQ(load_error(with("      length: {range", "      lenght: {range")),
            "t.yaml:11:7: unknown key 'lenght' in domain (profile big) (did you mean 'length'?); valid: "
            "length, value, mode");
  EXPECT_EQ(load_error(with("  ci:\n    run: {trials: 50, seed: 9}\n", "  ci: 3\n")),
            "t.yaml:14:7: profile 'ci' must be a map with domain: and/or run: overrides");
}

// A profile that skips every invariant would run and check nothing (it
// loaded, and the run ended in the nothing_checked health check saying
// "every one was n/a").
TEST(Profiles, SkippingEveryInvariantIsALoadError) {
  const std::string listed =
      "spec: toy\nfamily: toy.sum\ninvariants: [matches_reference, sum_parity]\n"
      "profiles:\n  p:\n    skip_invariants: [sum_parity, matches_reference]\n";
  const std::string error =
      "t.yaml:6:22: skip_invariants skips every invariant this spec would check (profile p): the run would "
      "check nothing";
  EXPECT_EQ(load_error(listed, "p"), error);
  EXPECT_EQ(load_error(listed), error);  // every profile is validated, selected or not
  std::string one = listed;
  one.replace(one.find("[sum_parity, matches_reference]"), 31, "[sum_parity]");
  EXPECT_EQ(load_error(one, "p"), "");
  EXPECT_EQ(load_error(one), "");
}

// `run:`, `domain:` or a nested map (`x:`, `search:`) with nothing after it
// (its keys commented out) is an error at its key, as `trials:` is: in a
// profile it replaced the base's values with the family's defaults (a fresh
// seed, 100 trials, every dtype) and nothing said so. `{}` keeps them.
TEST(Profiles, AnEmptySectionOrNestedMapIsAnErrorNotTheDefaults) {
  const std::string base =
      "spec: ln\nfamily: layernorm\nrun: {trials: 3, seed: 1, search: {enabled: true, trials: 5}}\n"
      "domain: {dtypes: [f32], rows: [1, 4], dim: [2, 8], x: {constant_rate: 1}}\n"
      "invariants: [matches_reference]\nprofiles:\n  p:\n";
  const std::string empty = ": give its keys, or remove it";
  for (const std::string profile : {"p", ""}) {  // every profile is validated, selected or not
    EXPECT_EQ(load_error(base + "    run:\n      # trials: 50\n    domain: {rows: [1, 2]}\n", profile),
              "t.yaml:8:5: 'run' in profile p is empty" + empty);
    EXPECT_EQ(load_error(base + "    run: {trials: 5}\n    domain:\n      # rows: [1, 2]\n", profile),
              "t.yaml:9:5: 'domain' in profile p is empty" + empty);
    EXPECT_EQ(load_error(base + "    domain: {x: }\n", profile),
              "t.yaml:8:14: 'x' in domain (profile p) is empty" + empty);
    EXPECT_EQ(load_error(base + "    run: {search: }\n", profile),
              "t.yaml:8:11: 'search' in run (profile p) is empty" + empty);
  }
  // The base spec alike (there it read as the defaults), and --domain.
  EXPECT_EQ(load_error("spec: ln\nfamily: layernorm\nrun:\ndomain: {dim: [2, 8]}\n"),
            "t.yaml:3:1: 'run' is empty" + empty);
  EXPECT_EQ(load_error("spec: ln\nfamily: layernorm\ndomain:\n"), "t.yaml:3:1: 'domain' is empty" + empty);
  EXPECT_EQ(load_error("spec: ln\nfamily: layernorm\ndomain: {dim: [2, 8], x: }\n"),
            "t.yaml:3:23: 'x' in domain is empty" + empty);
  EXPECT_EQ(testing::spec_load_error("spec: ln\nfamily: layernorm\n", "t.yaml", "", "{x: }"),
            "--domain:1:2: 'x' in the domain of t.yaml is empty" + empty);
  // An empty map overrides nothing: the base's values.
  const Spec s = parse_spec(base + "    run: {search: {}}\n    domain: {x: {}}\n", "t.yaml", "p");
  EXPECT_EQ(s.run.trials, 3);
  EXPECT_EQ(s.run.seed, 1u);
  EXPECT_TRUE(s.run.search);
  EXPECT_EQ(s.run.search_trials, 5);
  EXPECT_EQ(s.domain.choices("dtypes"), (Choices{"f32"}));
  EXPECT_DOUBLE_EQ(s.domain.real("x.constant_rate"), 1);
}

// skip_invariants as the other name lists: each name once, and with
// nothing after it an error, as `mutants:` is (it skipped nothing, unsaid).
TEST(Profiles, SkipInvariantsNamesEachOnceAndIsNeverEmpty) {
  const std::string base =
      "spec: toy\nfamily: toy.sum\ninvariants: [matches_reference, sum_parity]\nprofiles:\n  p:\n";
  EXPECT_EQ(load_error(base + "    skip_invariants: [sum_parity, sum_parity]\n"),
            "t.yaml:6:35: skip_invariants lists 'sum_parity' twice");
  EXPECT_EQ(load_error(base + "    skip_invariants:\n"),
            "t.yaml:6:5: 'skip_invariants' in profile p is empty: give invariant names, or remove it");
  EXPECT_EQ(load_error(base + "    mutants:\n"),
            "t.yaml:6:5: 'mutants' in profile p is empty: give mutant names, or remove it");
  EXPECT_EQ(load_error(base + "    skip_invariants: [sum_parity]\n"), "");
}

TEST(Profiles, FindingsRecordTheProfileAndReplayWithoutIt) {
  const fs::path dir = fs::temp_directory_path() / ("kprop_profile_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const Spec big = parse_spec(kProfiled + "invariants: [matches_reference]\n", "t.yaml", "big");
  RunOptions o;
  o.target = "drops_last";
  o.write_corpus = true;
  o.corpus_dir = dir.string();
  o.scratch_dir = (dir / "scratch").string();
  const RunReport r = run_spec(big, o);
  ASSERT_EQ(r.status, RunStatus::failed);
  EXPECT_EQ(r.profile, "big");
  const auto files = list_corpus((dir / "toy").string());
  ASSERT_EQ(files.size(), 1u);
  const CorpusEntry e = read_entry(files[0]);
  EXPECT_EQ(e.profile, "big");
  EXPECT_EQ(YAML::Load(emit_entry(e))["profile"].as<std::string>(), "big");  // round trip
  // Replayed under the base spec (its length [1, 5] excludes the case's) and under the profile.
  for (const char* profile : {"", "big", "ci"}) {
    const Spec s = parse_spec(kProfiled + "invariants: [matches_reference]\n", "t.yaml", profile);
    RunOptions ro;
    ro.target = "drops_last";
    const auto rows = replay_corpus(s, files[0], ro);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].error, "") << profile;
    EXPECT_FALSE(rows[0].target_ok) << profile;  // still fails there
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kprop
