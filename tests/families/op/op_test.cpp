// The op family (a kernel declared in the spec): one load-time
// error per error class of the `op:` declaration, at its file:line:col; the
// generic shrinker stays inside the declared domain and reaches the minimal
// dims of a bug that needs D >= 3; the YAML corpus codec round-trips every
// value bit for bit; every byte string decodes to a case in the domain.
#include "kernels/op/op.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>

#include "kprop/listing.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "properties/op/family.h"
#include "tests/families/op/op_support.h"

namespace kprop::op {
namespace {

using namespace kprop::op::testing;

// A declaration using every kind of constraint the shrinker must respect:
// plain ranges, multiple_of (H), one_of (K), a real and an integer attr
// range, an input with its own dtype (v) and two outputs.
const char* const kDomainSpec = R"(spec: shrink
family: op
op:
  dims:
    T: [1, 8]
    D: [1, 24]
    H: {range: [2, 16], multiple_of: 2}
    K: {one_of: [7, 3, 5]}
  attrs:
    eps: {range: [1.0e-6, 1.0e-3]}
    n: {range: [2, 9], int: true}
  inputs:
    x: {shape: [T, D], dtype: [f32, f64], values: [normal, integer, large, small, constant_rows]}
    w: {shape: [D], values: {normal: {mean: 1, std: 0.1}}}
    v: {shape: [H, K], dtype: [f64]}
  outputs:
    y: {shape: [T, D]}
    z: {shape: [H, K]}
  reference:
    y: x / sqrt(mean(x * x, axis=-1, keepdims=true) + eps) * w
    z: v * n
target: reference
invariants:
  - matches_reference
)";

// ---------------------------------------------------------------- load-time errors

// A valid rmsnorm-like spec; each error test replaces one line of it:
// line 4 the dims, 7 input x, 8 the outputs, 10 the reference.
std::string base_spec(
    const std::string& dims = "{T: [1, 8], D: [1, 16]}",
    const std::string& x = "{shape: [T, D], dtype: [f32, f64]}",
    const std::string& outputs = "{y: {shape: [T, D]}}",
    const std::string& reference = "y: x / sqrt(mean(x * x, axis=-1, keepdims=true) + eps)") {
  return fmt::format(R"(spec: t
family: op
op:
  dims: {}
  attrs: {{eps: {{one_of: [1.0e-5, 1.0e-6]}}}}
  inputs:
    x: {}
  outputs: {}
  reference:
    {}
target: reference
)",
                     dims, x, outputs, reference);
}

// Asserts the message starts with `prefix` (file:line:col: message...).
#define EXPECT_LOAD_ERROR(text, prefix)                                                                  \
  do {                                                                                                   \
    const std::string message_ = load_error(text);                                                       \
    EXPECT_EQ(message_.substr(0, std::string(prefix).size()), (prefix)) << "full message: " << message_; \
  } while (0)

// Declarations that loaded and then checked nothing, or overflowed: an op
// with no output (deterministic passed over nothing), a multiple_of past any
// extent (an internal error after its sum wrapped), an attr range wider than
// a double (drew ±inf, outside the range).
TEST(OpDecl, DeclarationsThatCouldCheckNothingOrOverflowAreErrors) {
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D], dtype: [f32, f64]}", "{}", "{}"),
                    "op.yaml:8:12: op.outputs is empty: an op needs at least one output");
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: {range: [2, 8], multiple_of: 9223372036854775807}}"),
                    "op.yaml:4:53: dim D.multiple_of 9223372036854775807 is larger than any extent (2^24)");
  std::string wide = base_spec();
  wide.replace(wide.find("{eps: {one_of: [1.0e-5, 1.0e-6]}}"), 33, "{eps: [-1.7e308, 1.7e308]}");
  EXPECT_LOAD_ERROR(wide, "op.yaml:5:16: attr eps range [-1.7e+308, 1.7e+308] is wider than a double holds");
  // A one-element list is no range: the number alone fixes the value.
  std::string one = base_spec();
  one.replace(one.find("{eps: {one_of: [1.0e-5, 1.0e-6]}}"), 33, "{eps: [1.0e-5]}");
  EXPECT_LOAD_ERROR(
      one,
      "op.yaml:5:16: attr eps range must be [lo, hi] (a one-element list: write the number alone "
      "for a fixed value, or {one_of: [...]})");
  // Value kinds whose draws would pass the double's range (they drew +-inf
  // inputs, which only a declared special may be).
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D], values: {uniform: {lo: -1e308, hi: 1e308}}}"),
      "op.yaml:7:42: input x.values.uniform: hi - lo overflows a double");
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D], values: {normal: {std: 1e308}}}"),
                    "op.yaml:7:41: input x.values.normal: |mean| + 9 std overflows a double");
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}",
                              "{shape: [T, D], values: {constant_rows: {mean: 1.7e308, std: 1e307}}}"),
                    "op.yaml:7:48: input x.values.constant_rows: |mean| + 9 std overflows a double");
}

// Draws past f32's range (a normal with std 1e300, finite in the double
// the generator computes in) are clamped to its largest finite value, as
// f16/bf16 draws are: they were stored as +-inf.
TEST(OpDecl, DrawsPastTheDtypesRangeAreClampedNotInfinite) {
  const Spec spec = parse_spec(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D], dtype: f32, values: {normal: {std: 1e300}}}"),
      "op.yaml");
  const OpFamily& f = op_family(spec);
  bool saturated = false;
  for (uint64_t seed = 1; seed < 20; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 100);
    const AnyCase drawn = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
    for (double v : as_case(drawn).inputs[0]) {
      ASSERT_TRUE(std::isfinite(v)) << "seed " << seed;
      saturated = saturated || std::fabs(v) == double(std::numeric_limits<float>::max());
    }
  }
  EXPECT_TRUE(saturated);
}

// A reference whose intermediate dwarfs its inputs and outputs: the outer
// product of x with itself at T = 2^20 holds 2^40 elements in one step
// (8 bytes each, twice for the floor's bound: 2^24 MB, plus ~40 MB of
// operands and input). It passed the memory check (inputs and outputs only) and ended the run in
// std::bad_alloc, stored as the target's crash; now the spec does not load.
TEST(OpDecl, AReferenceIntermediateOverTheMemoryBudgetIsALoadError) {
  const std::string outer = "{y: {shape: []}}";
  const std::string reference = "y: sum(x[:, None, 0] * x[None, :, 0])";
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 1048576], D: [1, 1]}", "{shape: [T, D], dtype: [f32, f64]}", outer, reference),
      "op.yaml:4:9: the largest case of this domain needs ~16777257 MB (T 1048576 x D 1; "
      "reference y holds 1.1e+12 elements while evaluated), over run.max_case_mb = 1024");
  // The same reference over small extents loads.
  EXPECT_EQ(load_error(base_spec("{T: [1, 1024], D: [1, 1]}", "{shape: [T, D], dtype: [f32, f64]}", outer,
                                 reference)),
            "");
}

// An expression invariant's intermediates count too (kprop::largest_case):
// its outer product at T = 2^16 holds 2^32 elements, the comparison's
// result as many again (2^16 MB at 8 bytes each), where the op itself needs
// a few MB (and the tensors it reads, x and target.y, 1 MB); it ended a run
// in std::bad_alloc. Over small extents it loads.
TEST(OpDecl, AnExpressionInvariantOverTheMemoryBudgetIsALoadError) {
  const std::string invariant =
      "invariants:\n  - name: outer\n    expect: all(x[:, None, 0] * target.y[None, :, 0] >= -inf)\n";
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 65536], D: [1, 1]}") + invariant,
                    "op.yaml:4:9: the largest case of this domain needs ~65542 MB (T 65536 x D 1; invariant "
                    "outer holds 8.59e+09 elements while evaluated), over run.max_case_mb = 1024");
  EXPECT_EQ(load_error(base_spec("{T: [1, 1024], D: [1, 1]}") + invariant), "");
}

TEST(OpDecl, TheBaseSpecLoads) {
  EXPECT_EQ(load_error(base_spec()), "");
  EXPECT_EQ(load_error(kDomainSpec), "");
}

TEST(OpDecl, UnknownKeyNamesTheKeyAndTheValidOnes) {
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D], dtyp: f32}"),
      "op.yaml:7:24: unknown key 'dtyp' in input x (did you mean 'dtype'?); valid: shape, dtype, "
      "values");
  // A key of the op section itself.
  std::string s = base_spec();
  s.replace(s.find("  attrs:"), 8, "  atrs:");
  EXPECT_LOAD_ERROR(s, "op.yaml:5:3: unknown key 'atrs' in op (did you mean 'attrs'?)");
  // A key of a dim.
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: {range: [1, 16], multiple: 2}}"),
                    "op.yaml:4:41: unknown key 'multiple' in dim D (did you mean 'multiple_of'?)");
}

TEST(OpDecl, ShapeNamingAnUndeclaredDim) {
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, E]}"),
                    "op.yaml:7:20: input x: shape names undeclared dim 'E'; valid: T, D");
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, Dd]}}"),
                    "op.yaml:8:28: output y: shape names undeclared dim 'Dd' (did you mean 'D'?)");
}

// Words the expressions read as literals cannot name a dim, attr or
// tensor: an attr `True` was read as 1 in `x * True`.
TEST(OpDecl, ReservedWordsAreNotNames) {
  for (const std::string word : {"True", "False", "None", "true", "nan", "unit_roundoff", "store_roundoff"})
    EXPECT_LOAD_ERROR(
        base_spec("{T: [1, 8], " + word + ": [1, 16]}", "{shape: [T]}", "{y: {shape: [T]}}", "y: x"),
        "op.yaml:4:21: '" + word + "' is reserved in expressions; pick another name");
}

TEST(OpDecl, BadRanges) {
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [16, 1]}"),
                    "op.yaml:4:24: dim D is an inverted range [16, 1]: lo must be <= hi");
  EXPECT_LOAD_ERROR(base_spec("{T: [0, 8], D: [1, 16]}"), "op.yaml:4:13: dim T: extents start at 1 (got 0)");
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: {range: [5, 7], multiple_of: 8}}"),
                    "op.yaml:4:24: dim D: no value in [5, 7] is a multiple of 8");
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: {range: [1, 16], one_of: [4, 32]}}"),
                    "op.yaml:4:49: dim D: one_of value 32 is outside [1, 16] or not a multiple of 1");
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D], values: {uniform: {lo: 2, hi: 1}}}"),
      "op.yaml:7:42: input x.values.uniform: lo must be <= hi (got 2 > 1)");
}

TEST(OpDecl, ReferenceThatDoesNotTypeCheck) {
  // An unknown name: the column points into the expression, at the name.
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}}",
                              "y: x / sqrt(mean(x * x, axis=-1, keepdims=true) + eps) * w"),
                    "op.yaml:10:62: reference.y: unknown name 'w'; valid: x, T, D, eps");
  // Shapes that do not broadcast.
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}}",
                              "y: x / sqrt(mean(x * x, axis=-1) + eps)"),
                    "op.yaml:10:8: reference.y: shapes [T, D] and [T] do not broadcast (D vs T)");
  // A boolean is no output value.
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}}", "y: x > 0"),
      "op.yaml:10:8: reference.y: is boolean; a reference computes the output's values");
}

TEST(OpDecl, ReferenceShapeNotTheDeclaredOutputShape) {
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}}",
                              "y: mean(x * x, axis=-1)"),
                    "op.yaml:10:8: reference.y: has shape [T], but output y is declared [T, D]");
  // A slice's extent is known on a case only ("?"): it fits any declared
  // extent at load (each case's evaluation checks it). The last column as
  // an [T, 1] output was refused ("has shape [T, ?]").
  EXPECT_EQ(load_error(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, 1]}}",
                                 "y: x[:, D - 1:]")),
            "");
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, 1]}}", "y: x[0, D - 1:]"),
      "op.yaml:10:8: reference.y: has shape [?], but output y is declared [T, 1]");
}

TEST(OpDecl, MissingReferenceForAnOutput) {
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}, s: {shape: [T]}}"),
      "op.yaml:10:5: output 's' has no reference expression");
  // And a reference for an output that is not declared.
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}}", "z: x"),
                    "op.yaml:10:5: reference for 'z', which is not a declared output");
}

TEST(OpDecl, OpSectionUnderAnotherFamily) {
  EXPECT_LOAD_ERROR("spec: t\nfamily: layernorm\nop:\n  dims: {T: [1, 2]}\n",
                    "op.yaml:3:1: 'op:' belongs to family: op, not layernorm");
  // And family: op without one.
  EXPECT_LOAD_ERROR("spec: t\nfamily: op\ntarget: reference\n",
                    "op.yaml:2:9: family op needs its 'op:' section declaring the kernel");
}

// ---------------------------------------------------------------- shrinking
double at(const Case& c, const std::string& input, size_t k) {
  for (size_t i = 0; i < c.decl->inputs.size(); ++i)
    if (c.decl->inputs[i].name == input) return c.inputs[i][k];
  throw std::logic_error("no input " + input);
}

int64_t dim(const Case& c, const std::string& name) {
  return c.dims[static_cast<size_t>(c.decl->dim_index(name))];
}

// A case drawn from the generator (as a run draws it) that `pred` accepts.
template <typename Pred>
Case drawn_case(const OpFamily& f, const Values& domain, Pred pred) {
  for (uint64_t seed = 1; seed < 1000; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(domain, seed, 100);
    const AnyCase c = f.from_bytes(bytes.data(), bytes.size(), domain);
    if (pred(as_case(c))) return as_case(c);
  }
  throw std::logic_error("no drawn case satisfies the predicate");
}

