// Integer and boolean outputs of a declared op (kernels/op/op.h,
// discrete_bound): an int8 quantizer's codes and a mask. A correct kernel is
// exact but where its own rounding can carry a value across a step (round,
// a comparison), which the reference's bound with steps says; a kernel
// rounding ties away from zero, comparing with >= or truncating fails.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "op_support.h"

namespace kprop::op::testing {
namespace {

// amax = 254 (a listed special value) makes the scale exactly 2, so odd
// integers land on rounding ties and 1 on the mask's threshold.
const std::string kQuantizer = R"(spec: quant
family: op
let:
  amax: max(abs(w), axis=-1, keepdims=true)
  sc: where(amax == 0, 1, amax / 127)
op:
  dims: {C: [1, 8], K: [1, 32]}
  inputs:
    w:
      shape: [C, K]
      dtype: [f32, f64]
      values: [normal, {integer: {lo: -254, hi: 254}}, large, small]
      specials: {rate: 0.3, values: [0, 254]}
  outputs:
    q: {shape: [C, K], dtype: i8}
    pos: {shape: [C, K], dtype: bool}
    scale: {shape: [C]}
  reference:
    q: minimum(maximum(round(w / sc), -127), 127)
    pos: w / sc > 0.5
    scale: sc[:, 0]
run: {trials: 300}
invariants:
  - matches_reference
  - {name: rows_independent, batch_dims: [C]}
)";

enum class Variant { divide, reciprocal, ties_away, truncate, at_least };

// The quantizer in the case's arithmetic (in_arithmetic).
Result quantize(const Case& c, Variant v) {
  const auto rnd = [&](double x) { return in_arithmetic(c, x); };
  const auto rows = static_cast<size_t>(c.dims[0]), cols = static_cast<size_t>(c.dims[1]);
  const std::vector<double>& w = c.inputs[0];
  Result r;
  r.outputs.assign(3, {});
  for (size_t i = 0; i < rows; ++i) {
    double amax = 0;
    for (size_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(w[i * cols + k]));
    const double sc = amax == 0 ? 1 : rnd(amax / 127);
    for (size_t k = 0; k < cols; ++k) {
      const double x =
          v == Variant::reciprocal ? rnd(w[i * cols + k] * rnd(1 / sc)) : rnd(w[i * cols + k] / sc);
      double q = std::nearbyint(x);
      if (v == Variant::ties_away) q = std::round(x);
      if (v == Variant::truncate) q = std::trunc(x);
      r.outputs[0].push_back(std::clamp(q, -127.0, 127.0));
      r.outputs[1].push_back(v == Variant::at_least ? x >= 0.5 : x > 0.5);
    }
    r.outputs[2].push_back(sc);
  }
  return r;
}

Spec quantizer_spec(const std::string& text = kQuantizer) {
  Spec spec = parse_spec(text, "quant.yaml");
  plant_mutants(spec, [](OpFamily& f) {
    f.mutant("divide", "w / scale, rounded to nearest even",
             [](const Case& c) { return quantize(c, Variant::divide); });
    f.mutant("reciprocal", "w * (1 / scale): within rounding of w / scale",
             [](const Case& c) { return quantize(c, Variant::reciprocal); });
    f.mutant("ties_away", "rounds ties away from zero",
             [](const Case& c) { return quantize(c, Variant::ties_away); });
    f.mutant("truncate", "truncates toward zero",
             [](const Case& c) { return quantize(c, Variant::truncate); });
    f.mutant("at_least",
             "the mask compares with >=", [](const Case& c) { return quantize(c, Variant::at_least); });
  });
  return spec;
}

RunReport run_on(const Spec& spec, const std::string& target, uint64_t seed) {
  return run_spec(spec, scratch_run(target, seed, 300, "kprop_op_integer_test"));
}

// On each of seeds 1-3 the kernel `correct` passes (with `checked`, its
// first invariant checked that many of run_on's 300 cases) and `bug` fails.
void expect_correct_passes_bug_fails(const Spec& spec, const std::string& correct, const std::string& bug,
                                     int64_t checked = -1) {
  for (uint64_t seed : {1, 2, 3}) {
    const RunReport ok = run_on(spec, correct, seed);
    EXPECT_EQ(ok.status, RunStatus::passed) << correct << " seed " << seed << ": " << ok.detail;
    if (checked >= 0) {
      EXPECT_EQ(ok.invariants.at(0).passed, checked) << correct << " seed " << seed;
    }
    EXPECT_EQ(run_on(spec, bug, seed).status, RunStatus::failed) << bug << " seed " << seed;
  }
}

// Correct kernels pass: the reference itself, the quantizer computed in the
// case's arithmetic, and one multiplying by the reciprocal (which differs
// from w / scale only next to a tie, where the bound allows either
// neighbour, and at the exact ties of scale 2, where 1 / 2 is exact);
// every case checked.
TEST(OpIntegerOutputs, CorrectQuantizersPass) {
  const Spec spec = quantizer_spec();
  for (const char* target : {"reference", "divide", "reciprocal"})
    for (uint64_t seed : {1, 2, 3}) {
      const RunReport r = run_on(spec, target, seed);
      EXPECT_EQ(r.status, RunStatus::passed) << target << " seed " << seed << ": " << r.detail;
      ASSERT_EQ(r.invariants.size(), 2u);
      EXPECT_EQ(r.invariants[0].passed, 300) << target << " seed " << seed;
    }
}

// Bugs that differ only at exact ties or at the threshold fail: the scale
// 254 / 127 = 2 and w / 2 are exact operations, so no rounding can move the
// value off the tie (the bound is 0 there, not the step).
TEST(OpIntegerOutputs, TiesThresholdsAndTruncationFail) {
  const Spec spec = quantizer_spec();
  for (const char* target : {"ties_away", "truncate", "at_least"})
    for (uint64_t seed : {1, 2, 3}) {
      const RunReport r = run_on(spec, target, seed);
      ASSERT_EQ(r.status, RunStatus::failed) << target << " seed " << seed;
      ASSERT_TRUE(r.invariants.at(0).counterexample) << target;
      const std::string& m = r.invariants[0].counterexample->message;
      EXPECT_NE(m.find(std::string(target) == "at_least" ? "target.pos[" : "target.q["), std::string::npos)
          << m;
      EXPECT_NE(m.find("output must be exact, off only where the case's"), std::string::npos) << m;
    }
}

// A reference that gives no value of the output's dtype is the spec's
// error, at the expression; a boolean reference is a bool output's only.
TEST(OpIntegerOutputs, AReferenceOutsideTheDtypeIsTheSpecsError) {
  std::string half = kQuantizer;
  half.replace(half.find("q: minimum("), std::string("q: minimum(maximum(round(w / sc), -127), 127)").size(),
               "q: w / sc");
  try {
    (void)run_on(quantizer_spec(half), "reference", 1);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("quant.yaml:19:8: reference.q: `w / sc` is "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("not a value of the i8 output q (an integer in [-128, 127])"),
              std::string::npos)
        << e.what();
  }
  std::string mask = kQuantizer;
  mask.replace(mask.find("    scale: sc[:, 0]"), std::string("    scale: sc[:, 0]").size(),
               "    scale: sc[:, 0] > 0");
  EXPECT_NE(load_error(mask).find("is boolean; a reference computes the output's values"), std::string::npos)
      << load_error(mask);
}

// A tie reached through a mean of exact terms is judged: mean(|w|) of
// [1, 3] is 2 in any order of addition, and 1 / 2 an exact tie. A kernel
// rounding ties away from zero passed every seed before.
TEST(OpIntegerOutputs, ATieAfterAnExactMeanIsJudged) {
  Spec spec = parse_spec(R"(spec: absmean
family: op
let:
  g: mean(abs(w), axis=-1, keepdims=true)
op:
  dims: {C: [1, 4], K: [1, 8]}
  inputs:
    w: {shape: [C, K], dtype: [f32, f64], values: {integer: {lo: -4, hi: 4}}}
  outputs:
    q: {shape: [C, K], dtype: i8}
  reference:
    q: minimum(maximum(round(w / where(g == 0, 1, g)), -1), 1)
run: {trials: 200}
invariants: [matches_reference]
)",
                         "absmean.yaml");
  const auto kernel = [](const Case& c, bool away) {
    const auto rnd = [&](double x) { return in_arithmetic(c, x); };
    const auto cols = static_cast<size_t>(c.dims[1]);
    Result r;
    r.outputs.resize(1);
    for (size_t i = 0; i < c.inputs[0].size(); i += cols) {
      double total = 0;
      for (size_t k = cols; k-- > 0;) total = rnd(total + std::fabs(c.inputs[0][i + k]));  // backwards
      const double g = rnd(total / static_cast<double>(cols));
      for (size_t k = 0; k < cols; ++k) {
        const double x = rnd(c.inputs[0][i + k] / (g == 0 ? 1 : g));
        r.outputs[0].push_back(std::clamp(away ? std::round(x) : std::nearbyint(x), -1.0, 1.0));
      }
    }
    return r;
  };
  plant_mutants(spec, [&](OpFamily& f) {
    f.mutant("correct", "ternary codes, ties to even", [kernel](const Case& c) { return kernel(c, false); });
    f.mutant("ties_away", "ties away from zero", [kernel](const Case& c) { return kernel(c, true); });
  });
  expect_correct_passes_bug_fails(spec, "correct", "ties_away");
}