// The raw shrinker (before FamilyDef filters by in_domain) proposes only
// cases inside the declaration, and greedy shrinking of a failure that
// needs D >= 3 and x[.., 2] != 0 ends at every dim's smallest valid value
// (H's least multiple of 2, K's least one_of) with D = 3.
TEST(OpShrink, StaysInTheDomainAndReachesTheMinimalDims) {
  const Spec spec = parse_spec(kDomainSpec, "shrink.yaml");
  const OpFamily& f = op_family(spec);
  auto fails = [](const Case& c) {
    const int64_t d = dim(c, "D");
    if (d < 3) return false;
    for (int64_t t = 0; t < dim(c, "T"); ++t)
      if (at(c, "x", static_cast<size_t>(t * d + 2)) != 0) return true;
    return false;
  };
  const Case start = drawn_case(f, spec.domain, [&](const Case& c) { return fails(c) && dim(c, "D") > 8; });
  ASSERT_EQ(Traits::in_domain(start, spec.domain), "");
  const Shrunk shrunk = shrink_while(start, spec.domain, fails);
  const Case& c = shrunk.c;
  const int steps = shrunk.steps;
  EXPECT_GT(steps, 0);
  EXPECT_LT(steps, 10000) << "shrinking did not reach a fixed point";
  EXPECT_EQ(dim(c, "T"), 1);
  EXPECT_EQ(dim(c, "D"), 3);
  EXPECT_EQ(dim(c, "H"), 2);
  EXPECT_EQ(dim(c, "K"), 3);
  // Values: the one element that matters is 1, everything else 0.
  EXPECT_EQ(at(c, "x", 0), 0);
  EXPECT_EQ(at(c, "x", 1), 0);
  EXPECT_EQ(at(c, "x", 2), 1);
  for (size_t i = 1; i < c.inputs.size(); ++i)
    for (double v : c.inputs[i]) EXPECT_EQ(v, 0) << c.decl->inputs[i].name;
  // Attrs: toward the low end of their range.
  EXPECT_EQ(c.attrs[0], 1e-6);
  EXPECT_EQ(c.attrs[1], 2);
}

// A planted bug that needs D >= 3, through the whole runner: the kernel's
// sum of squares stops after two elements (a tail loop never run). Found,
// and shrunk to T = 1, D = 3 with the other dims at their least values.
TEST(OpShrink, RunnerShrinksABugNeedingThreeColumnsToTheMinimalDims) {
  Spec spec = parse_spec(kDomainSpec, "shrink.yaml");
  const auto f = plant_mutants(spec, [](OpFamily& planted) {
    planted.mutant("sum_two_columns", "the sum of squares stops after two elements", [](const Case& c) {
      Result r = op::reference(c);
      const int64_t T = dim(c, "T"), D = dim(c, "D");
      if (D < 3) return r;
      const double eps = c.attrs[0];
      for (int64_t t = 0; t < T; ++t) {
        double ss = 0;
        for (int64_t j = 0; j < 2; ++j)
          ss += at(c, "x", static_cast<size_t>(t * D + j)) * at(c, "x", t * D + j);
        for (int64_t j = 0; j < D; ++j)
          r.outputs[0][static_cast<size_t>(t * D + j)] = at(c, "x", static_cast<size_t>(t * D + j)) /
                                                         std::sqrt(ss / static_cast<double>(D) + eps) *
                                                         at(c, "w", static_cast<size_t>(j));
      }
      return r;
    });
  });
  expect_shrunk_to_dims(spec, *f, scratch_run("sum_two_columns", 20261122, 200, "kprop_op_test_findings"),
                        {{"T", 1}, {"D", 3}, {"H", 2}, {"K", 3}});
}

// An integer attr shrinks to the least value that still fails: halfway
// toward lo and one step down, besides lo, 0, 1 and fewer digits. A bug
// needing k >= 2 ended at k = 10 or 7 (only lo, 0, 1 and fewer digits were
// tried); one needing k >= 5 ends at 5. The same seed gives the same case.
TEST(OpShrink, AnIntegerAttrShrinksToTheLeastFailingValue) {
  Spec spec = parse_spec(R"(spec: scale
family: op
op:
  dims: {N: [1, 8]}
  attrs: {k: {range: [1, 16], int: true}}
  inputs:
    x: {shape: [N], dtype: [f64], values: {integer: {lo: 1, hi: 3}}}
  outputs:
    y: {shape: [N]}
  reference:
    y: x * k
invariants: [matches_reference]
)",
                         "scale.yaml");
  plant_mutants(spec, [](OpFamily& f) {
    for (const int cap : {1, 4})
      f.mutant(fmt::format("caps_at_{}", cap), "k capped", [cap](const Case& c) {
        Result r = op::reference(c);
        for (size_t i = 0; i < r.outputs[0].size(); ++i)
          r.outputs[0][i] = c.inputs[0][i] * std::min(c.attrs[0], static_cast<double>(cap));
        return r;
      });
  });
  for (const auto& [target, least] : {std::pair{"caps_at_1", 2}, std::pair{"caps_at_4", 5}})
    for (uint64_t seed : {1, 2, 3}) {
      const RunReport r = run_spec(spec, scratch_run(target, seed, 100, "kprop_op_test_findings"));
      ASSERT_EQ(r.status, RunStatus::failed) << target << " seed " << seed;
      const YAML::Node n = case_node(*r.invariants.at(0).counterexample);
      EXPECT_EQ(n["attrs"]["k"].as<int>(), least) << target << " seed " << seed << ":\n"
                                                  << r.invariants[0].counterexample->case_yaml;
      EXPECT_EQ(n["dims"]["N"].as<int>(), 1) << target << " seed " << seed;
      const RunReport again = run_spec(spec, scratch_run(target, seed, 100, "kprop_op_test_findings"));
      EXPECT_EQ(again.invariants.at(0).counterexample->case_yaml, r.invariants[0].counterexample->case_yaml);
    }
}

// How many times the run of `target` (a planted kernel of `spec`, which
// counts its calls in *calls) called it, and the counterexample's x.
std::pair<int, std::vector<double>> calls_and_shrunk_x(const Spec& spec, const std::string& target,
                                                       const std::shared_ptr<int>& calls) {
  *calls = 0;
  const RunReport r = run_spec(spec, scratch_run(target, 1, 20, "kprop_op_test_findings"));
  EXPECT_EQ(r.status, RunStatus::failed) << target;
  if (r.status != RunStatus::failed) return {*calls, {}};
  const YAML::Node x = case_node(*r.invariants.at(0).counterexample)["inputs"]["x"]["values"];
  return {*calls, x.as<std::vector<double>>()};
}

// Shrinking a long input costs calls in proportion to its length, not its
// square. A bug that needs one element of 1,025 (the last) keeps it by
// halving the nonzero span: each element toward 0 in turn took 1,024 steps,
// 2,127 of them and 18 s on an RMSNorm backward through a NumPy worker. A
// bug that needs every element nonzero and two different takes each but
// one to 1 in one pass: every pass started at the first candidate, so each
// step re-tried the elements before it. Both
// end where they did: [0, ..., 0, 1], and 1 but for one element.
TEST(OpShrink, ALongInputShrinksInCallsLinearInItsLength) {
  const auto spec_of = [](int n) {
    return parse_spec(fmt::format(R"(spec: long
family: op
op:
  dims: {{N: [{0}, {0}]}}
  inputs:
    x: {{shape: [N], dtype: [f64], values: normal}}
  outputs:
    y: {{shape: [N]}}
  reference:
    y: x
invariants: [matches_reference]
)",
                                  n),
                      "long.yaml");
  };
  const auto calls = std::make_shared<int>(0);
  Spec last = spec_of(1025);
  plant_mutants(last, [calls](OpFamily& f) {
    f.mutant("drops_last", "y[1024] left 0", [calls](const Case& c) {
      ++*calls;
      Result r = op::reference(c);
      r.outputs[0][1024] = 0;
      return r;
    });
  });
  const auto [last_calls, last_x] = calls_and_shrunk_x(last, "drops_last", calls);
  std::vector<double> one_at_end(1025, 0.0);
  one_at_end.back() = 1;
  EXPECT_EQ(last_x, one_at_end);
  EXPECT_LT(last_calls, 200);  // 18 (each element toward 0 in turn: 2,054)
  Spec every = spec_of(64);
  plant_mutants(every, [calls](OpFamily& f) {
    f.mutant("needs_no_zero", "y[0] wrong when no x is 0 and not all are equal", [calls](const Case& c) {
      ++*calls;
      Result r = op::reference(c);
      const auto& x = c.inputs[0];
      if (std::find(x.begin(), x.end(), 0.0) == x.end() && std::count(x.begin(), x.end(), x[0]) != 64)
        r.outputs[0][0] += 1;
      return r;
    });
  });
  const auto [every_calls, every_x] = calls_and_shrunk_x(every, "needs_no_zero", calls);
  EXPECT_EQ(std::count(every_x.begin(), every_x.end(), 0.0), 0);
  EXPECT_EQ(std::count(every_x.begin(), every_x.end(), 1.0), 63);
  EXPECT_LT(every_calls, 600);  // 207 (every pass from the first candidate: 2,410)
}

// ---------------------------------------------------------------- corpus codec
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Every value, special ones included, comes back bit for bit in both dtypes
// (the shortest text that reads back in the dtype, .nan/.inf, -0).
TEST(OpCorpus, RoundTripIsExactInBothDtypesWithSpecialValues) {
  const Spec spec = parse_spec(kDomainSpec, "shrink.yaml");
  const OpFamily& f = op_family(spec);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> specials = {0.0,
                                        -0.0,
                                        1.0,
                                        -1.0,
                                        inf,
                                        -inf,
                                        nan,
                                        0.1,
                                        1.0 / 3,
                                        std::nextafter(1.0, 2.0),
                                        std::numeric_limits<double>::denorm_min(),
                                        -std::numeric_limits<double>::denorm_min(),
                                        std::numeric_limits<double>::min(),
                                        std::numeric_limits<double>::max(),
                                        -std::numeric_limits<double>::max(),
                                        1e-310,
                                        123456789.123456789,
                                        -2.5e-8};
  for (DType dt : {DType::f32, DType::f64}) {
    Case c = drawn_case(f, spec.domain, [&](const Case& k) { return k.dtype == dt && dim(k, "D") >= 5; });
    // x: the specials (rounded to x's dtype), then drawn values; v (f64): the specials in f64.
    for (size_t k = 0; k < c.inputs[0].size(); ++k)
      c.inputs[0][k] = round_to(dt, k < specials.size() ? specials[k] : c.inputs[0][k] * 1.0000001);
    for (size_t k = 0; k < c.inputs[2].size() && k < specials.size(); ++k) c.inputs[2][k] = specials[k];
    c.attrs[0] = 1.2345678901234567e-4;
    const Case back = round_trip(f, c);
    EXPECT_EQ(back.dims, c.dims);
    EXPECT_EQ(back.dtype, c.dtype);
    EXPECT_EQ(back.dtypes, c.dtypes);
    EXPECT_TRUE(same_bits(back.attrs, c.attrs));
    ASSERT_EQ(back.inputs.size(), c.inputs.size());
    for (size_t i = 0; i < c.inputs.size(); ++i)
      EXPECT_TRUE(same_bits(back.inputs[i], c.inputs[i])) << dtype_name(dt) << " input " << i;
    // f32 denormals survive in f32: the smallest one is 2^-149.
    if (dt == DType::f32) {
      c.inputs[0][0] = std::ldexp(1.0, -149);
      EXPECT_TRUE(same_bits(round_trip(f, c).inputs[0], c.inputs[0]));
    }
  }
}

// ---------------------------------------------------------------- fuzz decoding
// Gaps in the valid values (multiple_of) defeat arc consistency alone:
// H = 20 survives pruning under Nk >= H >= Nq == Nk with Nq, Nk multiples
// of 16, yet fixing it leaves Nq no value. Every draw still completes.
TEST(OpRelations, DrawsNeverDeadEndWhereValidValuesHaveGaps) {
  const Spec spec = parse_spec(R"(spec: gaps
family: op
op:
  dims:
    H: [1, 64]
    Nq: {range: [16, 64], multiple_of: 16}
    Nk: {range: [16, 64], multiple_of: 16}
  relations: ["Nk >= H", "H >= Nq", "Nq == Nk"]
  inputs: {x: {shape: [H], dtype: [f64]}}
  outputs: {y: {shape: [H]}}
  reference: {y: x}
target: reference
)",
                               "gaps.yaml");
  const OpFamily& f = op_family(spec);
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 100);
    const Case c = as_case(f.from_bytes(bytes.data(), bytes.size(), spec.domain));
    ASSERT_EQ(Traits::in_domain(c, spec.domain), "") << "seed " << seed;
    ASSERT_EQ(dim(c, "H"), dim(c, "Nq")) << "seed " << seed;  // the only solutions
  }
}

// B's side of a relation may be affine: a causal conv's carried state of
// K - 1 columns, a stride's output of 2T (the extents a shape cannot write,
// and the spec's only way to tie two dims this way). Every draw, including
// the fuzz decoder's, satisfies them, and the values they allow are all
// reached; one that cannot hold is an error naming it as written.
TEST(OpRelations, AffineRelationsHoldOnEveryDraw) {
  const std::string text = kAffineRelationsSpec;
  const Spec spec = parse_spec(text, "conv_state.yaml");
  const OpFamily& f = op_family(spec);
  std::set<int64_t> ks;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 100);
    const Case c = as_case(f.from_bytes(bytes.data(), bytes.size(), spec.domain));
    ASSERT_EQ(Traits::in_domain(c, spec.domain), "") << "seed " << seed;
    ASSERT_EQ(dim(c, "S"), dim(c, "K") - 1) << "seed " << seed;
    ASSERT_EQ(dim(c, "T2"), 2 * dim(c, "T")) << "seed " << seed;
    ASSERT_GE(dim(c, "T2"), dim(c, "S") + 1) << "seed " << seed;
    ks.insert(dim(c, "K"));
  }
  EXPECT_EQ(ks, (std::set<int64_t>{2, 3, 4, 5}));
  std::string bad = text;
  bad.replace(bad.find("\"S == K - 1\""), 12, "\"S == K - 9\"");
  EXPECT_EQ(
      load_error(bad).rfind("op.yaml:5:15: op.relations: S == K - 9 cannot hold with the dims' ranges", 0),
      0u)
      << load_error(bad);
  bad = text;
  bad.replace(bad.find("\"T2 == 2 * T\""), 13, "\"T2 == T * 2\"");
  EXPECT_EQ(load_error(bad).rfind(
                "op.yaml:5:29: op.relations: 'T2 == T * 2' must be A OP B, A OP B + N, A OP B - N "
                "or A OP M * B (+ or - N)",
                0),
            0u)
      << load_error(bad);
  bad = text;
  bad.replace(bad.find("\"S == K - 1\""), 12, "\"S == Q - 1\"");
  EXPECT_EQ(load_error(bad).rfind("op.yaml:5:21: op.relations: 'Q' is not a declared dim", 0), 0u)
      << load_error(bad);
}

// rows_independent slices the first output's first dim down to its least
// value, the other dims as they are. Where the relations rule every such
// slice out (Nq == Nk, Nk < Nq), it could check no case: left out of the
// defaults, a load error when listed. Where some case allows it (Nk <= Nq:
// Nk at its least), it stays.
TEST(OpRelations, RowsIndependentOnlyWhereTheRelationsAllowASlice) {
  const auto spec_text = [](const std::string& relation, const std::string& invariants) {
    return fmt::format(R"(spec: sq
family: op
op:
  dims: {{Nq: [1, 16], Nk: [1, 16], D: [1, 8]}}
  relations: ["{}"]
  inputs:
    s: {{shape: [Nq, Nk]}}
    v: {{shape: [Nk, D]}}
  outputs:
    o: {{shape: [Nq, D]}}
  reference:
    o: s @ v
target: reference
{})",
                       relation, invariants);
  };
  const auto names = [](const Spec& spec) {
    std::vector<std::string> out;
    for (const auto& i : spec.invariants) out.push_back(i.name);
    return out;
  };
  const std::vector<std::string> without{"matches_reference", "finite_outputs", "deterministic"};
  EXPECT_EQ(names(parse_spec(spec_text("Nq == Nk", ""), "op.yaml")), without);
  EXPECT_EQ(names(parse_spec(spec_text("Nk < Nq", ""), "op.yaml")), without);
  std::vector<std::string> with = without;
  with.push_back("rows_independent");
  EXPECT_EQ(names(parse_spec(spec_text("Nk <= Nq", ""), "op.yaml")), with);
  EXPECT_EQ(names(parse_spec(spec_text("Nq < Nk", ""), "op.yaml")), with);
  EXPECT_LOAD_ERROR(
      spec_text("Nq == Nk", "invariants: [rows_independent]"),
      "op.yaml:14:14: invariant rows_independent needs a slice along Nq the relations allow; no "
      "case keeps them with Nq alone at its least value, 1");
}

// A batch_dims entry along which the reference itself is not independent
// (a cumsum along N, listed as batch_dims [T, N]) is the spec's error, one
// line naming the dim (exit 2): the reference, run as the target, was
// reported "rows_independent broken by target reference" (exit 1) and a
// correct kernel blamed. A kernel leaking across the real batch dim T still
// fails as the kernel's.
TEST(OpRowsIndependent, ABatchDimTheReferenceBreaksIsTheSpecsError) {
  const auto spec_with = [](const std::string& batch_dims) {
    Spec spec = parse_spec(fmt::format(R"(spec: cumsum
family: op
op:
  dims: {{T: [1, 6], N: [1, 12]}}
  inputs:
    x: {{shape: [T, N], dtype: [f32, f64], values: {{integer: {{lo: 1, hi: 3}}}}}}
  outputs:
    y: {{shape: [T, N]}}
  reference:
    y: cumsum(x, axis=-1)
  summation: sequential
invariants:
  - {{name: rows_independent, batch_dims: {}}}
)",
                                       batch_dims),
                           "cumsum.yaml");
    plant_mutants(spec, [](OpFamily& f) {
      f.mutant("leaks_rows", "adds the first row's total to the last row's first element", [](const Case& c) {
        Result r = op::reference(c);
        const int64_t T = dim(c, "T"), N = dim(c, "N");
        if (T > 1) r.outputs[0][static_cast<size_t>((T - 1) * N)] += r.outputs[0][static_cast<size_t>(N - 1)];
        return r;
      });
    });
    return spec;
  };
  try {
    (void)run_spec(spec_with("[T, N]"), scratch_run("reference", 1, 100, "kprop_op_test_findings"));
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_EQ(
        m.rfind("cumsum.yaml: batch_dims N: the reference itself is not independent along N: y computed "
                "alone (N = 1, the last of ",
                0),
        0u)
        << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // With T alone, a leak across rows is the kernel's (exit 1).
  const RunReport r = run_spec(spec_with("[T]"), scratch_run("leaks_rows", 1, 100, "kprop_op_test_findings"));
  ASSERT_EQ(r.status, RunStatus::failed) << r.detail;
  EXPECT_NE(r.invariants.at(0).counterexample->message.find("y computed alone (T = 1"), std::string::npos)
      << r.invariants[0].counterexample->message;
}

// slice_<DIM>: a contiguous run of a smaller valid extent along the dim,
// within the hard relations (Nk >= Nq: slicing Nk stops at Nq), the other
// dims and every value of the kept indices unchanged; transform.index names
// the run.
TEST(OpTransform, SliceKeepsAContiguousRunInsideTheDomain) {
  const Spec spec = parse_spec(R"(spec: slice
family: op
op:
  dims: {Nq: [1, 6], Nk: {range: [2, 12], multiple_of: 2}}
  relations: ["Nk >= Nq"]
  inputs: {x: {shape: [Nq, Nk], dtype: [f64]}}
  outputs: {y: {shape: [Nq, Nk]}}
  reference: {y: x}
target: reference
)",
                               "slice.yaml");
  const OpFamily& f = op_family(spec);
  int sliced = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const Case c =
        drawn_case(f, spec.domain, [&](const Case& k) { return dim(k, "Nk") >= 4 + int(seed % 3); });
    for (const char* name : {"slice_dim0", "slice_dim1"}) {
      expr::TensorMap out;
      out.want("transform.index");
      const Case s = Traits::transform(name, c, Values{}, seed, out);
      ASSERT_EQ(Traits::in_domain(s, spec.domain), "") << name << " seed " << seed;
      const size_t k = static_cast<size_t>(name[9] - '0');
      const expr::Tensor* found = out.find("transform.index");
      ASSERT_NE(found, nullptr);
      const expr::Tensor& index = *found;
      ASSERT_EQ(static_cast<int64_t>(index.data.size()), s.dims[k]);
      ASSERT_LE(s.dims[k], c.dims[k]);
      if (s.dims[k] < c.dims[k]) ++sliced;
      for (size_t p = 1; p < index.data.size(); ++p) ASSERT_EQ(index.data[p], index.data[p - 1] + 1);
      ASSERT_EQ(s.dims[1 - k], c.dims[1 - k]);
      const int64_t cols = c.dims[1], scols = s.dims[1];
      for (int64_t i = 0; i < s.dims[0]; ++i)
        for (int64_t j = 0; j < scols; ++j) {
          const int64_t oi = k == 0 ? static_cast<int64_t>(index.data[size_t(i)]) : i;
          const int64_t oj = k == 1 ? static_cast<int64_t>(index.data[size_t(j)]) : j;
          ASSERT_EQ(s.inputs[0][size_t(i * scols + j)], c.inputs[0][size_t(oi * cols + oj)]);
        }
    }
  }
  EXPECT_GT(sliced, 100);  // not the whole dim every time
}

// The libFuzzer path on kDomainSpec, with multiple_of and one_of dims and an
// integer attr, which none of the declarations FamilyContract's
// EveryByteStringDecodes runs has: any byte string (all 0x00, all 0xff,
// random; short ones run out and read zeros) decodes to a case inside the
// declaration, every value exact in its input's dtype, which the reference
// evaluates and the codec gives back equal (not only as the same text).
TEST(OpFuzz, BytesDecodeToExactCasesOfAConstrainedDeclaration) {
  const Spec spec = parse_spec(kDomainSpec, "shrink.yaml");
  const OpFamily& f = op_family(spec);
  std::mt19937 rng(20261122);
  for (size_t len = 0; len <= 400; len += 7) {
    for (int fill = 0; fill < 3; ++fill) {
      std::vector<uint8_t> bytes(len);
      for (auto& b : bytes) b = fill == 0 ? 0x00 : fill == 1 ? 0xff : static_cast<uint8_t>(rng());
      const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
      const Case& c = as_case(any);
      ASSERT_EQ(f.in_domain(any, spec.domain), "") << "length " << len << " fill " << fill;
      for (size_t i = 0; i < c.inputs.size(); ++i)
        for (double v : c.inputs[i]) ASSERT_EQ(v, round_to(c.dtypes[i], v)) << "not exact in its dtype";
      const Result r = op::reference(c);
      ASSERT_EQ(r.outputs.size(), 2u);
      EXPECT_EQ(round_trip(f, c), c) << "length " << len;
    }
  }
}

}  // namespace
}  // namespace kprop::op

namespace kprop::op {
namespace {

// An input that takes the case's dtype (no list, or the case's own choices
// in any order) has exactly it, in a corpus file as in a drawn case: an f16
// x in an f32 case replayed as "ok" (the tests compared dtypes.empty()).
TEST(OpCorpus, AnInputTakingTheCasesDtypeHasIt) {
  const Spec spec = parse_spec(R"(spec: mixed
family: op
op:
  dims: {T: [1, 4], D: [1, 4]}
  inputs:
    x: {shape: [T, D], dtype: [f32, f64, f16, bf16]}
    w: {shape: [D], dtype: [bf16, f16, f64, f32]}
    b: {shape: [D]}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: x * w + b
)",
                               "mixed.yaml");
  const OpFamily& f = op_family(spec);
  const auto decode = [&](const std::string& x, const std::string& w, const std::string& b) -> std::string {
    const YAML::Node n = YAML::Load(fmt::format(R"(dtype: f32
dims: {{T: 1, D: 2}}
inputs:
  x:
    dtype: {}
    values: [[3, 7]]
  w: {{dtype: {}, values: [0.5, 1]}}
  b: {{dtype: {}, values: [0, 1]}}
)",
                                                x, w, b));
    try {
      f.from_yaml(n);
    } catch (const CaseFormatError& e) {
      return fmt::format("{}:{}: {}", e.line, e.col, e.what());
    }
    return "";
  };
  EXPECT_EQ(decode("f32", "f32", "f32"), "");
  EXPECT_EQ(decode("f16", "f32", "f32"),
            "5:12: input x has dtype f16, not the case's dtype f32 (it takes the case's)");
  EXPECT_EQ(decode("f32", "bf16", "f32"),
            "7:14: input w has dtype bf16, not the case's dtype f32 (it takes the case's)");
  EXPECT_EQ(decode("f32", "f32", "f64"),
            "8:14: input b has dtype f64, not the case's dtype f32 (it takes the case's)");
  // The domain check says the same of a case built in memory.
  YAML::Node good = YAML::Load(
      "dtype: f32\ndims: {T: 1, D: 1}\ninputs: {x: {dtype: f32, values: [[1]]}, w: "
      "{dtype: f32, values: [1]}, b: {dtype: f32, values: [0]}}\n");
  Case c = as_case(f.from_yaml(good));
  EXPECT_EQ(Traits::in_domain(c, spec.domain), "");
  c.dtypes[1] = DType::f16;
  EXPECT_EQ(Traits::in_domain(c, spec.domain),
            "input w has dtype f16, not the case's dtype f32 (it takes the case's)");
}

// A slice's index has the derived case's extent: --list says
// [transformed.T] for the declared family's slice_T, as the loader compiles
// it and docs/SPEC.md says (it said [T]).
TEST(OpList, ASlicesIndexIsListedWithTheTransformedDim) {
  const std::string text = list_text();
  const size_t block = text.find("\nDeclared families (");
  ASSERT_NE(block, std::string::npos) << text;
  const size_t at = text.find("transform.index", block);
  ASSERT_NE(at, std::string::npos) << text.substr(block);
  const std::string line = text.substr(at, text.find('\n', at) - at);
  EXPECT_NE(line.find("[transformed.T]"), std::string::npos) << line;
  // And the example family of --list --format json.
  const auto json = nlohmann::json::parse(list_json());
  bool seen = false;
  for (const auto& d : json["declared_families"])
    for (const auto& t : d["example_family"]["transforms"])
      for (const auto& x : t["tensors"])
        if (t["name"] == "slice_T" && x["name"] == "transform.index") {
          EXPECT_EQ(x["shape"], (std::vector<std::string>{"transformed.T"}));
          seen = true;
        }
  EXPECT_TRUE(seen) << json.dump();
}

// ---------------------------------------------------------------- --list
// prop_runner --list shows the declared family, the keys of its section and
// what every declaration gets (built from the example section), in text and
// in JSON; the registered families' listing is unchanged by it.
TEST(OpList, ListShowsTheDeclaredFamilyAndItsSectionKeys) {
  const std::string text = list_text();
  const size_t at = text.find("\nDeclared families (");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string declared = text.substr(at);
  for (const char* want :
       {"\n  op — a kernel declared in the spec itself\n", "\n    section op:\n",
        "\n      dims: {DIM: [lo, hi]", "\n      reference: {OUTPUT: EXPR}", "\n      matches_reference ",
        "\n      rows_independent ", "\n      permute_T ", "\n      floor.y "})
    EXPECT_NE(declared.find(want), std::string::npos) << want;
  // No line of the block starts with "family " (scripts/gen_families_md.py
  // reads those as registered families).
  EXPECT_EQ(declared.find("\nfamily "), std::string::npos);

  const auto json = nlohmann::json::parse(list_json());
  ASSERT_EQ(json["declared_families"].size(), 1u);
  const auto& op = json["declared_families"][0];
  EXPECT_EQ(op["name"], "op");
  EXPECT_EQ(op["section"], "op");
  std::vector<std::string> keys;
  for (const auto& k : op["keys"]) keys.push_back(k["key"]);
  EXPECT_EQ(keys, (std::vector<std::string>{"name", "dims", "relations", "attrs", "inputs", "outputs",
                                            "summation", "reference", "mutants"}));
  std::vector<std::string> invariants;
  for (const auto& i : op["example_family"]["invariants"]) invariants.push_back(i["name"]);
  EXPECT_EQ(invariants, (std::vector<std::string>{"matches_reference", "finite_outputs", "rounded_to_nearest",
                                                  "deterministic", "rows_independent"}));
  for (const auto& f : json["families"]) EXPECT_NE(f["name"], "op");
}

}  // namespace
}  // namespace kprop::op