// An argmax written with max and where is judged: the element the max is
// computed from equals it in any evaluation, so its flag is exact unless
// another element is within rounding of it. Every case was discarded
// ("overflows on every element"), whatever the kernel returned.
TEST(OpIntegerOutputs, AnArgmaxOfAComputedValueIsJudged) {
  Spec spec = parse_spec(R"(spec: argmax
family: op
let:
  z: x * w + b
op:
  dims: {R: [1, 8], V: [1, 16]}
  inputs:
    x: {shape: [R, V], dtype: [f32, f64]}
    w: {shape: [V]}
    b: {shape: [V]}
  outputs:
    i: {shape: [R], dtype: i32}
  reference:
    i: min(where(z == max(z, axis=-1, keepdims=true), indices(z, axis=-1), V), axis=-1)
run: {trials: 200}
invariants: [matches_reference]
)",
                         "argmax.yaml");
  // The first index of the row's largest x·w + b in the case's arithmetic
  // (`bias`: false leaves b out).
  const auto kernel = [](const Case& c, bool bias) {
    const auto rnd = [&](double x) { return in_arithmetic(c, x); };
    const auto cols = static_cast<size_t>(c.dims[1]);
    Result r;
    r.outputs.resize(1);
    for (size_t i = 0; i < c.inputs[0].size(); i += cols) {
      size_t best = 0;
      double top = -HUGE_VAL;
      for (size_t k = 0; k < cols; ++k) {
        const double z = rnd(rnd(c.inputs[0][i + k] * c.inputs[1][k]) + (bias ? c.inputs[2][k] : 0));
        if (z > top) top = z, best = k;
      }
      r.outputs[0].push_back(static_cast<double>(best));
    }
    return r;
  };
  plant_mutants(spec, [&](OpFamily& f) {
    f.mutant("correct", "first index of the largest", [kernel](const Case& c) { return kernel(c, true); });
    f.mutant("no_bias", "leaves the bias out", [kernel](const Case& c) { return kernel(c, false); });
  });
  expect_correct_passes_bug_fails(spec, "correct", "no_bias", 300);
}