// ================================================================ the domain
// Dim relations, special values and denormals, index tensors, masks.
namespace kprop::op {
namespace {

// Every new kind of the domain in one declaration: a hard relation
// (Nk >= Nq) and an equality at a rate, specials and denormals in x, ids
// bounded by a dim (gathering rows of `table`), a fixed-bound id tensor, a
// permutation per row, and masks of every kind (two causal alignments).
const char* const kRichSpec = R"(spec: rich
family: op
op:
  dims:
    B: [1, 3]
    Nq: [1, 9]
    Nk: [1, 9]
    V: [1, 12]
    D: [1, 6]
  relations: ["Nk >= Nq", {equal: [Nq, Nk], rate: 0.5}]
  inputs:
    x: {shape: [B, Nq, Nk], dtype: [f32, f64], values: [normal, denormal], specials: {rate: 0.2}}
    table: {shape: [V, D]}
    ids: {shape: [B, Nq], dtype: [i32, i64], values: {ids: {below: V}}}
    tok: {shape: [Nk], dtype: i32, values: {ids: {below: 5}}}
    perm: {shape: [B, Nk], dtype: i64, values: permutation}
    mask: {shape: [Nq, Nk], values: [causal, {causal: {align: bottom_right}}, padding, {bernoulli: {p: 0.3}}]}
  outputs:
    y: {shape: [B, Nq, Nk]}
    e: {shape: [B, Nq, D]}
  reference:
    y: where(mask, x, 0)
    e: table[ids]
target: reference
invariants:
  - matches_reference
)";

size_t input_index(const Decl& d, const std::string& name) {
  for (size_t i = 0; i < d.inputs.size(); ++i)
    if (d.inputs[i].name == name) return i;
  throw std::logic_error("no input " + name);
}

const std::vector<double>& values_of(const Case& c, const std::string& name) {
  return c.inputs[input_index(*c.decl, name)];
}

std::string kind_of(const Case& c, const std::string& name) {
  const size_t i = input_index(*c.decl, name);
  const ValueSpec& v = c.decl->inputs[i].values[static_cast<size_t>(c.kinds[i])];
  return std::string(value_kind_name(v.kind)) + (v.bottom_right ? "_br" : "");
}

// Each constraint of kRichSpec, checked here from first principles (not by
// in_domain, which the test checks separately).
void expect_rich_constraints(const Case& c, const std::string& where) {
  const int64_t B = dim(c, "B"), Nq = dim(c, "Nq"), Nk = dim(c, "Nk"), V = dim(c, "V");
  ASSERT_GE(Nk, Nq) << where;
  for (double id : values_of(c, "ids")) ASSERT_TRUE(id >= 0 && id < V && id == std::floor(id)) << where;
  for (double id : values_of(c, "tok")) ASSERT_TRUE(id >= 0 && id < 5 && id == std::floor(id)) << where;
  const auto& perm = values_of(c, "perm");
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> row(perm.begin() + b * Nk, perm.begin() + (b + 1) * Nk);
    std::sort(row.begin(), row.end());
    for (int64_t j = 0; j < Nk; ++j) ASSERT_EQ(row[static_cast<size_t>(j)], j) << where;
  }
  const auto& m = values_of(c, "mask");
  const std::string kind = kind_of(c, "mask");
  for (int64_t r = 0; r < Nq; ++r) {
    int64_t valid = 0;
    for (int64_t k = 0; k < Nk; ++k) {
      const double e = m[static_cast<size_t>(r * Nk + k)];
      ASSERT_TRUE(e == 0 || e == 1) << where;
      if (kind == "causal") {
        ASSERT_EQ(e, k <= r ? 1 : 0) << where;
      }
      if (kind == "causal_br") {
        ASSERT_EQ(e, k <= r + Nk - Nq ? 1 : 0) << where;
      }
      if (kind == "padding") {
        ASSERT_EQ(e, k == valid ? e : 0) << where << " (not a prefix)";
      }
      valid += e != 0;
    }
    if (kind == "padding") {
      ASSERT_GE(valid, 1) << where;
    }
  }
  const size_t x = input_index(*c.decl, "x");
  for (double v : c.inputs[x]) ASSERT_TRUE(std::isnan(v) || v == round_to(c.dtypes[x], v)) << where;
}

// Equal cases; an index tensor or mask may come back under another declared
// kind of the same name its values also satisfy (a square causal mask is
// both top-left and bottom-right aligned).
bool same_case(const Case& a, const Case& b) {
  if (a.dims != b.dims || a.attrs != b.attrs || a.dtype != b.dtype || a.dtypes != b.dtypes ||
      a.kinds.size() != b.kinds.size())
    return false;
  for (size_t i = 0; i < a.kinds.size(); ++i)
    if (a.kinds[i] != b.kinds[i] && (a.kinds[i] < 0 || b.kinds[i] < 0 ||
                                     a.decl->inputs[i].values[static_cast<size_t>(a.kinds[i])].kind !=
                                         b.decl->inputs[i].values[static_cast<size_t>(b.kinds[i])].kind ||
                                     !check_input(b, i).empty()))
      return false;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (!same_bits(a.inputs[i], b.inputs[i])) return false;
  return true;
}

// prop_runner --list --spec shows the relations that every draw keeps
// (--domain replaces dims, never them), in text and in JSON.
TEST(OpDomainDecl, ListShowsTheRelations) {
  const Spec spec = parse_spec(kRichSpec, "rich.yaml");
  const std::string text = list_text(&spec);
  EXPECT_NE(text.find("\n  kept on every draw, whatever --domain says: Nk >= Nq; Nq == Nk in 50% of draws\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(nlohmann::json::parse(list_json(&spec))["domain_rules"],
            (std::vector<std::string>{"Nk >= Nq", "Nq == Nk in 50% of draws"}));
}

// The libFuzzer path on kRichSpec: 2,000 random byte strings (and the all-0
// / all-1 ones) decode to cases satisfying every constraint, each checked
// here from first principles (FamilyContract's EveryByteStringDecodes asks
// in_domain, on shipped declarations, none with a permutation or a
// fixed-bound id tensor), which the reference evaluates and the corpus
// codec round-trips bit for bit.
TEST(OpDomain, EveryByteStringDecodesToACaseSatisfyingEveryConstraint) {
  const Spec spec = parse_spec(kRichSpec, "rich.yaml");
  const OpFamily& f = op_family(spec);
  std::mt19937 rng(20261123);
  std::set<std::string> mask_kinds;
  for (int n = 0; n < 2002; ++n) {
    std::vector<uint8_t> bytes(rng() % 300);
    for (auto& b : bytes) b = n == 2000 ? 0x00 : n == 2001 ? 0xff : static_cast<uint8_t>(rng());
    const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
    const Case& c = as_case(any);
    const std::string where = fmt::format("byte string {} ({} bytes)", n, bytes.size());
    ASSERT_EQ(f.in_domain(any, spec.domain), "") << where;
    expect_rich_constraints(c, where);
    if (HasFatalFailure()) return;
    mask_kinds.insert(kind_of(c, "mask"));
    const Result r = op::reference(c);
    ASSERT_EQ(r.outputs.size(), 2u);
    ASSERT_TRUE(same_case(round_trip(f, c), c)) << where;
  }
  EXPECT_EQ(mask_kinds.size(), 4u) << "every mask kind drawn";
}

// The generator (RapidCheck, as a run draws) honours the rates: Nq == Nk in
// at least the forced half of the cases, specials and denormals appear.
TEST(OpDomain, RatesAndKindsAsDeclared) {
  const Spec spec = parse_spec(kRichSpec, "rich.yaml");
  const OpFamily& f = op_family(spec);
  int equal = 0, with_nan = 0, with_inf = 0, with_denormal = 0, clean = 0;
  const int n = 600;
  for (uint64_t seed = 1; seed <= n; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 100);
    const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
    const Case& c = as_case(any);
    ASSERT_EQ(f.in_domain(any, spec.domain), "");
    equal += dim(c, "Nq") == dim(c, "Nk");
    const auto& x = values_of(c, "x");
    const double tiny = min_normal(c.dtypes[input_index(*c.decl, "x")]);
    bool special = false;
    for (double v : x) {
      with_nan += std::isnan(v), with_inf += std::isinf(v);
      with_denormal += v != 0 && std::fabs(v) < tiny;
      special = special || !std::isfinite(v);
    }
    clean += !special;
  }
  EXPECT_GE(equal, n / 2) << "equal: [Nq, Nk] at rate 0.5";
  EXPECT_GT(with_nan, 0);
  EXPECT_GT(with_inf, 0);
  EXPECT_GT(with_denormal, 0);
  EXPECT_GT(clean, n / 3) << "specials are on in about half the cases";
}

// Every dim and attr range at its greatest value in a fraction of the cases
// at any size (build.cpp, kAtMaxRate: 15%), its relations still holding (Nq
// at 9 takes Nk to 9 under Nk >= Nq). The size ramp alone reached the top of
// a range only at full size, once in its count of values, and a kernel
// wrong only there passed (op.rope.bug.last_row_clamped: RoPE never reading
// its table's last row, reached at offset 32 and T 32 only). Size 5 of 100:
// a size-ramped draw of T in [1, 8] is 1 there.
TEST(OpDomain, EveryRangeReachesItsGreatestValueAtSmallSizes) {
  for (const char* text : {kDomainSpec, kRichSpec}) {
    const Spec spec = parse_spec(text, "ends.yaml");
    const OpFamily& f = op_family(spec);
    const Decl& d = f.decl();
    std::map<std::string, int> at_max, at_min;
    const int n = 400;
    for (uint64_t seed = 1; seed <= n; ++seed) {
      const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 5);
      const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
      const Case& c = as_case(any);
      ASSERT_EQ(f.in_domain(any, spec.domain), "");
      for (size_t k = 0; k < d.dims.size(); ++k) {
        at_max[d.dims[k].name] += c.dims[k] == d.dims[k].largest();
        at_min[d.dims[k].name] += c.dims[k] == d.dims[k].smallest();
      }
      for (size_t a = 0; a < d.attrs.size(); ++a)
        if (d.attrs[a].one_of.empty()) {
          at_max[d.attrs[a].name] += c.attrs[a] == d.attrs[a].hi;
          at_min[d.attrs[a].name] += c.attrs[a] == d.attrs[a].lo;
        }
    }
    for (const auto& [name, count] : at_max) {
      EXPECT_GE(count, n / 10) << spec.name << ": " << name << " at its greatest value";
      EXPECT_GE(at_min[name], n / 40) << spec.name << ": " << name << " at its least value";
    }
  }
}

// near: draws an attr next to a value the case's inputs give, in the
// declared fraction of the cases and at a relative distance within the
// declared range, on either side: top_p's p next to a token's mass above
// (a mass summed in f32 for an f64 row passed 5 seeds in 8 with p drawn
// apart from the logits). Here t next to an element of x (a value x takes
// in [0, 1]), moved by 1e-9 to 1e-6 relative.
TEST(OpDomain, NearDrawsAnAttrNextToAValueOfTheInputs) {
  const Spec spec = parse_spec(R"(spec: near
family: op
op:
  dims: {N: [1, 6]}
  attrs:
    t: {range: [0, 1], near: {values: abs(x) / (1 + abs(x)), rate: 0.5, distance: [1.0e-9, 1.0e-6]}}
  inputs:
    x: {shape: [N], dtype: f64}
  outputs:
    y: {shape: [N]}
  reference:
    y: where(x > t, x, 0)
target: reference
invariants:
  - matches_reference
)",
                               "near.yaml");
  const OpFamily& f = op_family(spec);
  int near = 0, above = 0, below = 0;
  const int n = 400;
  for (uint64_t seed = 1; seed <= n; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 50);
    const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
    const Case& c = as_case(any);
    ASSERT_EQ(f.in_domain(any, spec.domain), "");
    const double t = c.attrs[0];
    for (const double x : c.inputs[0]) {
      const double v = std::fabs(x) / (1 + std::fabs(x)), rel = std::fabs(t - v) / v;
      if (rel >= 1e-9 * (1 - 1e-12) && rel <= 1e-6 * (1 + 1e-12)) {
        ++near, above += t > v, below += t < v;
        break;
      }
    }
  }
  // About half (rate 0.5), the rest drawn over [0, 1] (none lands within 1e-6 by chance, but for luck).
  EXPECT_GT(near, n * 4 / 10);
  EXPECT_LT(near, n * 6 / 10);
  EXPECT_GT(above, near / 4);
  EXPECT_GT(below, near / 4);
}

// The spec's let: names serve the op's references and near: as its
// invariants; each is checked at its own position on the names a reference
// reads, a clash with the op's names is an error there, and one reading the
// target's tensors is for invariants (a reference using it says so).
TEST(OpDecl, LetNamesServeReferencesAndNear) {
  const std::string spec = R"(spec: let
family: op
let:
  S: sum(x, axis=-1, keepdims=true)
  share: x / S
op:
  dims: {T: [1, 4], D: [1, 8]}
  attrs: {t: {range: [0, 1], near: {values: share}}}
  inputs:
    x: {shape: [T, D], dtype: f64, values: {uniform: {lo: 0.5, hi: 1}}}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: where(share > t, share, 0)
target: reference
invariants:
  - name: sums
    expect: all(sum(target.y, axis=-1) <= 1 + 1e-9 * D)
)";
  const Spec s = parse_spec(spec, "op.yaml");
  const OpFamily& f = op_family(s);
  const Case c = drawn_case(f, s.domain, [](const Case&) { return true; });
  const Result r = op::reference(c);
  for (int64_t t = 0; t < dim(c, "T"); ++t) {
    double sum = 0;
    for (int64_t k = 0; k < dim(c, "D"); ++k) sum += c.inputs[0][static_cast<size_t>(t * dim(c, "D") + k)];
    for (int64_t k = 0; k < dim(c, "D"); ++k) {
      const size_t i = static_cast<size_t>(t * dim(c, "D") + k);
      const double share = c.inputs[0][i] / sum;
      EXPECT_DOUBLE_EQ(r.outputs[0][i], share > c.attrs[0] ? share : 0);
    }
  }
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = spec;
    t.replace(t.find(from), from.size(), to);
    return load_error(t);
  };
  EXPECT_EQ(with("  share: x / S", "  x: S"),
            "op.yaml:5:3: let 'x' is already a name of the op (its dims, attrs, inputs and outputs share one "
            "namespace with the spec's lets); pick another name");
  const auto starts = [](const std::string& got, const std::string& want) {
    if (got.rfind(want, 0) == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << got;
  };
  EXPECT_TRUE(
      starts(with("  share: x / S", "  share: x / SS"), "op.yaml:5:14: let share: unknown name 'SS'"));
  EXPECT_TRUE(starts(with("    y: where(share", "    y: 0 * target.y + where(share"),
                     "op.yaml:14:12: reference.y: unknown name 'target.y'"));
  EXPECT_TRUE(
      starts(with("  share: x / S", "  share: x / S + 0 * target.y"),
             "op.yaml:8:45: attr t.near.values: unknown name 'target.y'; valid: x, T, D, S, share (in let "
             "share: `x / S + 0 * target.y`)"));
}

TEST(OpDecl, NearErrors) {
  const std::string spec = base_spec();
  auto with = [&](const std::string& attrs) {
    std::string s = spec;
    s.replace(s.find("{eps: {one_of: [1.0e-5, 1.0e-6]}}"), 33, attrs);
    return s;
  };
  EXPECT_LOAD_ERROR(with("{eps: {one_of: [1.0e-5, 1.0e-6], near: {values: x}}}"),
                    "op.yaml:5:49: attr eps.near is for a real range attr");
  EXPECT_LOAD_ERROR(with("{eps: {range: [1, 4], int: true, near: {values: x}}}"),
                    "op.yaml:5:49: attr eps.near is for a real range attr");
  EXPECT_LOAD_ERROR(with("{eps: {range: [0, 1], near: x}}"),
                    "op.yaml:5:38: attr eps.near must be {values: EXPR, rate: R, distance: [lo, hi]}");
  EXPECT_LOAD_ERROR(with("{eps: {range: [0, 1], near: {rate: 0.5}}}"),
                    "op.yaml:5:38: attr eps.near needs values: EXPR");
  EXPECT_LOAD_ERROR(with("{eps: {range: [0, 1], near: {values: x, rate: 0}}}"),
                    "op.yaml:5:56: attr eps.near.rate must be in (0, 1]");
  EXPECT_LOAD_ERROR(with("{eps: {range: [0, 1], near: {values: x, distance: [1.0e-3, 1.0e-6]}}}"),
                    "op.yaml:5:60: attr eps.near.distance [0.001, 1e-06] must hold 0 < lo <= hi <= 1");
  EXPECT_LOAD_ERROR(with("{eps: {range: [0, 1], near: {values: x, typo: 1}}}"),
                    "op.yaml:5:50: unknown key 'typo' in attr eps.near");
  // It reads the inputs, dims and the other attrs; not the attr it draws.
  EXPECT_LOAD_ERROR(
      with("{eps: {range: [0, 1], near: {values: x + eps}}}"),
      "op.yaml:5:51: attr eps.near.values reads eps itself (near: draws eps next to these values");
  EXPECT_LOAD_ERROR(with("{eps: {range: [0, 1], near: {values: x > 0}}}"),
                    "op.yaml:5:47: attr eps.near.values: is boolean");
}

// The index tensors and masks reach the target in their ABI dtypes.
TEST(OpDomain, IndexTensorsAndMasksAreIntegerTensorsForTargets) {
  const Spec spec = parse_spec(kRichSpec, "rich.yaml");
  const OpFamily& f = op_family(spec);
  const Case c = drawn_case(f, spec.domain, [](const Case&) { return true; });
  // The reference reads ids as gather indices: e[b, q, :] = table[ids[b, q], :].
  const Result r = op::reference(c);
  const int64_t D = dim(c, "D");
  const auto& ids = values_of(c, "ids");
  const auto& table = values_of(c, "table");
  for (size_t k = 0; k < ids.size(); ++k)
    for (int64_t j = 0; j < D; ++j)
      ASSERT_EQ(r.outputs[1][static_cast<size_t>(static_cast<int64_t>(k) * D + j)],
                table[static_cast<size_t>(static_cast<int64_t>(ids[k]) * D + j)]);
  std::map<std::string, std::string> dtypes;
  for (size_t i = 0; i < c.decl->inputs.size(); ++i) dtypes[c.decl->inputs[i].name] = dtype_name(c.dtypes[i]);
  EXPECT_TRUE(dtypes["ids"] == "i32" || dtypes["ids"] == "i64");
  EXPECT_EQ(dtypes["tok"], "i32");
  EXPECT_EQ(dtypes["perm"], "i64");
  EXPECT_EQ(dtypes["mask"], "bool");
}

// An input listing the case's dtype choices in another order takes the
// case's dtype too, under --domain's dtypes as well (it drew its own: an f32
// x with an f64 w, which the spec's order-free list does not allow).
TEST(OpDomain, TheSameDtypeChoicesInAnotherOrderTakeTheCasesDtype) {
  std::string text = kDomainSpec;
  text.replace(text.find("w: {shape: [D],"), 15, "w: {shape: [D], dtype: [f64, f32],");
  for (const char* domain : {"", "{dtypes: [f64]}"}) {
    const Spec spec = parse_spec(text, "shrink.yaml", "", domain);
    const OpFamily& f = op_family(spec);
    for (uint64_t seed = 1; seed <= 100; ++seed) {
      const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 100);
      const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
      const Case& c = as_case(any);
      ASSERT_EQ(dtype_name(c.dtypes[input_index(*c.decl, "w")]),
                dtype_name(c.dtypes[input_index(*c.decl, "x")]))
          << domain << " seed " << seed;
    }
  }
}

// prop_runner --domain and a profile's domain: on a declared op: `dtypes`
// replaces the case's dtype choices (w, which takes the case's dtype,
// follows; v keeps its own), a dim's name replaces that dim; the relations
// must still hold, and errors point into the option or the spec.
TEST(OpDomain, ProfileAndCommandLineDomainsReplaceDtypesAndDims) {
  const Spec spec = parse_spec(kDomainSpec, "shrink.yaml", "", "{dtypes: [f32], T: 3, D: {one_of: [2, 5]}}");
  const OpFamily& f = op_family(spec);
  std::set<int64_t> ds;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 100);
    const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
    const Case& c = as_case(any);
    ASSERT_EQ(dtype_name(c.dtypes[input_index(*c.decl, "x")]), std::string("f32"));
    ASSERT_EQ(dtype_name(c.dtypes[input_index(*c.decl, "w")]), std::string("f32"));
    ASSERT_EQ(dtype_name(c.dtypes[input_index(*c.decl, "v")]), std::string("f64"));
    ASSERT_EQ(dim(c, "T"), 3);
    ds.insert(dim(c, "D"));
  }
  EXPECT_EQ(ds, (std::set<int64_t>{2, 5}));
  // A profile's domain: takes the same keys; --domain comes after it.
  const std::string profiled =
      std::string(kDomainSpec) + "profiles:\n  small:\n    domain: {T: 2, dtypes: [f64]}\n";
  for (const auto& [domain, t] : {std::pair{"", 2}, std::pair{"{T: 5}", 5}}) {
    const Spec p = parse_spec(profiled, "shrink.yaml", "small", domain);
    const std::vector<uint8_t> bytes = op_family(p).seed_bytes(p.domain, 1, 100);
    const AnyCase any = op_family(p).from_bytes(bytes.data(), bytes.size(), p.domain);
    EXPECT_EQ(dim(as_case(any), "T"), t) << domain;
    EXPECT_EQ(dtype_name(as_case(any).dtypes[input_index(*as_case(any).decl, "x")]), std::string("f64"));
  }
  EXPECT_EQ(load_error(std::string(kDomainSpec) + "profiles:\n  small:\n    domain: {Q: 2}\n"),
            "op.yaml:27:14: unknown key 'Q' in the domain of op shrink (its dtypes, dims and attrs); valid: "
            "dtypes, T, D, H, K, eps, n");
  auto error = [](const std::string& domain) {
    return kprop::testing::spec_load_error(kRichSpec, "rich.yaml", "", domain);
  };
  EXPECT_EQ(error("{Nq: [5, 6], Nk: [1, 2]}"),
            "--domain:1:1: op.relations cannot hold with these dims (dim Nq has no value left)");
  EXPECT_EQ(error("{dtypes: [f16, f16]}"), "--domain:1:16: dtypes lists 'f16' twice");
  // The op's own dtypes, not every dtype there is (i32 and bool are never the case's).
  EXPECT_EQ(error("{dtypes: []}"), "--domain:1:10: dtypes is empty; valid: f32, f64");
  EXPECT_EQ(error("{Nq: {range: [1, 4], every: 2}}"),
            "--domain:1:22: unknown key 'every' in dim Nq; valid: range, multiple_of, one_of");
  // A swapped name is suggested (it shares its letters); one sharing no
  // letter with any key is not ('x' was told "did you mean 'B'?").
  EXPECT_NE(error("{kN: [4]}")
                .find("unknown key 'kN' in the domain of op rich (its dtypes, dims and attrs) "
                      "(did you mean 'Nk'?)"),
            std::string::npos)
      << error("{kN: [4]}");
  EXPECT_EQ(error("{x: [4]}").find("did you mean"), std::string::npos) << error("{x: [4]}");
}

// An attr's name in --domain or a profile's domain: narrows it to values its
// declaration allows (a number, a sub-range, some of its one_of or named
// choices); its kind stays the declaration's, widening is an error at the
// option, and a case the whole declaration allows still replays.
TEST(OpDomain, AnAttrIsNarrowedWithinItsDeclaration) {
  auto rich_with_attrs = [](const std::string& attrs) {
    std::string s = kRichSpec;
    return s.insert(s.find("  relations:"), attrs);
  };
  auto drawn = [](const Spec& spec, size_t attr) {
    const OpFamily& f = op_family(spec);
    std::set<double> values;
    for (uint64_t seed = 1; seed <= 200; ++seed) {
      const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 100);
      const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
      values.insert(as_case(any).attrs.at(attr));
    }
    return values;
  };
  // eps (attr 0) a range, n (attr 1) an integer range.
  const std::set<double> eps = drawn(parse_spec(kDomainSpec, "shrink.yaml", "", "{eps: 1.0e-4}"), 0);
  EXPECT_EQ(eps, (std::set<double>{1e-4}));
  const std::set<double> sub =
      drawn(parse_spec(kDomainSpec, "shrink.yaml", "", "{eps: [1.0e-5, 2.0e-5]}"), 0);
  EXPECT_GT(sub.size(), 10u);
  EXPECT_GE(*sub.begin(), 1e-5);
  EXPECT_LE(*sub.rbegin(), 2e-5);
  EXPECT_EQ(drawn(parse_spec(kDomainSpec, "shrink.yaml", "", "{n: {one_of: [3, 7]}}"), 1),
            (std::set<double>{3, 7}));
  // A profile's domain narrows; --domain applies after it.
  const std::string profiled = std::string(kDomainSpec) + "profiles:\n  small:\n    domain: {n: 4}\n";
  EXPECT_EQ(drawn(parse_spec(profiled, "shrink.yaml", "small", ""), 1), (std::set<double>{4}));
  EXPECT_EQ(drawn(parse_spec(profiled, "shrink.yaml", "small", "{n: [8, 8]}"), 1), (std::set<double>{8}));
  // A named choice takes names; the case keeps the declaration's index.
  const std::string named = rich_with_attrs("  attrs: {act: {one_of: [gelu, tanh, relu]}}\n");
  EXPECT_EQ(drawn(parse_spec(named, "rich.yaml", "", "{act: [relu, tanh]}"), 0), (std::set<double>{1, 2}));
  EXPECT_EQ(drawn(parse_spec(named, "rich.yaml", "", "{act: relu}"), 0), (std::set<double>{2}));
  auto error = [](const std::string& spec, const std::string& domain) {
    return kprop::testing::spec_load_error(spec, "op.yaml", "", domain);
  };
  EXPECT_EQ(error(kDomainSpec, "{eps: [1.0e-6, 1.0e-2]}"),
            "--domain:1:7: op.attrs declares attr eps [1e-06, 0.001]; [1e-06, 0.01] is not within it (a "
            "domain narrows an attr)");
  EXPECT_EQ(
      error(kDomainSpec, "{n: 2.5}"),
      "--domain:1:5: op.attrs declares attr n [2, 9] (integers); 2.5 is not one of its values (a domain "
      "narrows an attr)");
  EXPECT_EQ(error(kDomainSpec, "{n: {range: [2, 9], int: true}}"),
            "--domain:1:21: unknown key 'int' in attr n in a domain (int: and near: stay op.attrs'); valid: "
            "one_of, range");
  EXPECT_EQ(error(kDomainSpec, "{eps: {one_of: [gelu]}}"), "--domain:1:7: attr eps takes numbers, not names");
  EXPECT_EQ(error(named, "{act: [relu, sigmoid]}"),
            "--domain:1:14: attr act: 'sigmoid' is not one of its choices; valid: gelu, tanh, relu");
  EXPECT_EQ(error(named, "{act: [relu, relu]}"), "--domain:1:14: attr act.one_of lists 'relu' twice");
  EXPECT_EQ(error(named, "{act: []}"),
            "--domain:1:7: attr act is a named choice: give some of its names (gelu, tanh, relu)");
  const std::string listed = rich_with_attrs("  attrs: {k: {one_of: [1, 2, 4]}}\n");
  EXPECT_EQ(error(listed, "{k: [1, 2]}"),
            "--domain:1:5: op.attrs declares attr k one of 1, 2, 4: a domain narrows it to some of those "
            "values ({one_of: [...]}), not a range");
  // A case stored under the whole declaration replays in a narrowed run
  // (the corpus file is held to the declaration, as its dtype is).
  const Spec whole = parse_spec(kDomainSpec, "shrink.yaml");
  const OpFamily& f = op_family(whole);
  const std::vector<uint8_t> bytes = f.seed_bytes(whole.domain, 3, 100);
  const AnyCase stored = f.from_bytes(bytes.data(), bytes.size(), whole.domain);
  const YAML::Node file = Traits::to_yaml(as_case(stored));
  const double n = as_case(stored).attrs[1];
  const Spec narrow =
      parse_spec(kDomainSpec, "shrink.yaml", "", fmt::format("{{n: {}, eps: 1.0e-3}}", n == 9 ? 2 : n + 1));
  const AnyCase replayed = op_family(narrow).from_yaml(file);
  EXPECT_EQ(as_case(replayed).attrs, as_case(stored).attrs);
  // It lies outside the run's domain, which says so in the run's terms (a
  // Python replay leaves such a case alone, with this reason).
  const std::string outside = op_family(narrow).in_domain(replayed, narrow.domain);
  EXPECT_EQ(outside.rfind("attr eps = ", 0), 0u) << outside;
  EXPECT_NE(outside.find(" is not a value this run's domain draws (one of 0.001)"), std::string::npos)
      << outside;
}