// A bool element whose allowance is a flip (a comparison at a tie that the
// case's rounding can move either way) admits true and false alike: it is
// not judged, and a case of such ties only checks nothing. Both an all-true
// and an all-false kernel "passed" 100 checked cases of x · 0.3 > 0.3 at
// x = 1 (0.3 is inexact: either side may round up); now every case is
// discarded, with the reason, and the run gives up.
TEST(OpIntegerOutputs, ACaseOfTiesOnlyIsDiscardedNotPassed) {
  Spec spec = parse_spec(R"(spec: ties_only
family: op
op:
  dims: {N: [1, 4]}
  inputs:
    x: {shape: [N], dtype: [f32, f64], values: {integer: {lo: 1, hi: 1}}}
  outputs:
    keep: {shape: [N], dtype: bool}
  reference:
    keep: x * 0.3 > 0.3
invariants: [matches_reference]
)",
                         "ties_only.yaml");
  plant_mutants(spec, [](OpFamily& f) {
    for (const bool v : {true, false})
      f.mutant(v ? "all_true" : "all_false", "a constant mask", [v](const Case& c) {
        Result r;
        r.outputs.assign(1, std::vector<double>(static_cast<size_t>(c.dims[0]), v ? 1.0 : 0.0));
        return r;
      });
  });
  for (const char* target : {"all_true", "all_false"}) {
    const RunReport r = run_on(spec, target, 1);
    EXPECT_EQ(r.status, RunStatus::gave_up) << target << ": " << r.detail;
    ASSERT_EQ(r.invariants.size(), 1u);
    EXPECT_EQ(r.invariants[0].passed, 0) << target;
    EXPECT_NE(r.invariants[0].last_discard.find("no element is judged"), std::string::npos)
        << r.invariants[0].last_discard;
  }
}