// A relation over a transform that can never apply in the domain (a
// permutation of a dim fixed at 1, a slice of a dim with no smaller valid
// extent): n/a where --domain narrowed it (it gave up, exit 2, every case
// discarded as "transform permute_T does not apply"), and the spec's error
// in its own domain, at the transform.
TEST(OpDomain, ARelationWhoseTransformCannotApplyIsNotApplicableOrAnError) {
  std::string text = kDomainSpec;
  text.replace(text.find("  - matches_reference\n"), 22,
               "  - matches_reference\n  - name: perm\n    transform: permute_T\n"
               "    expect: close(transformed.target.y, target.y[transform.perm], k=2)\n"
               "  - name: slice\n    transform: slice_T\n"
               "    expect: close(transformed.target.y, target.y[transform.index], k=2)\n");
  for (const InvariantUse& u : parse_spec(text, "shrink.yaml").invariants)
    EXPECT_EQ(u.unobservable, "") << u.name;
  const Spec narrowed = parse_spec(text, "shrink.yaml", "", "{T: 1}");
  ASSERT_EQ(narrowed.invariants.size(), 3u);
  EXPECT_EQ(
      narrowed.invariants[1].unobservable,
      "--domain leaves it nothing to observe: transform permute_T needs dim T to reach 2 (it is at most 1: "
      "no permutation moves anything)");
  EXPECT_EQ(
      narrowed.invariants[2].unobservable,
      "--domain leaves it nothing to observe: transform slice_T needs dim T to take a valid extent below "
      "its largest, 1 (a slice keeps fewer indices)");
  // Still n/a when run: never discarded case after case.
  const RunReport r = run_spec(narrowed, scratch_run("reference", 1, 20, "kprop_op_test_findings"));
  EXPECT_EQ(r.status, RunStatus::passed) << r.detail;
  EXPECT_EQ(r.invariants.at(1).status, InvariantStatus::not_applicable);
  // In the spec's own domain it is the spec's error, at the transform.
  std::string fixed = text;
  fixed.replace(fixed.find("T: [1, 8]"), 9, "T: [1, 1]");
  EXPECT_EQ(load_error(fixed),
            "op.yaml:26:16: invariant perm: transform permute_T needs dim T to reach 2 (it is at most 1: no "
            "permutation moves anything)");
}

// ---------------------------------------------------------------- load-time errors of the domain
std::string rich_with(const std::string& from, const std::string& to) {
  std::string s = kRichSpec;
  const size_t at = s.find(from);
  if (at == std::string::npos) throw std::logic_error("no '" + from + "' in kRichSpec");
  return s.replace(at, from.size(), to);
}

TEST(OpDomainDecl, TheRichSpecLoads) {
  EXPECT_EQ(load_error(kRichSpec), "");
}

// The largest case is computed, not built: a declaration of 2^24 x 2^24
// was a std::bad_alloc (exit 3) after gigabytes, and a fixed extent of 2^62
// wrapped the element count to a 4-element tensor that passed.
TEST(OpDomainDecl, SizesAreCheckedWithoutBuildingTheCase) {
  EXPECT_LOAD_ERROR(rich_with("D: [1, 6]", "D: [1, 4194304]"),
                    "op.yaml:5:5: the largest case of this domain needs ~");
  // Listed values: 2^24 in all at most (five such dims with relations took 2.6 GB).
  EXPECT_LOAD_ERROR(rich_with("D: [1, 6]", "D: [1, 16777216]"),
                    "op.yaml:5:5: op.dims: the dims take 16777249 values in all, over 2^24");
  EXPECT_LOAD_ERROR(rich_with("tok: {shape: [Nk]", "tok: {shape: [Nk, 4611686018427387905]"),
                    "op.yaml:15:23: input tok: a fixed extent must be in [1, 2^24], as a dim's range (got "
                    "4611686018427387905)");
  EXPECT_LOAD_ERROR(
      rich_with("table: {shape: [V, D]}", "table: {shape: [V, D, 1, 1, 1, 1, 1]}"),
      "op.yaml:13:20: input table.shape has 7 axes; a shape has at most 6 (KPROP_MAX_DIMS: the axes "
      "a kernel's tensor view carries, include/kprop/abi.h)");
}

TEST(OpDomainDecl, AListThatNamesAValueTwiceIsAnError) {
  EXPECT_LOAD_ERROR(rich_with("D: [1, 6]", "D: {one_of: [2, 4, 2]}"),
                    "op.yaml:9:24: dim D.one_of lists 2 twice");
  const std::string specials =
      load_error(rich_with("specials: {rate: 0.2}", "specials: {rate: 0.2, values: [nan, inf, nan]}"));
  EXPECT_EQ(specials.rfind("op.yaml:12:", 0), 0u) << specials;
  EXPECT_NE(specials.find("lists 'nan' twice"), std::string::npos) << specials;
}

TEST(OpDomainDecl, AnIntegerAttrStaysWithinTwoToThe53) {
  const std::string s =
      rich_with("  relations:", "  attrs: {n: {range: [1, 1e300], int: true}}\n  relations:");
  EXPECT_NE(load_error(s).find("is an integer attr; 1e+300 is outside [-2^53, 2^53]"), std::string::npos)
      << load_error(s);
}

// An op's domain is its declaration: a top-level domain: was refused with
// "it takes no keys", which profiles and --domain contradict.
TEST(OpDomainDecl, ATopLevelDomainSaysWhereTheDomainIs) {
  EXPECT_LOAD_ERROR(std::string(kRichSpec) + "domain: {B: [1, 2]}\n",
                    "op.yaml:27:1: family op declares its domain under 'op:'");
}