// Functions at their exact points (C's Annex F special values, sqrt
// correctly rounded) round nothing, so a comparison there is judged, as
// x + 1 > 1 at x = 0 is: a kernel writing >= for > fails. exp(x) > 1 at
// x = 0 was a tie allowing either answer, and every case passed unchecked.
TEST(OpIntegerOutputs, FunctionsAtTheirExactPointsAreJudged) {
  Spec spec = parse_spec(R"(spec: exact_points
family: op
op:
  dims: {N: [1, 4]}
  inputs:
    x: {shape: [N], dtype: [f32, f64], values: {integer: {lo: 0, hi: 0}}}
  outputs:
    e: {shape: [N], dtype: bool}
    l: {shape: [N], dtype: bool}
    t: {shape: [N], dtype: bool}
    s: {shape: [N], dtype: bool}
    c: {shape: [N], dtype: bool}
    r: {shape: [N], dtype: bool}
  reference:
    e: exp(x) > 1
    l: log(x + 1) > 0
    t: tanh(x) > 0
    s: sin(x) > 0
    c: cos(x) > 1
    r: sqrt(x + 2.25) > 1.5
invariants: [matches_reference]
)",
                         "exact_points.yaml");
  plant_mutants(spec, [](OpFamily& f) {
    for (const bool v : {true, false})
      f.mutant(v ? "at_least" : "greater", v ? ">= for >: true at the exact point" : "> at the exact point",
               [v](const Case& c) {
                 Result r;
                 r.outputs.assign(6, std::vector<double>(static_cast<size_t>(c.dims[0]), v ? 1.0 : 0.0));
                 return r;
               });
  });
  for (uint64_t seed : {1, 2}) {
    const RunReport ok = run_on(spec, "greater", seed);
    EXPECT_EQ(ok.status, RunStatus::passed) << "seed " << seed << ": " << ok.detail;
    EXPECT_EQ(ok.invariants.at(0).passed, 300) << "seed " << seed;  // run_on draws 300
    const RunReport bad = run_on(spec, "at_least", seed);
    ASSERT_EQ(bad.status, RunStatus::failed) << "seed " << seed;
    EXPECT_NE(bad.invariants.at(0).counterexample->message.find("target.e["), std::string::npos)
        << bad.invariants[0].counterexample->message;
  }
  // One function at a time: each output alone fails the >= kernel.
  for (const char* out : {"l", "t", "s", "c", "r"}) {
    std::string text = R"(spec: exact_point
family: op
op:
  dims: {N: [1, 4]}
  inputs:
    x: {shape: [N], dtype: [f32, f64], values: {integer: {lo: 0, hi: 0}}}
  outputs:
    y: {shape: [N], dtype: bool}
  reference:
    y: EXPR
invariants: [matches_reference]
)";
    const std::string expr = std::string(out) == "l"   ? "log(x + 1) > 0"
                             : std::string(out) == "t" ? "tanh(x) > 0"
                             : std::string(out) == "s" ? "sin(x) > 0"
                             : std::string(out) == "c" ? "cos(x) > 1"
                                                       : "sqrt(x + 2.25) > 1.5";
    text.replace(text.find("EXPR"), 4, expr);
    Spec one = parse_spec(text, "exact_point.yaml");
    plant_mutants(one, [](OpFamily& f) {
      f.mutant("at_least", "true at the exact point", [](const Case& c) {
        Result r;
        r.outputs.assign(1, std::vector<double>(static_cast<size_t>(c.dims[0]), 1.0));
        return r;
      });
    });
    EXPECT_EQ(run_on(one, "at_least", 1).status, RunStatus::failed) << expr;
  }
}