// A corpus file holds the contract's dtypes and structured values as a
// drawn case does: an id out of range, or a dtype the declaration does not
// list, is a bad case (it was replayed: a target crash, a false failure or
// a pass).
TEST(OpDomainDecl, ACorpusCaseOutsideTheContractIsABadCase) {
  const Spec spec = parse_spec(kRichSpec, "rich.yaml");
  const OpFamily& f = op_family(spec);
  const std::vector<uint8_t> zeros(64, 0);
  const Case good = as_case(f.from_bytes(zeros.data(), zeros.size(), spec.domain));
  const auto decode_error = [&](const Case& c) {
    YAML::Emitter out;
    out << Traits::to_yaml(c);
    try {
      f.from_yaml(YAML::Load(out.c_str()));
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(decode_error(good), "");
  Case bad_id = good;
  bad_id.inputs[input_index(*good.decl, "tok")][0] = 5;  // ids below 5
  EXPECT_NE(decode_error(bad_id).find("input tok: id 5 at 0 is outside [0, 5)"), std::string::npos)
      << decode_error(bad_id);
  Case bad_dtype = good;
  bad_dtype.dtype = DType::f16;
  EXPECT_NE(decode_error(bad_dtype).find("dtype f16 is not one the op declares (did the spec drop it"),
            std::string::npos)
      << decode_error(bad_dtype);
  // The hard relations hold in every domain (Nk >= Nq): a case breaking one
  // was replayed. (Its file's dims edited: they are checked before the
  // inputs' values, which keep the old extents.)
  YAML::Node bad_relation = Traits::to_yaml(good);
  bad_relation["dims"]["Nq"] = good.dims[size_t(good.decl->dim_index("Nk"))] + 1;
  std::string relation_error;
  try {
    f.from_yaml(bad_relation);
  } catch (const std::exception& e) {
    relation_error = e.what();
  }
  EXPECT_NE(relation_error.find("op.relations: Nk >= Nq does not hold"), std::string::npos) << relation_error;
}

// An attr's declaration (one_of, range) is the contract's, as the relations
// are: a value outside it was replayed. A narrower domain (--domain, a
// profile's) changes what is drawn, not what replays: a stored f64 case of a
// spec declaring [f32, f64] replays under --domain '{dtypes: [f32]}' (it was
// "dtype f64 is not declared", a corpus file that could not be read).
TEST(OpDomainDecl, ACorpusCaseIsCheckedAgainstTheContractNotTheDomain) {
  const std::string with_attr =
      rich_with("  relations:", "  attrs: {n: {one_of: [2, 4]}, t: {range: [0, 1]}}\n  relations:");
  const Spec spec = parse_spec(with_attr, "rich.yaml");
  const Spec narrowed = parse_spec(with_attr, "rich.yaml", "", "{dtypes: [f32]}");
  const std::vector<uint8_t> zeros(64, 0);
  const Case good = as_case(op_family(spec).from_bytes(zeros.data(), zeros.size(), spec.domain));
  const auto decode_error = [&](const Spec& s, const YAML::Node& n) {
    try {
      op_family(s).from_yaml(n);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  YAML::Node f64 = Traits::to_yaml(good);
  f64["dtype"] = "f64";
  for (const char* floating : {"x", "table"}) f64["inputs"][floating]["dtype"] = "f64";
  EXPECT_EQ(decode_error(spec, f64), "");
  EXPECT_EQ(decode_error(narrowed, f64), "");
  YAML::Node f16 = YAML::Clone(f64);
  f16["dtype"] = "f16";
  EXPECT_NE(decode_error(narrowed, f16).find("dtype f16 is not one the op declares (did the spec drop it"),
            std::string::npos);
  for (const auto& [attr, value, message] :
       {std::tuple{"n", "3", "attr n = 3 is not one the declaration allows (one of 2, 4)"},
        {"t", "1.5", "attr t = 1.5 is not one the declaration allows ([0, 1])"}}) {
    YAML::Node bad = YAML::Clone(f64);
    bad["attrs"][attr] = value;
    EXPECT_NE(decode_error(spec, bad).find(message), std::string::npos) << decode_error(spec, bad);
  }
}

// A misspelled family is that error, with `op` among the names it suggests
// (it was left out, and the op: section was blamed instead).
TEST(OpDomainDecl, AMisspelledFamilyIsSuggestedOp) {
  EXPECT_LOAD_ERROR(rich_with("family: op", "family: opp"),
                    "op.yaml:2:9: unknown family 'opp' (did you mean 'op'?)");
}

TEST(OpDomainDecl, RelationOnAnUnknownDim) {
  EXPECT_LOAD_ERROR(rich_with(R"("Nk >= Nq")", R"("Nk >= Nx")"),
                    "op.yaml:10:22: op.relations: 'Nx' is not a declared dim (did you mean 'Nq'?)");
  EXPECT_LOAD_ERROR(rich_with("equal: [Nq, Nk]", "equal: [Nq, K]"),
                    "op.yaml:10:40: op.relations: 'K' is not a declared dim");
}

TEST(OpDomainDecl, RelationSyntax) {
  EXPECT_LOAD_ERROR(rich_with(R"("Nk >= Nq")", R"("Nk => Nq")"),
                    "op.yaml:10:15: op.relations: 'Nk => Nq' must be A OP B");
  EXPECT_LOAD_ERROR(rich_with(R"("Nk >= Nq")", R"("Nk >= Nk")"),
                    "op.yaml:10:15: op.relations: a relation between a dim and itself");
  EXPECT_LOAD_ERROR(rich_with("rate: 0.5", "rate: 1.5"),
                    "op.yaml:10:51: op.relations: rate must be in (0, 1]");
  EXPECT_LOAD_ERROR(rich_with("{equal: [Nq, Nk], rate: 0.5}", "{same: [Nq, Nk]}"),
                    "op.yaml:10:28: unknown key 'same' in op.relations entry");
}

TEST(OpDomainDecl, UnsatisfiableRelations) {
  // A plain contradiction, reported at the relation that completes it.
  EXPECT_LOAD_ERROR(rich_with(R"("Nk >= Nq")", R"("B > V", "V > B")"),
                    "op.yaml:10:24: op.relations: V > B cannot hold with the dims' ranges and the relations "
                    "before it");
  // Disjoint ranges: Nk in [1, 9] never equals V in [10, 12].
  std::string s = rich_with("V: [1, 12]", "V: [10, 12]");
  s.replace(s.find(R"("Nk >= Nq")"), 10, R"("Nk == V")");
  EXPECT_LOAD_ERROR(s, "op.yaml:10:15: op.relations: Nk == V cannot hold");
  // A chain through ranges: Nq > Nk contradicts Nk >= Nq.
  EXPECT_LOAD_ERROR(rich_with(R"("Nk >= Nq")", R"("Nk >= Nq", "Nq > Nk")"),
                    "op.yaml:10:27: op.relations: Nq > Nk cannot hold");
}

// An equality at a rate is forced in some cases: it must hold with every
// hard relation, whichever comes first. Declared before the one it
// contradicts, it loaded and was silently never forced.
TEST(OpDomainDecl, AnEqualityAtARateIsCheckedAgainstHardRelationsInAnyOrder) {
  EXPECT_LOAD_ERROR(
      rich_with(R"(["Nk >= Nq", {equal: [Nq, Nk], rate: 0.5}])",
                R"([{equal: [Nq, Nk], rate: 0.5}, "Nq > Nk"])"),
      "op.yaml:10:15: op.relations: Nq == Nk cannot hold with the dims' ranges and the relations "
      "that always hold");
  EXPECT_LOAD_ERROR(rich_with(R"(["Nk >= Nq", {equal: [Nq, Nk], rate: 0.5}])",
                              R"(["Nq > Nk", {equal: [Nq, Nk], rate: 0.5}])"),
                    "op.yaml:10:26: op.relations: Nq == Nk cannot hold");
  // Consistent in either order: loads.
  EXPECT_EQ(load_error(rich_with(R"(["Nk >= Nq", {equal: [Nq, Nk], rate: 0.5}])",
                                 R"([{equal: [Nq, Nk], rate: 0.5}, "Nk >= Nq"])")),
            "");
}

TEST(OpDomainDecl, IndexBoundNotADimOrPositive) {
  EXPECT_LOAD_ERROR(rich_with("{ids: {below: V}}", "{ids: {below: W}}"),
                    "op.yaml:14:68: input ids.values.ids.below: 'W' is neither a dim nor a positive integer");
  EXPECT_LOAD_ERROR(rich_with("{ids: {below: 5}}", "{ids: {below: 0}}"),
                    "op.yaml:15:58: input tok.values.ids.below must be in [1, 2^31] (got 0)");
  EXPECT_LOAD_ERROR(rich_with("{ids: {below: 5}}", "ids"),
                    "op.yaml:15:44: input tok.values.ids needs below: V");
}

TEST(OpDomainDecl, MaskShapeAndKindErrors) {
  // A causal mask needs rows and cols.
  EXPECT_LOAD_ERROR(rich_with("mask: {shape: [Nq, Nk]", "mask: {shape: [Nk]"),
                    "op.yaml:17:34: input mask.values.causal: a causal mask needs 2 axes [.., rows, cols]; "
                    "shape [Nk] has 1");
  // A floating kind for a bool tensor, a mask kind for a floating one.
  EXPECT_LOAD_ERROR(rich_with("mask: {shape: [Nq, Nk], values: [causal",
                              "mask: {shape: [Nq, Nk], dtype: bool, values: [normal"),
                    "op.yaml:17:51: input mask: value kind 'normal' is not for a bool tensor; valid: causal, "
                    "padding, bernoulli");
  EXPECT_LOAD_ERROR(rich_with("values: [normal, denormal]", "values: [normal, padding]"),
                    "op.yaml:12:65: input x: value kind 'padding' is not for a floating tensor");
  EXPECT_LOAD_ERROR(rich_with("{causal: {align: bottom_right}}", "{causal: {align: bottom}}"),
                    "op.yaml:17:63: input mask.values.causal.align: 'bottom'; valid: top_left, bottom_right");
  EXPECT_LOAD_ERROR(rich_with("{bernoulli: {p: 0.3}}", "{bernoulli: {p: 3}}"),
                    "op.yaml:17:104: input mask.values.bernoulli.p must be in [0, 1] (got 3)");
  EXPECT_LOAD_ERROR(rich_with("values: permutation}", "values: {permutation: {axis: 2}}}"),
                    "op.yaml:16:69: input perm.values.permutation.axis 2 is out of range for shape [B, Nk]");
}

TEST(OpDomainDecl, DtypeAndSpecialsErrors) {
  EXPECT_LOAD_ERROR(
      rich_with("dtype: [i32, i64]", "dtype: [i32, f32]"),
      "op.yaml:14:40: input ids.dtype mixes i32 and f32: a tensor is floating, integer or bool");
  EXPECT_LOAD_ERROR(rich_with("dtype: [i32, i64]", "dtype: [i32, u16]"),
                    "op.yaml:14:40: input ids.dtype: unknown dtype 'u16'");
  EXPECT_LOAD_ERROR(
      rich_with("tok: {shape: [Nk], dtype: i32,", "tok: {shape: [Nk], dtype: i32, specials: 0.1,"),
      "op.yaml:15:46: input tok.specials: an integer input lists its special values: {rate: R, values: "
      "[-100, ...]}");
  EXPECT_LOAD_ERROR(rich_with("specials: {rate: 0.2}", "specials: {rate: 0}"),
                    "op.yaml:12:93: input x.specials.rate must be in (0, 1] (got 0)");
  EXPECT_LOAD_ERROR(rich_with("specials: {rate: 0.2}", "specials: {rate: 0.2, values: [nan, +inf]}"),
                    "op.yaml:12:112: input x.specials.values: unknown special value '+inf'");
  EXPECT_LOAD_ERROR(rich_with("specials: {rate: 0.2}", "specials: {rate: 0.2, vals: [nan]}"),
                    "op.yaml:12:98: unknown key 'vals' in input x.specials");
  // An integer tensor without values. An integer output loads: its
  // reference's values are checked per case (integer_output_test.cpp).
  EXPECT_LOAD_ERROR(rich_with("tok: {shape: [Nk], dtype: i32, values: {ids: {below: 5}}}",
                              "tok: {shape: [Nk], dtype: i32}"),
                    "op.yaml:15:10: input tok (i32) needs values: ids, permutation, integer");
  EXPECT_EQ(load_error(rich_with("e: {shape: [B, Nq, D]}", "e: {shape: [B, Nq, D], dtype: i32}")), "");
  // Half dtypes are floating: listed with f32, as an output's dtype; mixing them with ints is an error.
  EXPECT_EQ(load_error(rich_with("e: {shape: [B, Nq, D]}", "e: {shape: [B, Nq, D], dtype: bf16}")), "");
  EXPECT_LOAD_ERROR(
      rich_with("dtype: [i32, i64]", "dtype: [i32, f16]"),
      "op.yaml:14:40: input ids.dtype mixes i32 and f16: a tensor is floating, integer or bool");
}

// i8 and u8 inputs (quantized weights, byte tokens) hold only what their
// type holds: a kind that draws past it is a load error at the values (the
// values would wrap on the way to the kernel); one within it loads.
TEST(OpDomainDecl, ASmallIntegerDtypeHoldsEveryValueItsKindsDraw) {
  EXPECT_EQ(load_error(rich_with("ids: {shape: [B, Nq], dtype: [i32, i64]",
                                 "ids: {shape: [B, Nq], dtype: [i8, u8]")),
            "");
  EXPECT_EQ(load_error(rich_with("perm: {shape: [B, Nk], dtype: i64", "perm: {shape: [B, Nk], dtype: i8")),
            "");
  EXPECT_LOAD_ERROR(rich_with("tok: {shape: [Nk], dtype: i32, values: {ids: {below: 5}}}",
                              "tok: {shape: [Nk], dtype: u8, values: {ids: {below: 300}}}"),
                    "op.yaml:15:43: input tok.values.ids draws values in [0, 299], outside u8 ([0, 255])");
  EXPECT_LOAD_ERROR(
      rich_with("tok: {shape: [Nk], dtype: i32, values: {ids: {below: 5}}}",
                "tok: {shape: [Nk], dtype: [i32, i8], values: {integer: {lo: -128, hi: 128}}}"),
      "op.yaml:15:50: input tok.values.integer draws values in [-128, 128], outside i8 ([-128, 127])");
  EXPECT_LOAD_ERROR(rich_with("tok: {shape: [Nk], dtype: i32, values: {ids: {below: 5}}}",
                              "tok: {shape: [Nk], dtype: u8, values: {integer: {lo: -1, hi: 3}}}"),
                    "op.yaml:15:43: input tok.values.integer draws values in [-1, 3], outside u8 ([0, 255])");
  EXPECT_LOAD_ERROR(
      rich_with("    mask:", "    wide: {shape: [200], dtype: i8, values: permutation}\n    mask:"),
      "op.yaml:17:45: input wide.values.permutation draws values in [0, 199], outside i8");
}

// ---------------------------------------------------------------- shrinking in the domain
// Greedy shrinking with the raw shrinker of a failure that needs D >= 3
// (D tied to E by E >= D and D >= E, so neither moves alone, and to T by an
// equality at a rate): every candidate stays in the domain; the end is
// D = 3, E = 3 (lowered with D), T = 1, with ids all 0, the permutation the identity, the padding
// mask all true and no special value left in x.
const char* const kCoupledSpec = R"(spec: coupled
family: op
op:
  dims: {T: [1, 6], D: [1, 12], E: [1, 12], V: [1, 7]}
  relations: ["E >= D", "D >= E", {equal: [T, D], rate: 0.5}]
  inputs:
    x: {shape: [T, D], dtype: [f32, f64], values: [normal, denormal, integer], specials: 0.3}
    ids: {shape: [T], dtype: i32, values: {ids: {below: V}}}
    perm: {shape: [E], dtype: i64, values: permutation}
    mask: {shape: [T, E], values: [padding, bernoulli]}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: x * 2
target: reference
invariants:
  - matches_reference
)";

TEST(OpDomainShrink, CoupledDimsIndexTensorsAndMasksShrinkToTheMinimalCase) {
  const Spec spec = parse_spec(kCoupledSpec, "coupled.yaml");
  const OpFamily& f = op_family(spec);
  auto fails = [](const Case& c) { return dim(c, "D") >= 3; };
  const Case start = drawn_case(f, spec.domain, [&](const Case& c) {
    bool special = false;
    for (double v : values_of(c, "x")) special = special || !std::isfinite(v);
    return dim(c, "D") > 5 && dim(c, "T") > 1 && special && dim(c, "V") > 2 &&
           kind_of(c, "mask") == "padding";
  });
  ASSERT_EQ(Traits::in_domain(start, spec.domain), "");
  const Case c = shrink_while(start, spec.domain, fails).c;
  EXPECT_EQ(dim(c, "D"), 3);
  EXPECT_EQ(dim(c, "E"), 3);
  EXPECT_EQ(dim(c, "T"), 1);
  EXPECT_EQ(dim(c, "V"), 1);
  for (double v : values_of(c, "x")) EXPECT_EQ(v, 0);
  for (double v : values_of(c, "ids")) EXPECT_EQ(v, 0);
  EXPECT_EQ(values_of(c, "perm"), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(values_of(c, "mask"), (std::vector<double>{1, 1, 1}));
}

// Through the runner, with a C++ target wrong only when D >= 3 (it drops
// the third column): the counterexample is D = 3, E = 3, T = 1, V = 1.
TEST(OpDomainShrink, RunnerShrinksAPlantedBugNeedingDAtLeast3) {
  Spec spec = parse_spec(kCoupledSpec, "coupled.yaml");
  const auto f = plant_mutants(spec, [](OpFamily& planted) {
    planted.mutant("third_column_dropped", "y[:, 2] is 0 when D >= 3", [](const Case& c) {
      Result r = op::reference(c);
      const int64_t T = dim(c, "T"), D = dim(c, "D");
      for (int64_t t = 0; t < T && D >= 3; ++t) r.outputs[0][static_cast<size_t>(t * D + 2)] = 0;
      return r;
    });
  });
  expect_shrunk_to_dims(spec, *f,
                        scratch_run("third_column_dropped", 20261123, 300, "kprop_op_domain_findings"),
                        {{"D", 3}, {"E", 3}, {"T", 1}, {"V", 1}});
}

// A failure caused by a NaN keeps one NaN and zeroes the rest.
TEST(OpDomainShrink, SpecialValuesShrinkToTheOneThatMatters) {
  const Spec spec = parse_spec(kCoupledSpec, "coupled.yaml");
  const OpFamily& f = op_family(spec);
  auto fails = [](const Case& c) {
    for (double v : values_of(c, "x"))
      if (std::isnan(v)) return true;
    return false;
  };
  Case c = drawn_case(f, spec.domain, fails);
  c = shrink_while(c, spec.domain, fails).c;
  EXPECT_EQ(dim(c, "T"), 1);
  EXPECT_EQ(dim(c, "D"), 1);
  ASSERT_EQ(values_of(c, "x").size(), 1u);
  EXPECT_TRUE(std::isnan(values_of(c, "x")[0]));
}

// A value that must be large (an overflow past |x| = 100) shrinks in
// magnitude, its digits kept: a drawn 5e8 stayed 5e8 (one digit, nothing
// simpler by digits), where 500 shows the bug as well.
TEST(OpDomainShrink, ALargeValueShrinksTowardOneInMagnitude) {
  const Spec spec = parse_spec(kCoupledSpec, "coupled.yaml");
  const OpFamily& f = op_family(spec);
  auto fails = [](const Case& c) {
    for (double v : values_of(c, "x"))
      if (std::isfinite(v) && std::fabs(v) > 100) return true;
    return false;
  };
  Case c = drawn_case(f, spec.domain, [](const Case& k) { return k.dtype == DType::f32; });
  c.inputs[input_index(*c.decl, "x")][0] = -5e8;
  c = shrink_while(c, spec.domain, fails).c;
  ASSERT_EQ(values_of(c, "x").size(), 1u);
  EXPECT_EQ(values_of(c, "x")[0], 500);
}

// The corpus file names the kind of each index tensor and mask and holds
// them as integers; it decodes back bit for bit (also a bottom-right causal
// mask, which shares its kind's name with the top-left one).
TEST(OpDomainCorpus, NewKindsRoundTrip) {
  const Spec spec = parse_spec(kRichSpec, "rich.yaml");
  const OpFamily& f = op_family(spec);
  for (const char* kind : {"causal", "causal_br", "padding", "bernoulli"}) {
    const Case c = drawn_case(f, spec.domain, [&](const Case& k) {
      bool special = false;
      for (double v : values_of(k, "x")) special = special || !std::isfinite(v);
      return kind_of(k, "mask") == kind && special && dim(k, "Nk") > dim(k, "Nq");
    });
    YAML::Emitter out;
    out << Traits::to_yaml(c);
    const std::string text = out.c_str();
    EXPECT_NE(text.find("kind: permutation"), std::string::npos) << text;
    EXPECT_NE(text.find("dtype: bool"), std::string::npos) << text;
    const Case back = round_trip(f, c);
    EXPECT_TRUE(same_case(back, c)) << kind << "\n" << text;
    EXPECT_EQ(kind_of(back, "mask"), kind);
  }
  // A corpus file whose mask is not what its kind says is refused by the domain check.
  Case c = drawn_case(f, spec.domain,
                      [&](const Case& k) { return kind_of(k, "mask") == "causal" && dim(k, "Nk") > 1; });
  c.inputs[input_index(*c.decl, "mask")][1] = 1;  // above the diagonal
  EXPECT_NE(Traits::in_domain(c, spec.domain), "");
}

// ---------------------------------------------------------------- sentinels: specials of integer inputs
// Cross-entropy's ignore_index -100 in a labels tensor, a padding id -1:
// values the kernel must treat specially, drawn as floating specials are,
// and kept sentinels by the domain check, the corpus codec, case surgery
// (permute/slice remap the ids around them) and shrinking.
const char* const kSentinelSpec = R"(spec: sentinel
family: op
op:
  dims: {N: [1, 12], C: [1, 9]}
  inputs:
    logits: {shape: [N, C], dtype: [f32, f64]}
    labels: {shape: [N], dtype: [i32, i64], values: {ids: {below: C}}, specials: {rate: 0.4, values: [-100, -1]}}
    q: {shape: [N], dtype: i8, values: {integer: {lo: 1, hi: 5}}, specials: {rate: 0.4, values: [-128]}}
  outputs:
    y: {shape: [N]}
  reference:
    y: where(labels == -100, 0, where(labels == -1, 1, 2)) + 0 * q
target: reference
invariants:
  - matches_reference
)";

TEST(OpSentinels, DrawnAtTheirRateInTheDomainAndThroughTheCorpus) {
  const Spec spec = parse_spec(kSentinelSpec, "sentinel.yaml");
  const OpFamily& f = op_family(spec);
  int with_100 = 0, with_1 = 0, with_q = 0, clean = 0;
  const int n = 400;
  for (uint64_t seed = 1; seed <= n; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 100);
    const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
    const Case& c = as_case(any);
    ASSERT_EQ(f.in_domain(any, spec.domain), "") << seed;
    bool special = false;
    for (double v : values_of(c, "labels")) {
      ASSERT_TRUE(v == -100 || v == -1 || (v >= 0 && v < static_cast<double>(dim(c, "C")))) << v;
      with_100 += v == -100, with_1 += v == -1, special = special || v < 0;
    }
    for (double v : values_of(c, "q")) {
      ASSERT_TRUE(v == -128 || (v >= 1 && v <= 5)) << v;
      with_q += v == -128;
    }
    clean += !special;
    // The corpus file holds the sentinels and reads back the same case.
    const Case back = round_trip(f, c);
    ASSERT_TRUE(back == c) << seed;
  }
  EXPECT_GT(with_100, 0);
  EXPECT_GT(with_1, 0);
  EXPECT_GT(with_q, 0);
  EXPECT_GT(clean, n / 3) << "specials are on in about half the cases";
  // An id out of range that is no sentinel is still refused.
  Case c = drawn_case(f, spec.domain, [](const Case&) { return true; });
  c.inputs[input_index(*c.decl, "labels")][0] = -2;
  EXPECT_NE(Traits::in_domain(c, spec.domain).find("outside [0,"), std::string::npos);
  c.inputs[input_index(*c.decl, "labels")][0] = -100;
  c.inputs[input_index(*c.decl, "q")][0] = 0;  // below the integer kind's lo, no sentinel
  EXPECT_NE(Traits::in_domain(c, spec.domain).find("outside [1, 5]"), std::string::npos);
}

// A floating input's specials may list finite numbers beside the named
// ones: 254 and 0.5 put a quantizer's x / 2 on rounding ties (127, 0.25
// away from none: x / 2 = 127 exactly, 0.25; with integers in [-4, 4] the
// only ties, ±0.5 and ±1.5, sit where half-even and half-away agree half of
// the time). Drawn among the named ones, the domain keeps them, the corpus
// reads them back; each must be exact in every dtype of the input.
TEST(OpSpecials, FiniteValuesAreDrawnBesideTheNamedOnes) {
  const std::string text = R"(spec: quant
family: op
op:
  dims: {C: [1, 4], K: [1, 8]}
  inputs:
    x: {shape: [C, K], dtype: [f32, f16], values: [{integer: {lo: -4, hi: 4}}], specials: {rate: 0.3, values: [254, 0.5, nan]}}
  outputs:
    q: {shape: [C, K]}
  reference:
    q: round(x / 2)
target: reference
invariants: [matches_reference]
)";
  const Spec spec = parse_spec(text, "quant.yaml");
  const OpFamily& f = op_family(spec);
  int with_254 = 0, with_half = 0, with_nan = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 100);
    const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
    const Case& c = as_case(any);
    ASSERT_EQ(f.in_domain(any, spec.domain), "") << seed;
    for (double v : values_of(c, "x")) {
      ASSERT_TRUE(std::isnan(v) || v == 254 || v == 0.5 || (v == std::floor(v) && std::fabs(v) <= 4)) << v;
      with_254 += v == 254, with_half += v == 0.5, with_nan += std::isnan(v);
    }
    // (By its text: a NaN is unequal to itself.)
    YAML::Emitter a, b;
    a << Traits::to_yaml(c);
    b << Traits::to_yaml(round_trip(f, c));
    ASSERT_EQ(std::string(a.c_str()), std::string(b.c_str())) << seed;
  }
  EXPECT_GT(with_254, 0);
  EXPECT_GT(with_half, 0);
  EXPECT_GT(with_nan, 0);
  const auto with = [&](const std::string& values) {
    std::string t = text;
    t.replace(t.find("[254, 0.5, nan]"), 15, values);
    return t;
  };
  EXPECT_LOAD_ERROR(
      with("[0.1, nan]"),
      "op.yaml:6:112: input x.specials.values: 0.1 is not exact in f32 (it would reach the kernel "
      "as 0.10000000149011612); list values the dtype holds");
  EXPECT_LOAD_ERROR(with("[65520]"), "op.yaml:6:112: input x.specials.values: 65520 is not exact in f16");
  EXPECT_LOAD_ERROR(with("[1e400]"), "op.yaml:6:112: input x.specials.values: 1e400 is no finite number");
  EXPECT_LOAD_ERROR(with("[254, 254]"), "op.yaml:6:117: input x.specials.values lists 254 twice");
}

// permute_C and slice_C remap the ids into C; a sentinel stays as it is,
// and the transform still applies (a sentinel is no id pointing at a
// dropped index). Shrinking C keeps them too.
TEST(OpSentinels, TransformsRemapTheIdsAndKeepTheSentinels) {
  const Spec spec = parse_spec(kSentinelSpec, "sentinel.yaml");
  const OpFamily& f = op_family(spec);
  int permuted = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const Case c = drawn_case(f, spec.domain, [&](const Case& k) {
      bool sentinel = false, id = false;
      for (double v : values_of(k, "labels")) sentinel = sentinel || v < 0, id = id || v >= 0;
      return sentinel && id && dim(k, "C") >= 2 + int(seed % 3);
    });
    expr::TensorMap out;
    out.want("transform.perm");
    out.want("transform.applies");
    const Case s = Traits::transform("permute_dim1", c, Values{}, seed, out);
    ASSERT_EQ(Traits::in_domain(s, spec.domain), "") << seed;
    ASSERT_NE(out.find("transform.applies"), nullptr);
    EXPECT_EQ(out.find("transform.applies")->data.at(0), 1) << seed;
    const auto& perm = out.find("transform.perm")->data;
    const auto& before = values_of(c, "labels");
    const auto& after = values_of(s, "labels");
    for (size_t r = 0; r < before.size(); ++r) {
      if (before[r] < 0) {
        EXPECT_EQ(after[r], before[r]) << "a sentinel stays";
        continue;
      }
      // The permuted case's class after[r] is the original's class before[r].
      EXPECT_EQ(perm.at(static_cast<size_t>(after[r])), before[r]);
      ++permuted;
    }
    // Keeping the first class only: every id becomes 0 or is dropped, every sentinel stays.
    std::string changed;
    const Case k = keep_indices(c, 1, {0}, &changed);
    ASSERT_EQ(Traits::in_domain(k, spec.domain), "");
    for (size_t r = 0; r < before.size(); ++r)
      EXPECT_EQ(values_of(k, "labels")[r], before[r] < 0 ? before[r] : 0);
  }
  EXPECT_GT(permuted, 0);
}

// Shrinking turns sentinels into ordinary values (ids 0; the integer
// kind's value nearest 0, here its lo 1) and never makes one: a failure
// that needs one -100 label ends with exactly one, at N = 1.
TEST(OpSentinels, ShrinkingKeepsOnlyTheSentinelTheFailureNeeds) {
  const Spec spec = parse_spec(kSentinelSpec, "sentinel.yaml");
  const OpFamily& f = op_family(spec);
  auto fails = [](const Case& c) {
    const auto& l = values_of(c, "labels");
    return std::find(l.begin(), l.end(), -100.0) != l.end();
  };
  const Case start = drawn_case(f, spec.domain, [&](const Case& c) {
    const auto& l = values_of(c, "labels");
    const auto& q = values_of(c, "q");
    return fails(c) && dim(c, "N") > 3 && std::find(l.begin(), l.end(), -1.0) != l.end() &&
           std::find(q.begin(), q.end(), -128.0) != q.end();
  });
  const Case c = shrink_while(start, spec.domain, fails).c;
  EXPECT_EQ(dim(c, "N"), 1);
  EXPECT_EQ(dim(c, "C"), 1);
  EXPECT_EQ(values_of(c, "labels"), (std::vector<double>{-100}));
  EXPECT_EQ(values_of(c, "q"), (std::vector<double>{1}));
  // And a failure that needs an ordinary label > 0 never shrinks to a sentinel.
  auto needs_id = [](const Case& c) {
    for (double v : values_of(c, "labels"))
      if (v > 0) return true;
    return false;
  };
  const Case id_start = drawn_case(f, spec.domain, [&](const Case& k) {
    const auto& l = values_of(k, "labels");
    return needs_id(k) && std::find(l.begin(), l.end(), -100.0) != l.end();
  });
  const Case d = shrink_while(id_start, spec.domain, needs_id).c;
  EXPECT_EQ(values_of(d, "labels"), (std::vector<double>{1}));
}

TEST(OpSentinels, LoadErrors) {
  auto with = [](const std::string& labels) {
    std::string s = kSentinelSpec;
    const std::string from = "specials: {rate: 0.4, values: [-100, -1]}";
    return s.replace(s.find(from), from.size(), labels);
  };
  EXPECT_EQ(load_error(kSentinelSpec), "");
  EXPECT_LOAD_ERROR(with("specials: 0.1"),
                    "op.yaml:7:82: input labels.specials: an integer input lists its special values");
  EXPECT_LOAD_ERROR(with("specials: {rate: 0.1, values: [-100, 3]}"),
                    "op.yaml:7:109: input labels.specials.values: 3 is a value ids draws ([0, 8]); a special "
                    "value lies outside them");
  EXPECT_LOAD_ERROR(with("specials: {rate: 0.1, values: [-100, -100]}"),
                    "op.yaml:7:109: input labels.specials.values lists -100 twice");
  EXPECT_LOAD_ERROR(with("specials: {rate: 0.1, values: [-1.5]}"),
                    "op.yaml:7:103: input labels.specials.values: -1.5 is not an integer");
  EXPECT_LOAD_ERROR(with("specials: {rate: 0.1, values: [-3000000000]}"),
                    "op.yaml:7:103: input labels.specials.values: -3000000000 is outside i32");
  // A case's values are doubles: 2^53 + 1 read as one is 2^53, another
  // sentinel than the one listed (it loaded and drew 9007199254740992);
  // past 2^53 the message said "is not an integer".
  EXPECT_LOAD_ERROR(with("specials: {rate: 0.1, values: [9007199254740993]}"),
                    "op.yaml:7:103: input labels.specials.values: 9007199254740993 is outside ±2^53, where a "
                    "case's values (doubles) are exact");
  EXPECT_LOAD_ERROR(with("specials: {rate: 0.1, values: [-9223372036854775808]}"),
                    "op.yaml:7:103: input labels.specials.values: -9223372036854775808 is outside ±2^53");
  EXPECT_LOAD_ERROR(with("specials: {rate: 0, values: [-1]}"),
                    "op.yaml:7:89: input labels.specials.rate must be in (0, 1] (got 0)");
  EXPECT_LOAD_ERROR(with("specials: {rate: 0.1, values: []}"),
                    "op.yaml:7:102: input labels.specials.values must be a non-empty list of integers");
  std::string s = kSentinelSpec;
  s.replace(s.find("{integer: {lo: 1, hi: 5}}, specials: {rate: 0.4, values: [-128]}"),
            std::string("{integer: {lo: 1, hi: 5}}, specials: {rate: 0.4, values: [-128]}").size(),
            "{integer: {lo: 1, hi: 5}}, specials: {rate: 0.4, values: [-129]}");
  EXPECT_LOAD_ERROR(s, "op.yaml:8:98: input q.specials.values: -129 is outside i8 ([-128, 127])");
  EXPECT_LOAD_ERROR(rich_with("perm: {shape: [B, Nk], dtype: i64, values: permutation}",
                              "perm: {shape: [B, Nk], dtype: i64, values: permutation, specials: {rate: 0.1, "
                              "values: [-1]}}"),
                    "op.yaml:16:71: input perm.specials: a permutation takes no special values");
  EXPECT_LOAD_ERROR(
      rich_with("mask: {shape: [Nq, Nk], values:", "mask: {shape: [Nq, Nk], specials: 0.1, values:"),
      "op.yaml:17:39: input mask.specials: special values are for floating and integer inputs");
}

}  // namespace
}  // namespace kprop::op