// A softmax row of ties reaches its threshold exactly: x - max(x) = 0, exp(0)
// = 1 (Annex F), the row sums to V exactly and 1 / V is exact, so p > 1/V is
// judged on that row even where other rows' exps are inexact. A kernel
// writing p >= thresh passed every seed (the audit's prob_threshold_ties).
TEST(OpIntegerOutputs, ASoftmaxRowOfTiesIsJudgedAtItsThreshold) {
  Spec spec = parse_spec(R"(spec: prob_threshold
family: op
let:
  e: exp(x - max(x, axis=-1, keepdims=true))
  p: e / sum(e, axis=-1, keepdims=true)
op:
  dims: {T: [1, 4], V: [1, 4]}
  attrs: {thresh: {one_of: [0.5, 0.25]}}
  inputs:
    x: {shape: [T, V], dtype: [f32, f64], values: {integer: {lo: 0, hi: 1}}}
  outputs:
    keep: {shape: [T, V], dtype: bool}
  reference:
    keep: p > thresh
invariants: [matches_reference]
)",
                         "prob_threshold.yaml");
  const auto kernel = [](const Case& c, bool at_least) {
    const auto rnd = [&](double x) { return in_arithmetic(c, x); };
    const auto cols = static_cast<size_t>(c.dims[1]);
    const double t = c.attrs[0];
    Result r;
    r.outputs.resize(1);
    for (size_t i = 0; i < c.inputs[0].size(); i += cols) {
      double m = -HUGE_VAL, total = 0;
      for (size_t k = 0; k < cols; ++k) m = std::max(m, c.inputs[0][i + k]);
      for (size_t k = 0; k < cols; ++k) total = rnd(total + rnd(std::exp(rnd(c.inputs[0][i + k] - m))));
      for (size_t k = 0; k < cols; ++k) {
        const double p = rnd(rnd(std::exp(rnd(c.inputs[0][i + k] - m))) / total);
        r.outputs[0].push_back(at_least ? p >= t : p > t);
      }
    }
    return r;
  };
  plant_mutants(spec, [&](OpFamily& f) {
    f.mutant("correct", "p > thresh", [kernel](const Case& c) { return kernel(c, false); });
    f.mutant("at_least", "p >= thresh", [kernel](const Case& c) { return kernel(c, true); });
  });
  expect_correct_passes_bug_fails(spec, "correct", "at_least");
}

}  // namespace
}  // namespace kprop::op::testing
