// Expression invariants on declared ops, where the verdict is the spec's
// and not the target's: close(k=) judges as matches_reference does when the
// same-precision baseline overflows, and an expression that cannot be
// evaluated on a case (shapes, a bad k) is the spec's error, never a
// counterexample stored against the target.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "op_support.h"

namespace kprop::op::testing {
namespace {

// y = x in fp64, but its f32 baseline computes x · 1e30 · 1e30 = inf first.
const std::string kOverflowingBaseline = R"(spec: overflow
family: op
op:
  dims: {T: [1, 4]}
  inputs:
    x: {shape: [T], dtype: f32, values: {uniform: {lo: 1, hi: 2}}}
  outputs:
    y: {shape: [T]}
  reference:
    y: x * 1.0e30 * 1.0e30 / 1.0e60
run: {trials: 50}
invariants:
  - name: close_k
    expect: close(target.y, reference.y, k=2)
)";

// The spec above with a target that doubles y (and what `more` adds).
Spec with_doubling_mutant(const std::string& text, const std::function<void(OpFamily&)>& more = {}) {
  Spec spec = parse_spec(text, "overflow.yaml");
  plant_mutants(spec, [&](OpFamily& f) {
    f.mutant("doubles", "returns 2y", [](const Case& c) {
      Result r = op::reference(c);
      for (double& v : r.outputs[0]) v *= 2;
      return r;
    });
    if (more) more(f);
  });
  return spec;
}

// A run of `spec` on `target` for `trials` cases at seed 7, storing nothing.
RunReport run_on(const Spec& spec, const std::string& target, int trials) {
  return run_spec(spec, scratch_run(target, 7, trials, "kprop_op_policy_test"));
}

// The baseline is inf on every element: no element can be judged, and the
// case is discarded (the run gives up), as matches_reference discards it.
// The budget was K × inf: a target off by 2x passed every case.
TEST(OpClosePolicy, ABaselineThatOverflowsJudgesNothingAndNeverPasses) {
  const Spec spec = with_doubling_mutant(kOverflowingBaseline);
  for (const char* target : {"doubles", "reference"}) {
    const RunReport r = run_on(spec, target, 50);
    EXPECT_EQ(r.status, RunStatus::gave_up) << target;
    ASSERT_EQ(r.invariants.size(), 1u);
    EXPECT_EQ(r.invariants[0].passed, 0) << target;
    EXPECT_EQ(r.invariants[0].last_discard.rfind("close(k=): the same-precision baseline is not finite", 0),
              0u)
        << r.invariants[0].last_discard;
  }
}

// A comparison over no element (an empty slice on this case) judges nothing:
// the case is discarded, never passed (a target off by 2x passed every case
// of `close(target.y[T:], ...)`). Next to a side that judges, in an `and`,
// a side that judges nothing hides neither its failure nor its pass (the
// overflowing baseline's side discarded the whole invariant).
TEST(OpClosePolicy, AComparisonOverNoElementJudgesNothing) {
  for (const char* expect :
       {"close(target.y[T:], reference.y[T:], k=2)", "all(target.y[T:] == reference.y[T:])",
        "close(target.y[T:], reference.y[T:], k=2) and all(target.y[T:] > 0)"}) {
    const Spec spec =
        with_doubling_mutant(kOverflowingBaseline.substr(0, kOverflowingBaseline.find("    expect:")) +
                             "    expect: " + expect + "\n");
    for (const char* target : {"doubles", "reference"}) {
      const RunReport r = run_on(spec, target, 50);
      EXPECT_EQ(r.status, RunStatus::gave_up) << expect << " on " << target;
      EXPECT_EQ(r.invariants.at(0).passed, 0) << expect;
      EXPECT_NE(r.invariants[0].last_discard.find("on this case (shape [0])"), std::string::npos)
          << r.invariants[0].last_discard;
    }
  }
  const std::string both = kOverflowingBaseline.substr(0, kOverflowingBaseline.find("    expect:")) +
                           "    expect: close(target.y, reference.y, k=2) and abs(target.y - x) <= x / 2\n";
  const Spec spec = with_doubling_mutant(both);
  const RunReport bad = run_on(spec, "doubles", 50);
  EXPECT_EQ(bad.status, RunStatus::failed);
  ASSERT_TRUE(bad.invariants.at(0).counterexample);
  EXPECT_NE(bad.invariants[0].counterexample->message.find("abs(target.y - x) <= x / 2"), std::string::npos)
      << bad.invariants[0].counterexample->message;
  const RunReport ok = run_on(spec, "reference", 50);
  EXPECT_EQ(ok.status, RunStatus::passed) << ok.detail;
  EXPECT_EQ(ok.invariants.at(0).passed, 50);
}

// A relation between two runs of the target, one of them scaled by an exact
// number (2 * target.y): each run errs within the policy, by 8 f32 ulps, in
// a direction set by w's binade, so doubling w flips it. The scaled operand
// carries twice its run's budget; it carried none, and the relation failed
// a kernel that matches_reference passes.
TEST(OpClosePolicy, AScaledTargetOperandHasItsScaledBudget) {
  const std::string text = R"(spec: mul
family: op
op:
  dims: {N: [1, 4]}
  inputs:
    x: {shape: [N], dtype: f32, values: {uniform: {lo: 1, hi: 2}}}
    w: {shape: [N], values: {uniform: {lo: 1, hi: 2}}}
  outputs:
    y: {shape: [N]}
  reference:
    y: x * w
invariants:
  - matches_reference
  - name: doubled
    transform: {scale: {w: 2.0}}
    expect: close(transformed.target.y, 2 * target.y, k=2)
  - name: halved
    transform: {scale: {w: 2.0}}
    expect: close(0.5 * transformed.target.y, target.y, k=2)
  - name: negated
    expect: close(-target.y, -reference.y, k=2)
)";
  const Spec spec = with_doubling_mutant(text, [](OpFamily& f) {
    f.mutant("skewed", "y off by 8 f32 ulps, its sign by w's binade", [](const Case& c) {
      Result r = op::reference(c);
      for (size_t i = 0; i < r.outputs[0].size(); ++i) {
        int e = 0;
        std::frexp(c.inputs[1][i], &e);
        const double y = r.outputs[0][i];
        r.outputs[0][i] = static_cast<float>(y + (e % 2 == 0 ? 8 : -8) * std::ldexp(1.0, -24) * std::fabs(y));
      }
      return r;
    });
  });
  const RunReport r = run_on(spec, "skewed", 100);
  EXPECT_EQ(r.status, RunStatus::passed) << r.detail;
  for (const auto& i : r.invariants) EXPECT_EQ(i.passed, 100) << i.name;
  EXPECT_EQ(run_on(spec, "doubles", 100).status, RunStatus::failed);
}

// exp overflows in f32 on some elements (NaN baseline after inf / inf):
// those are not judged, the others are, so an exact target passes (it
// failed with "allowed nan") and a wrong one still fails.
TEST(OpClosePolicy, ABaselineThatOverflowsOnSomeElementsJudgesTheOthers) {
  const std::string text = R"(spec: softmax
family: op
op:
  dims: {T: [1, 4], D: [2, 8]}
  inputs:
    x: {shape: [T, D], dtype: f32, values: {normal: {std: 100}}}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: exp(x) / sum(exp(x), axis=-1, keepdims=true)
run: {trials: 100, suppress_health_check: [discarded]}
invariants:
  - name: close_k
    expect: close(target.y, reference.y, k=2)
)";
  const Spec spec = with_doubling_mutant(text);
  const RunReport ok = run_on(spec, "reference", 100);
  EXPECT_EQ(ok.status, RunStatus::passed) << ok.detail;
  EXPECT_GT(ok.invariants[0].passed, 0);
  const RunReport bad = run_on(spec, "doubles", 100);
  EXPECT_EQ(bad.status, RunStatus::failed);
}

std::string run_error(const std::string& text, const std::string& target = "reference") {
  try {
    run_on(with_doubling_mutant(text), target, 30);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string with_invariant(const std::string& expect, const std::string& when = "") {
  return R"(spec: shapes
family: op
op:
  dims: {T: [1, 8], D: [1, 8]}
  inputs:
    x: {shape: [T, D], dtype: f64}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: x * 2
invariants:
  - name: e
    expect: ")" +
         expect + "\"\n" + (when.empty() ? "" : "    when: \"" + when + "\"\n");
}

TEST(OpClosePolicy, AnExpressionThatCannotBeEvaluatedIsTheSpecsError) {
  // Slices of extents 2 and D-1: the dims allow it at load, a case with D != 3
  // does not. In a when: over the inputs alone (an expect: that reads no
  // output of the target does not load).
  const std::string checked = "all(isfinite(target.y))";
  for (const char* target : {"reference", "doubles"}) {
    const std::string e =
        run_error(with_invariant(checked, "all(x[:, 0:2] + x[:, 1:] == x[:, 1:] + x[:, 0:2])"), target);
    EXPECT_NE(e.find("overflow.yaml:"), std::string::npos) << e;
    EXPECT_NE(
        e.find("invariant e: `all(x[:, 0:2] + x[:, 1:] == x[:, 1:] + x[:, 0:2])` cannot be evaluated on "
               "this case: shapes"),
        std::string::npos)
        << e;
    EXPECT_NE(e.find("it reads no output of the target"), std::string::npos) << e;
    // An index out of range in an expression over the inputs alone (it was
    // reported as a counterexample of the target).
    const std::string index = run_error(with_invariant(checked, "all(x[99] == x[99])"), target);
    EXPECT_NE(index.find("invariant e: `all(x[99] == x[99])` cannot be evaluated on this case: index"),
              std::string::npos)
        << index;
  }
  // An index past the spec's own dim is the spec's error even where the
  // expression reads the target's output (target.y has its declared T
  // rows): it was shrunk and reported as the reference's counterexample.
  for (const char* target : {"reference", "doubles"}) {
    const std::string own = run_error(with_invariant("all(target.y[99] == x[99])"), target);
    EXPECT_NE(own.find("invariant e: `all(target.y[99] == x[99])` cannot be evaluated on this case: index 99 "
                       "is out of range for an axis of length "),
              std::string::npos)
        << own;
    EXPECT_NE(own.find("the index reads no output of the target"), std::string::npos) << own;
  }
  // Shapes that do not broadcast where every output read has its declared
  // shape: the spec's error (it failed the target, and the case was stored
  // as its counterexample).
  for (const char* target : {"reference", "doubles"}) {
    const std::string shapes = run_error(with_invariant("all(target.y <= 100 + 0 * x[:, 0:2])"), target);
    EXPECT_NE(shapes.find("cannot be evaluated on this case: shapes"), std::string::npos) << shapes;
    EXPECT_NE(shapes.find("every output it reads has its declared shape"), std::string::npos) << shapes;
  }
  // An index the target's answer computes fails the invariant: the target
  // may have caused it (here only the doubling mutant's outputs count past T).
  const std::string counted = with_invariant("all(x[sum(target.y != reference.y)] == x[0])");
  EXPECT_EQ(run_on(with_doubling_mutant(counted), "reference", 30).status, RunStatus::passed);
  const RunReport r = run_on(with_doubling_mutant(counted), "doubles", 30);
  EXPECT_EQ(r.status, RunStatus::failed);
  ASSERT_TRUE(r.invariants.at(0).counterexample);
  EXPECT_NE(r.invariants.at(0).counterexample->message.find("could not be evaluated"), std::string::npos);
  // k is checked on each case; a literal one at load.
  const std::string k = run_error(with_invariant("all(close(target.y, reference.y, k=T - 100))"));
  EXPECT_NE(k.find("close(k=): k is -9"), std::string::npos) << k;
  for (const char* bad : {"inf", "nan"})
    EXPECT_NE(load_error(with_invariant(std::string("all(close(target.y, reference.y, k=") + bad + "))"))
                  .find("k must be a finite number >= 0"),
              std::string::npos)
        << bad;
}

// An index, computed from no output of the target, past an axis of an
// intermediate (diff's, a slice's) where every output read has its declared
// shape: the spec's error, as an index past a declared dim is (it failed the
// target "could not be evaluated" and stored the case as its counterexample).
TEST(OpClosePolicy, AnIndexPastAnIntermediatesAxisIsTheSpecsError) {
  for (const char* expect :
       {"all(diff(target.y)[:, 0] == diff(target.y)[:, 0])", "all(target.y[:, 1:][:, 0] == target.y[:, 1])"})
    for (const char* target : {"reference", "doubles"}) {
      const std::string e = run_error(with_invariant(expect), target);
      EXPECT_NE(e.find(std::string("invariant e: `") + expect +
                       "` cannot be evaluated on this case: index 0 is out of range for an axis of length 0"),
                std::string::npos)
          << e;
      EXPECT_NE(e.find("every output it reads has its declared shape"), std::string::npos) << e;
    }
  // An index the target's answer computes past such an axis stays the target's.
  const RunReport r = run_on(
      with_doubling_mutant(
          with_invariant("all(target.y[:, 1:][:, sum(target.y != reference.y)] == target.y[:, 1:][:, 0])")),
      "doubles", 30);
  EXPECT_EQ(r.status, RunStatus::failed) << r.detail;
}

// A target that raised stands whatever the spec's expression does on the
// smaller cases the shrinker tries: one it runs through, where the
// expression cannot be evaluated (x[0, 0] shrunk to 0 picks index 99), is
// no case of that failure. The spec's error there lost the target's raise
// (the run ended in exit 2, nothing stored).
TEST(OpClosePolicy, ATargetsRaiseStandsWhereTheSpecCannotJudgeASmallerCase) {
  const Spec spec = with_doubling_mutant(R"(spec: raises
family: op
op:
  dims: {T: [1, 4], D: [1, 4]}
  inputs:
    x: {shape: [T, D], dtype: f64, values: [normal]}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: x
invariants:
  - name: e
    expect: all(x[:, where(x[0, 0] == 0, 99, 0)] == x[:, 0]) and all(target.y == x)
)",
                                         [](OpFamily& f) {
                                           f.mutant("raises", "raises where x[0, 0] > 0", [](const Case& c) {
                                             if (c.inputs[0][0] > 0) throw std::runtime_error("x[0, 0] > 0");
                                             return op::reference(c);
                                           });
                                         });
  EXPECT_EQ(run_on(spec, "reference", 30).status, RunStatus::passed);
  const RunReport r = run_on(spec, "raises", 30);
  EXPECT_EQ(r.status, RunStatus::crashed) << r.detail;
  ASSERT_TRUE(r.crash.has_value());
  EXPECT_NE(r.crash->message.find("x[0, 0] > 0"), std::string::npos) << r.crash->message;
}

// Shrinking keeps affine relations: a kernel wrong once its carried state
// has 3 columns (S == K - 1) shrinks to K 4, S 3, and the stride's output
// (T2 == 2 * T, at least S + 1 long) to T 2, T2 4: each coupled dim at its
// least value the relations allow.
TEST(OpRelationsShrink, AffineRelationsHoldWhileShrinking) {
  const Spec spec =
      with_doubling_mutant(kAffineRelationsSpec + "invariants: [matches_reference]\n", [](OpFamily& f) {
        f.mutant("wide_state", "wrong from 3 state columns", [](const Case& c) {
          Result r = op::reference(c);
          if (c.dims[static_cast<size_t>(c.decl->dim_index("S"))] >= 3) r.outputs[0][0] += 1;
          return r;
        });
      });
  EXPECT_EQ(run_on(spec, "reference", 100).status, RunStatus::passed);
  const RunReport r = run_on(spec, "wide_state", 100);
  ASSERT_EQ(r.status, RunStatus::failed) << r.detail;
  const std::string& summary = r.invariants.at(0).counterexample->stats.summary;
  EXPECT_NE(summary.find("B 1, K 4, S 3, T 2, T2 4"), std::string::npos) << summary;
}

// Under slice_T the derived case's T is its own (transformed.T): mixing it
// with the case's T is refused at load (it loaded, and a one-row slice
// broadcast against every row failed a correct kernel); the relation through
// transform.index ([transformed.T]) loads and holds.
// y = 2x over T rows, with one relation e under slice_T.
std::string sliced_spec(const std::string& expect) {
  return R"(spec: sliced
family: op
op:
  dims: {T: [1, 8], D: [1, 6]}
  inputs:
    x: {shape: [T, D], dtype: f64}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: x * 2
invariants:
  - name: e
    transform: slice_T
    expect: )" +
         expect + "\n";
}

TEST(OpClosePolicy, ASlicedDimIsTheDerivedCasesOwn) {
  const auto spec = sliced_spec;
  EXPECT_EQ(load_error(spec("close(transformed.target.y, target.y, k=2)")),
            "op.yaml:14:13: invariant 'e', expect: shapes [transformed.T, D] and [T, D] do not broadcast "
            "(transformed.T vs T)");
  for (const char* ok : {"close(transformed.target.y, target.y[transform.index], k=2)",
                         "all(transformed.target.y[transformed.T - 1] == target.y[transform.index[-1]])",
                         "close(transformed.target.y[:, 0], 2 * transformed.x[:, 0], k=2)"}) {
    const Spec s = with_doubling_mutant(spec(ok));
    const RunReport r = run_on(s, "reference", 30);
    EXPECT_EQ(r.status, RunStatus::passed) << ok << ": " << r.detail;
  }
  const RunReport doubled =
      run_on(with_doubling_mutant(spec("close(transformed.target.y[:, 0], 2 * transformed.x[:, 0], k=2)")),
             "doubles", 30);
  EXPECT_EQ(doubled.status, RunStatus::failed) << doubled.detail;
  // A relation's failure says what its transform drew (the rows kept): the
  // derived case is no part of the stored case shown.
  const RunReport drawn =
      run_on(with_doubling_mutant(spec("close(transformed.target.y, reference.y[transform.index], k=2)")),
             "doubles", 30);
  ASSERT_TRUE(drawn.invariants.at(0).counterexample) << drawn.detail;
  const std::string& message = drawn.invariants[0].counterexample->message;
  EXPECT_NE(message.find("\ntransform slice_T drew index = ["), std::string::npos) << message;
}

// A smaller case the spec's own expression cannot be evaluated on, met while
// a failure shrinks, is the spec's error (exit 2), as on a drawn case: the
// failure may be the same mistake's doing (here an index one past the rows
// kept, which fails a correct kernel and runs off the end of shorter cases).
// It was a counterexample of the target with the error in a note.
TEST(OpClosePolicy, TheSpecsErrorMetWhileShrinkingIsTheSpecsError) {
  const Spec spec =
      with_doubling_mutant(sliced_spec("close(transformed.target.y, target.y[transform.index + 1], k=2)"));
  // A seed whose shrink meets no such case reports the failure (the spec
  // fails a correct kernel there, which no run can tell from a bug); one
  // whose drawn case runs off the end is the spec's error at once.
  int while_shrinking = 0;
  for (int seed = 1; seed <= 12; ++seed) {
    try {
      const RunReport r = run_spec(spec, scratch_run("reference", seed, 30, "kprop_op_policy_test"));
      EXPECT_EQ(r.status, RunStatus::failed) << "seed " << seed << ": " << r.detail;
    } catch (const SpecCaseError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("invariant e: `close(transformed.target.y, target.y[transform.index + 1], k=2)` "
                          "cannot be evaluated on this case: index "),
                std::string::npos)
          << what;
      const std::string said =
          "(met while shrinking a failure of e on another case: that failure may be the "
          "spec's error too; fix it and run seed " +
          std::to_string(seed) + " again)";
      if (what.find(said) != std::string::npos) ++while_shrinking;
    }
  }
  EXPECT_GT(while_shrinking, 0);
}

// A computed tolerance below 0 or NaN: the spec's error when the spec's own
// tensors make it (it failed exact matches: |0| > allowed -2), as a bad k
// is. One read from the target's outputs is the target's: equal elements
// are close whatever it is (NumPy's isclose), unequal ones fail.
TEST(OpClosePolicy, ANegativeOrNanToleranceIsTheSpecsErrorUnlessTheTargetMadeIt) {
  const std::string negative =
      run_error(with_invariant("all(close(target.y, reference.y, atol=T - 100, rtol=0))"));
  EXPECT_NE(negative.find("close(): atol is -9"), std::string::npos) << negative;
  // A NaN one where an element needs it (its sides finite and unequal: the
  // doubling target); where the sides are equal it is never read.
  const std::string nan =
      run_error(with_invariant("all(close(target.y, reference.y, rtol=max(x) * nan))"), "doubles");
  EXPECT_NE(nan.find("close(): rtol is nan on this case, where the sides "), std::string::npos) << nan;
  EXPECT_NE(nan.find("differ; a tolerance must be a number >= 0 (a NaN reached it"), std::string::npos)
      << nan;
  EXPECT_EQ(run_error(with_invariant("all(close(target.y, reference.y, rtol=max(x) * nan))")), "");
  const Spec spec =
      with_doubling_mutant(with_invariant("all(close(target.y, reference.y, atol=target.y * nan))"));
  const RunReport same = run_on(spec, "reference", 30);
  EXPECT_EQ(same.status, RunStatus::passed) << same.detail;
  const RunReport doubled = run_on(spec, "doubles", 30);
  EXPECT_EQ(doubled.status, RunStatus::failed) << doubled.detail;
}

// A computed tolerance that is infinite on an element (an atol built from a
// value that overflowed) allows any error there: the element is not judged.
// Everywhere: the case judges nothing and is discarded (a target off by 2x
// passed every case). On some elements: the others are judged. Read from
// the target's outputs: the target's doing, and an unequal element fails.
TEST(OpClosePolicy, AnInfiniteToleranceJudgesNothingThere) {
  const auto expect_gives_up = [](const std::string& expect) {
    const Spec spec = with_doubling_mutant(with_invariant(expect));
    for (const char* target : {"doubles", "reference"}) {
      const RunReport r = run_on(spec, target, 30);
      EXPECT_EQ(r.status, RunStatus::gave_up) << expect << " on " << target << ": " << r.detail;
      ASSERT_EQ(r.invariants.size(), 1u);
      EXPECT_EQ(r.invariants[0].passed, 0) << target;
      EXPECT_EQ(r.invariants[0].last_discard.rfind("close(): the tolerance allows an infinite error", 0), 0u)
          << r.invariants[0].last_discard;
    }
  };
  expect_gives_up("close(target.y, reference.y, atol=exp(1000 + abs(x)))");
  // rtol × |rhs| past the largest double: the same.
  expect_gives_up("close(target.y, reference.y, rtol=1e308 * (2 + abs(x)), atol=0)");
  // Infinite where x > 0.7 only: the other elements judge the target.
  const Spec some =
      with_doubling_mutant(with_invariant("close(target.y, reference.y, atol=exp(1000 * x), rtol=0)"));
  const RunReport ok = run_on(some, "reference", 30);
  EXPECT_EQ(ok.status, RunStatus::passed) << ok.detail;
  EXPECT_GT(ok.invariants.at(0).passed, 0);
  EXPECT_EQ(run_on(some, "doubles", 30).status, RunStatus::failed);
  // An infinite rhs is close only to itself, whatever the tolerance: judged.
  const Spec inf_rhs = with_doubling_mutant(
      with_invariant("close(target.y * 0 + inf, reference.y * 0 + inf, atol=exp(1000 + abs(x)))"));
  const RunReport equal = run_on(inf_rhs, "reference", 30);
  EXPECT_EQ(equal.status, RunStatus::passed) << equal.detail;
  EXPECT_GT(equal.invariants.at(0).passed, 0);
  // From the target's outputs: equal elements hold, unequal ones fail.
  const Spec by_target = with_doubling_mutant(
      with_invariant("close(target.y, reference.y, atol=exp(1000 + abs(target.y)), rtol=0)"));
  const RunReport same = run_on(by_target, "reference", 30);
  EXPECT_EQ(same.status, RunStatus::passed) << same.detail;
  const RunReport doubled = run_on(by_target, "doubles", 30);
  EXPECT_EQ(doubled.status, RunStatus::failed) << doubled.detail;
  ASSERT_TRUE(doubled.invariants.at(0).counterexample);
  EXPECT_NE(doubled.invariants.at(0).counterexample->message.find(
                "read from the target's outputs, allows an infinite error"),
            std::string::npos)
      << doubled.invariants.at(0).counterexample->message;
}

// rows_independent compares the outputs with the batch axis only: a loss
// reduced over the rows is the batch's as a whole (a correct cross-entropy
// failed: the loss of one row alone is not the batch's mean).
TEST(OpRowsIndependent, AnOutputWithoutTheBatchAxisIsNotSliced) {
  const std::string text = R"(spec: rows_and_loss
family: op
op:
  dims: {N: [1, 4], V: [1, 5]}
  inputs:
    x: {shape: [N, V], dtype: f64}
  outputs:
    rows: {shape: [N]}
    loss: {shape: []}
  reference:
    rows: sum(x, axis=-1)
    loss: mean(sum(x, axis=-1))
invariants: [rows_independent]
)";
  const RunReport ok = run_on(with_doubling_mutant(text), "reference", 40);
  EXPECT_EQ(ok.status, RunStatus::passed) << ok.detail;
  EXPECT_GT(ok.invariants.at(0).passed, 0);
}

// The reference passes the one relation of `text` over `trials` cases, some
// checked and some discarded (the transform did not apply).
void expect_checked_and_discarded(const std::string& text, int trials) {
  const RunReport r = run_on(with_doubling_mutant(text), "reference", trials);
  EXPECT_EQ(r.status, RunStatus::passed) << r.detail;
  EXPECT_GT(r.invariants.at(0).passed, 0);
  EXPECT_GT(r.invariants.at(0).discarded, 0);
}

// A mutant that adds `factor` × row 0 of the first output to each later row
// (rows: the first dim; a row holds the product of the other dims).
void plant_leak(Spec& spec, double factor) {
  plant_mutants(spec, [factor](OpFamily& f) {
    f.mutant("leaks", "adds a multiple of row 0 to every later row", [factor](const Case& c) {
      Result r = op::reference(c);
      const size_t row = r.outputs[0].size() / static_cast<size_t>(c.dims[0]);
      for (size_t k = row; k < r.outputs[0].size(); ++k) r.outputs[0][k] += factor * r.outputs[0][k % row];
      return r;
    });
  });
}

// A scale transform that takes a finite f16 input past 65504 makes a case
// the relation does not speak of (inf · 0 = NaN failed a correct kernel):
// transform.applies is false there and the case is discarded.
TEST(OpTransforms, AScaleThatOverflowsTheDtypeIsDiscardedNotFailed) {
  const std::string text = R"(spec: scaled
family: op
op:
  dims: {T: [1, 4]}
  inputs:
    x: {shape: [T], dtype: f16, values: [normal, {uniform: {lo: 30000, hi: 60000}}]}
    w: {shape: [T], dtype: f16, values: {uniform: {lo: 0, hi: 0}}}
  outputs:
    y: {shape: [T]}
  reference:
    y: x * w
run: {suppress_health_check: [discarded]}
invariants:
  - name: linear_in_x
    transform: {scale: {x: 2.0}}
    expect: close(transformed.target.y, 2 * target.y, k=2)
)";
  expect_checked_and_discarded(text, 60);
}

// A permutation transform draws one that moves something: at T = 2 the
// only one is the swap (the identity, drawn half the time, compared the case
// with itself and passed). At T = 1 none moves anything: every case was
// discarded and the run gave up; the spec is now refused at the transform.
TEST(OpTransforms, APermutationNeverComparesTheCaseWithItself) {
  const auto spec = [](const char* dims) {
    return std::string("spec: perm\nfamily: op\nop:\n  dims: ") + dims +
           "\n  inputs:\n    x: {shape: [T], dtype: f64}\n  outputs:\n    y: {shape: [T]}\n  reference:\n"
           "    y: x * 2\ninvariants:\n  - name: moved\n    transform: permute_T\n"
           "    expect: transform.perm[0] == 1 and close(transformed.target.y, target.y[transform.perm])\n";
  };
  const RunReport swapped = run_on(parse_spec(spec("{T: [2, 2]}"), "perm.yaml"), "reference", 60);
  EXPECT_EQ(swapped.status, RunStatus::passed) << swapped.detail;
  EXPECT_EQ(swapped.invariants.at(0).passed, 60);
  EXPECT_EQ(
      kprop::testing::spec_load_error(spec("{T: [1, 1]}"), "perm.yaml"),
      "perm.yaml:13:16: invariant moved: transform permute_T needs dim T to reach 2 (it is at most 1: no "
      "permutation moves anything)");
  // Where some cases have T = 1, those are discarded and the others checked.
  const RunReport some = run_on(parse_spec(spec("{T: [1, 2]}"), "perm.yaml"), "reference", 60);
  EXPECT_EQ(some.status, RunStatus::passed) << some.detail;
  EXPECT_GT(some.invariants.at(0).discarded, 0);
}

// y = x * factor over x uniform in [lo, hi] of one dtype, matches_reference
// only (or the invariants given).
std::string scaling_spec(const char* dtype, int lo, int hi, int factor,
                         const std::string& invariants = "[matches_reference]") {
  return fmt::format(
      "spec: scaling\nfamily: op\nop:\n  dims: {{T: [1, 4]}}\n  inputs:\n    x: {{shape: [T], dtype: {}, "
      "values: "
      "{{uniform: {{lo: {}, hi: {}}}}}}}\n  outputs:\n    y: {{shape: [T]}}\n  reference:\n    y: x * {}\n"
      "invariants: {}\n",
      dtype, lo, hi, factor, invariants);
}

// An f16 output whose reference lies past the overflow threshold by more
// than any rounding: a store rounding to nearest gives inf, so a kernel that
// saturates to 65504 fails (the element was skipped as one the dtype cannot
// carry, and such a kernel passed); the naive kernel's inf passes. The same
// with close(k=) in an expression (overflow.y), where the element was not
// judged either and a kernel writing 0 or 65504 there passed.
TEST(OpClosePolicy, AHalfStoreThatMustOverflowIsInfNotTheLargestFinite) {
  const auto with_mutants = [](const std::string& text) {
    return with_doubling_mutant(text, [](OpFamily& f) {
      f.mutant("saturates", "stores 65504 where the value overflows f16", [](const Case& c) {
        Result r = op::naive(c);
        for (double& v : r.outputs[0]) v = std::clamp(v, -65504.0, 65504.0);
        return r;
      });
      f.mutant("zero_on_overflow", "stores 0 where the value overflows f16", [](const Case& c) {
        Result r = op::naive(c);
        for (double& v : r.outputs[0]) v = std::isfinite(v) ? v : 0;
        return r;
      });
    });
  };
  const std::string expression = "[{name: close_k, expect: 'close(target.y, reference.y, k=2)'}]";
  for (const std::string& invariants : {std::string("[matches_reference]"), expression}) {
    // Every y = 4x lies in [80000, 240000]: past 65520 by far more than the budget.
    const Spec spec = with_mutants(scaling_spec("f16", 20000, 60000, 4, invariants));
    for (const char* target : {"naive", "reference"}) {
      const RunReport ok = run_on(spec, target, 50);
      EXPECT_EQ(ok.status, RunStatus::passed) << invariants << " " << target << ": " << ok.detail;
      EXPECT_EQ(ok.invariants.at(0).passed, 50) << invariants << " " << target;
    }
    for (const char* target : {"saturates", "zero_on_overflow"}) {
      const RunReport bad = run_on(spec, target, 50);
      ASSERT_EQ(bad.status, RunStatus::failed) << invariants << " " << target;
      const std::string& why = bad.invariants.at(0).counterexample->message;
      EXPECT_TRUE(why.find("a store rounding to nearest gives inf") != std::string::npos ||
                  why.find("a store rounding to nearest gives ±inf") != std::string::npos)
          << why;
    }
  }
  // Below the threshold (y = x in [20000, 60000]) nothing must overflow:
  // the elements are compared, and all pass.
  const Spec below = with_mutants(scaling_spec("f16", 20000, 60000, 1, expression));
  for (const char* target : {"naive", "saturates", "zero_on_overflow"})
    EXPECT_EQ(run_on(below, target, 50).status, RunStatus::passed) << target;
}

// Replays one stored case of `spec` on `target`: the file's verdict.
ReplayVerdict replay_case(const Spec& spec, const std::string& target, const std::string& case_yaml) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("kprop_op_policy_case_{}", getpid());
  std::filesystem::create_directories(dir);
  const auto file = dir / "case.yaml";
  std::ofstream(file) << "kprop_corpus: 1\nspec: " << spec.name
                      << "\nfamily: op\ninvariant: matches_reference\nfound_against: reference\ncase: "
                      << case_yaml << "\n";
  RunOptions o = scratch_run(target, 7, 1, "kprop_op_policy_test");
  const auto rows = replay_corpus(spec, file.string(), o);
  std::filesystem::remove_all(dir);
  return rows.size() == 1 ? replay_verdict(rows[0]) : ReplayVerdict::error;
}

// A reference within the bound of the overflow threshold: the kernel's
// value before the store may lie past it, and the store then rounds to
// ±inf. y = 4 · 16376 = 65504 with a bound of ~32 (the f16 store's half
// ulp): an f32 value of 65520 stores inf, a correct kernel's answer that
// matches_reference, finite_outputs and close(k=) all failed; and
// rows_independent, where the batch's run stored inf and the slice alone 65504.
TEST(OpClosePolicy, AStoreThatMayOverflowNearTheThresholdIsNoFailure) {
  const std::string invariants =
      "[matches_reference, finite_outputs, rows_independent, "
      "{name: close_k, expect: 'close(target.y, reference.y, k=2)'}]";
  const Spec spec = with_doubling_mutant(scaling_spec("f16", 8000, 16376, 4, invariants), [](OpFamily& f) {
    f.mutant("inf_at_the_top", "stores inf where y is 65504 (an f32 value of 65520 before the store)",
             [](const Case& c) {
               Result r = op::naive(c);
               for (double& v : r.outputs[0]) v = v >= 65504 ? HUGE_VAL : v;
               return r;
             });
    f.mutant("inf_in_batches", "stores inf where y is 65504 in a batch of 2 or more", [](const Case& c) {
      Result r = op::naive(c);
      for (double& v : r.outputs[0]) v = v >= 65504 && c.dims[0] >= 2 ? HUGE_VAL : v;
      return r;
    });
    f.mutant("inf_below", "stores inf where y is 32768 or more", [](const Case& c) {
      Result r = op::naive(c);
      for (double& v : r.outputs[0]) v = v >= 32768 ? HUGE_VAL : v;
      return r;
    });
  });
  const std::string top = "{dtype: f16, dims: {T: 2}, inputs: {x: {dtype: f16, values: [16376, 9000]}}}";
  EXPECT_EQ(replay_case(spec, "inf_at_the_top", top), ReplayVerdict::passed);
  EXPECT_EQ(replay_case(spec, "naive", top), ReplayVerdict::passed);
  EXPECT_EQ(replay_case(spec, "inf_in_batches", top), ReplayVerdict::passed);
  // Far from the threshold (y = 36000), inf is still wrong, for every invariant.
  const std::string below = "{dtype: f16, dims: {T: 1}, inputs: {x: {dtype: f16, values: [9000]}}}";
  for (const char* only : {"matches_reference", "finite_outputs", "close_k"}) {
    Spec one = spec;
    std::erase_if(one.invariants, [&](const InvariantUse& u) { return u.name != only; });
    EXPECT_EQ(replay_case(one, "inf_below", below), ReplayVerdict::failed) << only;
  }
}

// A store that had to overflow is judged under the full floor (with the
// reference's own rounding bound) before it fails, as any other mismatch:
// an f16 dot product whose reference, 65628.4, lies past the threshold by
// more than the cheap floor (32) but not the full one (~1722). An f32 sum
// in reverse order gives 65500.4, stored 65504: within the policy, and the
// element cannot be judged (the naive sum overflows), so nothing fails.
TEST(OpClosePolicy, AStoreThatMustOverflowIsJudgedUnderTheFullFloor) {
  const std::string text = R"(spec: hdot
family: op
op:
  dims: {K: [4, 4]}
  inputs:
    x: {shape: [K], dtype: f16}
    w: {shape: [K], dtype: f16}
  outputs:
    y: {shape: [1]}
  reference:
    y: sum(x * w, keepdims=true)
invariants: [matches_reference]
)";
  const Spec spec = with_doubling_mutant(text, [](OpFamily& f) {
    f.mutant("reverse_f32", "sums x·w in f32 from the last element, then stores f16", [](const Case& c) {
      float acc = 0;
      for (size_t k = c.inputs[0].size(); k-- > 0;)
        acc += static_cast<float>(c.inputs[0][k]) * static_cast<float>(c.inputs[1][k]);
      Result r = op::naive(c);
      r.outputs[0] = {half::round_to_f16(acc)};
      return r;
    });
  });
  const std::string c =
      "{dtype: f16, dims: {K: 4}, inputs: {x: {dtype: f16, values: [1, 38752, 37856, 256]}, "
      "w: {dtype: f16, values: [-35.59375, -60960, 62400, 676.5]}}}";
  const ReplayVerdict v = replay_case(spec, "reverse_f32", c);
  EXPECT_NE(v, ReplayVerdict::failed);
  EXPECT_NE(v, ReplayVerdict::error);
}

// Another oracle than the spec's reference (--reference, Python's
// reference=): the bound is k × the naive computation's error against the
// spec's own fp64 reference, not against the oracle. Against the oracle,
// its difference from the spec's formula counted as rounding: 2y passed
// against an oracle of 1.5y, and y against one of 1.5y.
// The same for close(k=) in an expression: its budget and masks read the
// family's own reference (own:reference.y), the comparison the oracle.
TEST(OpClosePolicy, AnotherOracleDoesNotWidenTheBound) {
  const std::string expression = "[{name: close_k, expect: 'close(target.y, reference.y, k=2)'}]";
  for (const std::string& invariants : {std::string("[matches_reference]"), expression}) {
    const Spec spec = with_doubling_mutant(scaling_spec("f32", 1, 2, 3, invariants), [](OpFamily& f) {
      // An implementation, not a mutant: a mutant is refused as an oracle.
      f.implementation({"one_and_half", ImplKind::optimized, "another oracle: returns 1.5y"},
                       [](const Case& c) {
                         Result r = op::reference(c);
                         for (double& v : r.outputs[0]) v *= 1.5;
                         return r;
                       });
    });
    for (const char* target : {"doubles", "reference"}) {
      RunOptions o = scratch_run(target, 7, 30, "kprop_op_policy_test");
      o.reference = "one_and_half";
      const RunReport r = run_spec(spec, o);
      EXPECT_EQ(r.status, RunStatus::failed) << invariants << " " << target;
    }
    // The oracle that agrees with the spec's reference passes the correct kernel.
    RunOptions o = scratch_run("naive", 7, 30, "kprop_op_policy_test");
    o.reference = "reference";
    const RunReport r = run_spec(spec, o);
    EXPECT_EQ(r.status, RunStatus::passed) << invariants;
    EXPECT_EQ(r.invariants.at(0).passed, 30) << invariants;
  }
}

// An op whose f64 output cancels (below), without its invariants.
const char* const kCancelSpec = R"(spec: cancel
family: op
op:
  dims: {T: [1, 4]}
  inputs:
    x: {shape: [T], dtype: f64, values: [integer, normal]}
  outputs:
    y: {shape: [T]}
  reference:
    y: 1 - 0.7 * x - 0.3 * x
)";

// An f64 output that cancels: 1 - 0.7x - 0.3x is 5.6e-17 in fp64 at x = 1,
// where the exact value (and a kernel computing 1 - x) is 0. The floor
// scaled with |output| (1e-31 there), so the correct kernel failed; it now
// carries the reference's own rounding bound, which follows the terms.
// close(k=) in an expression has the same floor: it judges with the floor's
// lower bound first (without that rounding bound, TensorMap::
// put_with_lower_bound) and must take the full floor where that fails.
TEST(OpClosePolicy, AnF64OutputThatCancelsIsJudgedByItsTermsRounding) {
  for (const char* invariants :
       {"[matches_reference]", "[{name: close_expr, expect: 'close(target.y, reference.y, k=2)'}]"}) {
    const std::string text = std::string(kCancelSpec) + "invariants: " + invariants + "\n";
    const Spec spec = with_doubling_mutant(text, [](OpFamily& f) {
      f.mutant("algebra", "1 - x, exactly rounded", [](const Case& c) {
        Result r;
        r.outputs.push_back({});
        for (double x : c.inputs[0]) r.outputs[0].push_back(1 - x);
        return r;
      });
    });
    const RunReport ok = run_on(spec, "algebra", 200);
    EXPECT_EQ(ok.status, RunStatus::passed) << invariants << ": " << ok.detail;
    EXPECT_EQ(ok.invariants.at(0).passed, 200) << invariants;
    const RunReport bad = run_on(spec, "doubles", 200);
    EXPECT_EQ(bad.status, RunStatus::failed) << invariants;
  }
}

// A failing close(k=) explained inside an `or` states the budget the
// verdict used: the budget taken with the floor's lower bound (in the
// evaluation's store of shared values) served the `or`'s operand when it
// was judged on its own, which said "allowed 1.33e-15" where the full
// floor allows 1.78e-15.
TEST(OpClosePolicy, AnExplainedCloseStatesTheFullBudget) {
  const std::string close = "close(target.y, 1 - x + where(x == 1, 0, 1e-3), k=2)";
  const Spec spec = parse_spec(std::string(kCancelSpec) + "invariants:\n  - {name: in_or, expect: '" + close +
                                   " or x > 1e300'}\n  - {name: alone, expect: '" + close + "'}\n",
                               "cancel.yaml");
  const RunReport r = run_on(spec, "reference", 50);
  std::string allowed[2];
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(r.invariants.at(i).counterexample) << i;
    const std::string& m = r.invariants.at(i).counterexample->message;
    const size_t at = m.find("> allowed ");
    ASSERT_NE(at, std::string::npos) << m;
    allowed[i] = m.substr(at, m.find(' ', at + 10) - at);
  }
  EXPECT_EQ(allowed[0], allowed[1]);
}

// A layer norm over a row constant but for an ulp (what a search found):
// x - mean(x) is exactly 0 in fp64 at some elements but carries the mean's
// rounding. Its `** 2` had the bound 0/0 = NaN there, which the variance's
// mean spread over the row, and the floor, the largest finite bound, fell to
// 4.5e-26 (a NumPy layer norm, 2 ulps of x off, failed at 9e-12). The power
// and the product now give the same floor, which a correct kernel (the same
// two passes, each sum taken from the last element) stays within.
TEST(OpClosePolicy, APowerOfAnExactZeroKeepsItsOperandsRoundingInTheFloor) {
  const auto spec_text = [](const std::string& square) {
    return "spec: ln\nfamily: op\nop:\n  dims: {T: [1, 4], D: [1, 16]}\n  inputs:\n"
           "    x: {shape: [T, D], dtype: f64}\n  outputs:\n    y: {shape: [T, D]}\n  reference:\n"
           "    y: (x - mean(x, axis=-1, keepdims=true)) / sqrt(mean(" +
           square + ", axis=-1, keepdims=true) + 1e-5)\ninvariants: [matches_reference]\n";
  };
  const std::string a = "(x - mean(x, axis=-1, keepdims=true))";
  const Spec pow = parse_spec(spec_text(a + " ** 2"), "ln.yaml"),
             mul = parse_spec(spec_text(a + " * " + a), "ln.yaml");
  const std::vector<double> row = {100.9163630544963,  100.9163630544963,  100.9163630544963,
                                   100.91636305449634, 100.91636305449634, 100.91636305449634,
                                   100.91636305449634, 100.91636305449634, 100.9163630544963,
                                   100.9163630544963,  100.9163630544963};
  YAML::Node n = YAML::Load("{dtype: f64, dims: {T: 1, D: 11}, inputs: {x: {dtype: f64}}}");
  YAML::Node values(YAML::NodeType::Sequence), r(YAML::NodeType::Sequence);
  for (double v : row) r.push_back(fmt::format("{}", v));
  values.push_back(r);
  n["inputs"]["x"]["values"] = values;
  double floors[2];
  std::vector<double> ref;
  for (int k = 0; k < 2; ++k) {
    const Case c = as_case(op_family(k == 0 ? pow : mul).from_yaml(n));
    ref = op::reference(c).outputs[0];
    floors[k] = floor_of(c, 0, ref);
  }
  EXPECT_NEAR(floors[0], floors[1], 1e-9 * floors[1]);
  double mean = 0, var = 0, worst = 0;
  for (size_t i = row.size(); i-- > 0;) mean += row[i];
  mean /= double(row.size());
  for (size_t i = row.size(); i-- > 0;) var += (row[i] - mean) * (row[i] - mean);
  var /= double(row.size());
  for (size_t i = 0; i < row.size(); ++i)
    worst = std::max(worst, std::fabs((row[i] - mean) / std::sqrt(var + 1e-5) - ref[i]));
  EXPECT_LE(worst, floors[0]);
}

// (x - mean(x)) · s on a constant row with s = ±inf: 0 · inf = NaN in fp64,
// and ±1 ulp · inf = ±inf in f32 wherever the mean rounds off the row's
// value. Which one a correct kernel gets is rounding's choice: kprop's own
// naive target failed both matches_reference and close(k=) ("target.y[0] =
// -inf but reference = -nan") on seeds 1 to 3. Such elements are not
// judged; where the baseline agrees with a non-finite reference it is, and
// a kernel writing NaN for the reference's inf still fails.
TEST(OpClosePolicy, ANonFiniteReferenceTheBaselineDoesNotReachIsNotJudged) {
  const std::string text = R"(spec: nan_cancel
family: op
op:
  dims: {D: [1, 16]}
  inputs:
    x: {shape: [D], dtype: f32, values: [constant_rows, normal]}
    s: {shape: [D], values: [normal], specials: {rate: 0.3, values: [inf, -inf]}}
  outputs:
    y: {shape: [D]}
  reference:
    y: (x - mean(x, axis=-1, keepdims=true)) * s
run: {trials: 200}
invariants:
  - matches_reference
  - name: close_k
    expect: close(target.y, reference.y, k=2)
)";
  Spec spec = parse_spec(text, "nan_cancel.yaml");
  plant_mutants(spec, [](OpFamily& f) {
    f.mutant("nan_for_inf", "writes NaN where y is ±inf", [](const Case& c) {
      Result r = op::reference(c);
      for (double& v : r.outputs[0])
        if (std::isinf(v)) v = NAN;
      return r;
    });
  });
  for (const uint64_t seed : {1, 2, 3}) {
    const RunReport naive = run_spec(spec, scratch_run("naive", seed, 200, "kprop_op_policy_test"));
    EXPECT_EQ(naive.status, RunStatus::passed) << seed << " " << naive.detail;
    const RunReport bad = run_spec(spec, scratch_run("nan_for_inf", seed, 200, "kprop_op_policy_test"));
    EXPECT_EQ(bad.status, RunStatus::failed) << seed;
    for (const auto& i : bad.invariants)
      EXPECT_EQ(i.status, InvariantStatus::failed) << i.name << " " << seed;
  }
}

// An f32 sum whose terms cancel: the naive baseline adds in index order and
// can be exact by luck (integers, short decimals: what shrinking finds),
// while a correct kernel adding the same products as a pairwise tree errs by
// an ulp of the terms. The floor followed |output| alone: a NumPy
// np.sum(x * w, axis=-1) failed a dot product spec on seed 3, shrunk to
// -0.4 over terms of size 8 (error 4.77e-7 against a floor of 4.77e-7). It
// now covers the tree sum's first-order bound; a dropped term still fails.
TEST(OpClosePolicy, AnF32SumThatCancelsAllowsATreeSumsRounding) {
  const std::string text = R"(spec: dot
family: op
op:
  dims: {T: [1, 8], K: [1, 512]}
  inputs:
    x: {shape: [T, K], dtype: f32, values: [normal, integer, constant_rows]}
    w: {shape: [K], values: [normal]}
  outputs:
    y: {shape: [T]}
  reference:
    y: sum(x * w, axis=-1)
invariants: [matches_reference]
)";
  // Row t's products x[t, k] · w[k] in f32, added by `add` over [0, n).
  using Adder = std::function<float(const std::vector<float>&, size_t, size_t)>;
  const auto dot = [](const Case& c, const Adder& add, size_t n_used) {
    const size_t t_n = static_cast<size_t>(c.dims[0]), k_n = static_cast<size_t>(c.dims[1]);
    Result r;
    r.outputs.push_back({});
    for (size_t t = 0; t < t_n; ++t) {
      std::vector<float> p(k_n);
      for (size_t k = 0; k < k_n; ++k)
        p[k] = static_cast<float>(c.inputs[0][t * k_n + k]) * static_cast<float>(c.inputs[1][k]);
      r.outputs[0].push_back(add(p, 0, std::min(n_used, k_n)));
    }
    return r;
  };
  static const Adder pairwise = [](const std::vector<float>& p, size_t lo, size_t hi) -> float {
    if (hi - lo == 0) return 0.0f;
    if (hi - lo == 1) return p[lo];
    const size_t mid = lo + (hi - lo) / 2;
    return pairwise(p, lo, mid) + pairwise(p, mid, hi);
  };
  const Spec spec = with_doubling_mutant(text, [&](OpFamily& f) {
    f.mutant("pairwise", "the products added as a pairwise tree in f32",
             [=](const Case& c) { return dot(c, pairwise, SIZE_MAX); });
    f.mutant("drops_last", "pairwise, without the last product", [=](const Case& c) {
      return dot(c, pairwise, static_cast<size_t>(std::max<int64_t>(c.dims[1] - 1, 1)));
    });
  });
  for (const uint64_t seed : {1, 2, 3, 4, 5}) {
    const RunReport ok = run_spec(spec, scratch_run("pairwise", seed, 300, "kprop_op_policy_test"));
    EXPECT_EQ(ok.status, RunStatus::passed) << "seed " << seed << ": " << ok.detail;
    const RunReport bad = run_spec(spec, scratch_run("drops_last", seed, 300, "kprop_op_policy_test"));
    EXPECT_EQ(bad.status, RunStatus::failed) << "seed " << seed;
  }
}

// A reference expression whose shape or evaluation goes wrong on a case (a
// slice's `?` extent taken at load to be what it broadcasts with): the
// spec's error at the expression, for the reference as target and as
// oracle. The slice's [T, 0] result crashed prop_runner in the comparison;
// the broadcast error was a "target threw" counterexample.
TEST(OpClosePolicy, AReferenceThatGoesWrongOnACaseIsTheSpecsError) {
  const auto spec = [](const std::string& d) {
    return R"(spec: refshape
family: op
op:
  dims: {T: [1, 2], D: )" +
           d + R"(}
  inputs:
    x: {shape: [T, D], dtype: f64}
    w: {shape: [D]}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: x[:, 1:] + 0 * w
invariants: [matches_reference]
)";
  };
  for (const char* target : {"reference", "doubles"}) {
    const std::string empty = run_error(spec("[1, 1]"), target);
    EXPECT_NE(empty.find("overflow.yaml:11:8: reference.y: `x[:, 1:] + 0 * w` has shape [1, 0] on this case, "
                         "but output y is declared [T, D] = [1, 1]"),
              std::string::npos)
        << target << ": " << empty;
    const std::string broadcast = run_error(spec("[3, 3]"), target);
    EXPECT_NE(
        broadcast.find("overflow.yaml:11:8: reference.y: `x[:, 1:] + 0 * w` cannot be evaluated on this "
                       "case: shapes"),
        std::string::npos)
        << target << ": " << broadcast;
  }
}

// rows_independent compares a slice computed alone with the same slice of
// the batch. Where the naive f32 computation overflows on every element
// (x * x of x ~ 1e25), no element is judged: the case says nothing and is
// discarded, as matches_reference discards it. It was counted passed, and
// a kernel leaking row 0 into the later rows passed every case.
TEST(OpRowsIndependent, ASliceWhereNothingIsJudgedIsDiscardedNotPassed) {
  const std::string text = R"(spec: overflowing_rows
family: op
op:
  dims: {T: [1, 8], D: [1, 4]}
  inputs:
    x: {shape: [T, D], dtype: f32, values: {uniform: {lo: 1.0e25, hi: 1.0e26}}}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: x * x / x
invariants:
  - name: rows_independent
    batch_dims: [T]
)";
  Spec spec = parse_spec(text, "rows.yaml");
  plant_leak(spec, 1e20);
  for (const char* target : {"leaks", "reference"}) {
    const RunReport r = run_on(spec, target, 40);
    EXPECT_EQ(r.status, RunStatus::gave_up) << target << ": " << r.detail;
    EXPECT_EQ(r.invariants.at(0).passed, 0) << target;
    const std::string& why = r.invariants[0].last_discard;
    EXPECT_TRUE(why.find("overflows on every element") != std::string::npos ||
                why.find("nothing to slice") != std::string::npos)
        << why;
  }
  // Where the values fit f32, the leak is seen.
  std::string fits = text;
  fits.replace(fits.find("1.0e25, hi: 1.0e26"), 18, "1, hi: 2");
  Spec small = parse_spec(fits, "rows.yaml");
  plant_leak(small, 1);
  EXPECT_EQ(run_on(small, "leaks", 40).status, RunStatus::failed);
  EXPECT_EQ(run_on(small, "reference", 40).status, RunStatus::passed);
}

// permute_DIM (and slice_DIM) moves masks with the other inputs. A padding row permuted is
// no prefix, a causal mask permuted along its rows no causal mask: rebuilt,
// the derived case was another case, and the reference failed a true
// relation (a masked sum is invariant under permuting L). Such a case is
// discarded (transform.applies false); where the permuted mask is still
// one of its kind (permuting B moves whole padding rows), it is checked.
TEST(OpTransforms, APermutationThatBreaksAMaskDoesNotApply) {
  const auto padding = [](const char* dim, const char* expect) {
    return fmt::format(R"(spec: masked_sum
family: op
op:
  dims: {{B: [1, 4], L: [1, 8]}}
  inputs:
    x: {{shape: [B, L], dtype: [f32, f64]}}
    mask: {{shape: [B, L], values: padding}}
  outputs:
    y: {{shape: [B]}}
  reference:
    y: sum(where(mask, x, 0), axis=-1)
run: {{suppress_health_check: [discarded]}}
invariants:
  - name: permuted
    transform: permute_{}
    expect: {}
)",
                       dim, expect);
  };
  const RunReport along_l = run_on(
      parse_spec(padding("L", "close(transformed.target.y, target.y, k=2)"), "sum.yaml"), "reference", 100);
  EXPECT_NE(along_l.status, RunStatus::failed) << along_l.detail;
  EXPECT_GT(along_l.invariants.at(0).discarded, 0);
  const Spec along_b_spec =
      with_doubling_mutant(padding("B", "close(transformed.target.y, target.y[transform.perm], k=2)"));
  const RunReport along_b = run_on(along_b_spec, "reference", 100);
  EXPECT_EQ(along_b.status, RunStatus::passed) << along_b.detail;
  EXPECT_GT(along_b.invariants.at(0).passed, 0);
  const std::string causal = R"(spec: causal_sum
family: op
op:
  dims: {N: [1, 6]}
  inputs:
    x: {shape: [N, N], dtype: f64}
    mask: {shape: [N, N], values: causal}
  outputs:
    y: {shape: [N]}
  reference:
    y: sum(where(mask, x, 0), axis=-1)
invariants:
  - name: rows_move_with_perm
    transform: permute_N
    expect: close(transformed.target.y, target.y[transform.perm], k=2)
)";
  const RunReport c = run_on(parse_spec(causal, "causal.yaml"), "reference", 60);
  EXPECT_EQ(c.status, RunStatus::gave_up) << c.detail;
  EXPECT_EQ(c.invariants.at(0).passed, 0);
  // A run of padding columns (slice_L), or the last column alone
  // (rows_independent along L), is no padding mask where it starts past a
  // row's prefix: rebuilt, it unmasked x there and the reference failed.
  const std::string columns = R"(spec: masked
family: op
op:
  dims: {B: [1, 4], L: [1, 8]}
  inputs:
    x: {shape: [B, L], dtype: f64}
    mask: {shape: [B, L], values: padding}
  outputs:
    y: {shape: [B, L]}
  reference:
    y: where(mask, x, 0)
run: {suppress_health_check: [discarded]}
invariants:
  - name: columns_alone
    transform: slice_L
    expect: close(transformed.target.y, target.y[:, transform.index], k=2)
  - name: rows_independent
    batch_dims: [L]
)";
  const RunReport cut = run_on(parse_spec(columns, "columns.yaml"), "reference", 200);
  EXPECT_EQ(cut.status, RunStatus::passed) << cut.detail;
  for (const auto& i : cut.invariants) {
    EXPECT_GT(i.passed, 0) << i.name;
    EXPECT_GT(i.discarded, 0) << i.name;
  }
}

// scale by 0.5, a factor exact in binary, still rounds a subnormal with its
// last bit set (f32, f16, bf16 alike): the reference failed
// close(transformed.target.y, 0.5 * target.y). A case where any product is
// inexact in its dtype is discarded; the exact ones are checked.
TEST(OpTransforms, AScaleThatRoundsAnInputDoesNotApply) {
  const std::string text = R"(spec: halved
family: op
op:
  dims: {T: [1, 4], D: [1, 8]}
  inputs:
    x: {shape: [T, D], dtype: [f32, f16, bf16], values: [normal, denormal]}
    w: {shape: [D], values: {uniform: {lo: 10, hi: 100}}}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: x * w
run: {suppress_health_check: [discarded]}
invariants:
  - name: half_x_halves_y
    transform: {scale: {x: 0.5}}
    expect: close(transformed.target.y, 0.5 * target.y, k=2)
)";
  expect_checked_and_discarded(text, 300);
}

// With no `invariants:` key, rows_independent is checked along the first
// output's first dim only where the declaration proves it a batch dim. A
// reduction over it (x / sum(x)), a contraction over it (x[N, 1] * w[1, N]
// summed), ids below it: no default, and the reference passes every
// default invariant (it failed rows_independent). Listed without
// batch_dims there, it is a load error at its name.
TEST(OpRowsIndependent, TheDefaultBatchDimIsOneTheDeclarationProves) {
  const auto names = [](const Spec& spec) {
    std::vector<std::string> out;
    for (const auto& i : spec.invariants) out.push_back(i.name);
    return out;
  };
  const std::vector<std::string> without{"matches_reference", "finite_outputs", "deterministic"};
  const std::vector<std::pair<const char*, const char*>> mixing = {
      {"N: [1, 16]}\n  inputs:\n    x: {shape: [N], values: {uniform: {lo: 1, hi: 2}}}",
       "{shape: [N]}\n  reference:\n    y: x / sum(x)"},
      {"N: [1, 64]}\n  inputs:\n    x: {shape: [N, 1]}\n    w: {shape: [1, N]}",
       "{shape: [N]}\n  reference:\n    y: sum(x * w, axis=-1)"},
      {"D: [1, 4]}\n  inputs:\n    x: {shape: [D], values: {ids: {below: D}}}",
       "{shape: [D]}\n  reference:\n    y: x"},
      {"N: [1, 8]}\n  inputs:\n    x: {shape: [N]}", "{shape: [N]}\n  reference:\n    y: x * N"},
      {"N: [1, 8]}\n  inputs:\n    x: {shape: [N]}", "{shape: [N]}\n  reference:\n    y: cumsum(x)"},
  };
  for (const auto& [dims, output] : mixing) {
    const std::string text =
        fmt::format("spec: mixing\nfamily: op\nop:\n  dims: {{{}\n  outputs:\n    y: {}\n", dims, output);
    const std::string err = load_error(text);
    if (!err.empty()) {
      ADD_FAILURE() << text << "\n" << err;
      continue;
    }
    const Spec spec = parse_spec(text, "mixing.yaml");
    EXPECT_EQ(names(spec), without) << text;
    const RunReport r = run_on(spec, "reference", 60);
    EXPECT_EQ(r.status, RunStatus::passed) << text << r.detail;
    const std::string listed = load_error(text + "invariants: [rows_independent]\n");
    EXPECT_NE(listed.find("invariant rows_independent needs batch_dims"), std::string::npos) << listed;
  }
  // Elementwise, reductions and matmuls over other axes: the default stays,
  // and a leak across rows is caught.
  std::vector<std::string> with = without;
  with.push_back("rows_independent");
  for (const char* reference :
       {"x / sqrt(mean(x * x, axis=-1, keepdims=true) + 1) * w",
        "x @ transpose(m) + sum(x, axis=1, keepdims=true)", "where(x > 0, x, -x) * D"}) {
    const std::string text = fmt::format(
        "spec: rows\nfamily: op\nop:\n  dims: {{T: [1, 6], D: [1, 4]}}\n  inputs:\n    x: {{shape: [T, D]}}\n"
        "    w: {{shape: [D]}}\n    m: {{shape: [D, D]}}\n  outputs:\n    y: {{shape: [T, D]}}\n  "
        "reference:\n"
        "    y: {}\n",
        reference);
    Spec spec = parse_spec(text, "rows.yaml");
    EXPECT_EQ(names(spec), with) << reference;
    plant_leak(spec, 1);
    EXPECT_EQ(run_on(spec, "reference", 60).status, RunStatus::passed) << reference;
    EXPECT_EQ(run_on(spec, "leaks", 60).status, RunStatus::failed) << reference;
  }
}

// Below the normal range a rounding is absolute, up to half the smallest
// subnormal, whatever |r|: x · (w · v) against the reference's (x · w) · v
// at x = 6e-308 differed by one subnormal (4.9e-324) where the bound said
// 0, and a correct f32 kernel's (x · w) · v against x · (w · v) at
// x = 2^-149 failed once its naive baseline was exact. A kernel flushing
// subnormal results to zero still fails.
TEST(OpClosePolicy, AResultBelowTheNormalRangeMayErrByHalfASubnormal) {
  Spec spec = parse_spec(R"(spec: subnormal
family: op
op:
  dims: {T: [1, 4], D: [1, 8]}
  inputs:
    x: {shape: [T, D], dtype: [f32, f64], values: [denormal]}
    w: {shape: [D], values: [normal]}
    v: {shape: [D], values: [normal]}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: x * w * v
run: {trials: 200}
invariants: [matches_reference]
)",
                         "subnormal.yaml");
  // y = x · (w · v) in the case's arithmetic; `flush`: subnormal results as 0.
  const auto kernel = [](const Case& c, bool flush) {
    const bool f32 = c.dtype == DType::f32;
    const auto rnd = [&](double a) {
      const double r = in_arithmetic(c, a);
      return flush && std::fabs(r) < (f32 ? 0x1p-126 : 0x1p-1022) ? 0.0 : r;
    };
    const auto cols = static_cast<size_t>(c.dims[1]);
    Result r;
    r.outputs.resize(1);
    for (size_t i = 0; i < c.inputs[0].size(); ++i)
      r.outputs[0].push_back(rnd(c.inputs[0][i] * rnd(c.inputs[1][i % cols] * c.inputs[2][i % cols])));
    return r;
  };
  plant_mutants(spec, [&](OpFamily& f) {
    f.mutant("reassociated", "x * (w * v)", [kernel](const Case& c) { return kernel(c, false); });
    f.mutant("flush_to_zero", "subnormal results flushed to 0",
             [kernel](const Case& c) { return kernel(c, true); });
  });
  for (uint64_t seed : {1, 2, 3}) {
    const RunReport ok = run_spec(spec, scratch_run("reassociated", seed, 200, "kprop_op_policy_test"));
    EXPECT_EQ(ok.status, RunStatus::passed) << "seed " << seed << ": " << ok.detail;
    const RunReport ftz = run_spec(spec, scratch_run("flush_to_zero", seed, 200, "kprop_op_policy_test"));
    EXPECT_EQ(ftz.status, RunStatus::failed) << "seed " << seed;
  }
}

// rounded_to_nearest: a half output is f32 arithmetic rounded once, to
// nearest, at the store, judged per element. A review's softmax kernels that
// truncate the store, round twice (half(half(e) · half(1 / l))) or keep
// exp in half before the sum passed matches_reference at every seed (its
// budget is one number for the tensor, ulps of its largest element), and
// fail here on every seed; correct kernels pass, FlashAttention's exp2 of
// the scaled argument included (a relative error of |a| · log2(e) · u).
TEST(OpRoundedToNearest, HalfStoresOffRoundToNearestFailCorrectOnesPass) {
  const std::string text = R"(spec: softmax
family: op
op:
  dims: {R: [1, 4], N: [1, 64]}
  inputs:
    x: {shape: [R, N], dtype: [f16, bf16], values: [normal, large, integer]}
  outputs:
    y: {shape: [R, N]}
  reference:
    y: >-
      exp(x - max(x, axis=-1, keepdims=true))
      / sum(exp(x - max(x, axis=-1, keepdims=true)), axis=-1, keepdims=true)
run: {trials: 100, shrink_budget_s: 1}
invariants: [matches_reference, rounded_to_nearest]
)";
  enum class How { nearest, exp2, truncated, twice, exp_in_half };
  const auto kernel = [](How how) {
    return [how](const Case& c) {
      const FloatType t = *float_type(c.dtype);
      const auto half = [&](double v) { return round_to(t, v); };
      const int64_t rows = c.dims[0], n = c.dims[1];
      std::vector<double> y(static_cast<size_t>(rows * n));
      for (int64_t r = 0; r < rows; ++r) {
        const double* x = c.inputs[0].data() + r * n;
        float m = -HUGE_VALF;
        for (int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<float>(x[j]));
        std::vector<float> e(static_cast<size_t>(n));
        float l = 0;
        for (int64_t j = 0; j < n; ++j) {
          const float a = static_cast<float>(x[j]) - m;
          float v = how == How::exp2 ? std::exp2(a * 1.44269504f) : std::exp(a);
          if (how == How::exp_in_half) v = static_cast<float>(half(v));
          e[size_t(j)] = v;
          l += v;
        }
        for (int64_t j = 0; j < n; ++j) {
          const float v = e[size_t(j)] / l;
          double& out = y[size_t(r * n + j)];
          out = half(v);
          if (how == How::truncated && std::fabs(out) > std::fabs(double(v)))
            out = std::copysign(neighbour_abs(t, v, -1), double(v));
          if (how == How::twice)
            out = half(static_cast<float>(half(e[size_t(j)])) * static_cast<float>(half(1.0f / l)));
        }
      }
      return Result{{y}};
    };
  };
  Spec spec = parse_spec(text, "softmax.yaml");
  plant_mutants(spec, [&](OpFamily& f) {
    f.mutant("nearest", "f32, one store to nearest", kernel(How::nearest));
    f.mutant("exp2", "exp as exp2 of the scaled argument", kernel(How::exp2));
    f.mutant("truncated", "stores toward zero", kernel(How::truncated));
    f.mutant("twice", "half(half(e) * half(1 / l))", kernel(How::twice));
    f.mutant("exp_in_half", "exp rounded to half before the sum", kernel(How::exp_in_half));
  });
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    // The spec's reference as the target (prop_runner's default, the fuzz
    // harness's) hands over f64 values, which kprop stores to nearest: it
    // failed, its value not being a half one.
    for (const char* correct : {"nearest", "exp2", "reference", "naive"}) {
      const RunReport r = run_spec(spec, scratch_run(correct, seed, 100, "kprop_op_policy_test"));
      EXPECT_EQ(r.status, RunStatus::passed) << correct << " seed " << seed << ": " << r.detail;
    }
    for (const char* bug : {"truncated", "twice", "exp_in_half"}) {
      const RunReport r = run_spec(spec, scratch_run(bug, seed, 100, "kprop_op_policy_test"));
      ASSERT_EQ(r.status, RunStatus::failed) << bug << " seed " << seed;
      ASSERT_TRUE(r.invariants.at(1).counterexample) << bug << " seed " << seed;
      EXPECT_NE(r.invariants[1].counterexample->message.find("store rounding to nearest gives"),
                std::string::npos)
          << r.invariants[1].counterexample->message;
    }
  }
  // Where it applies: an op with no half output, or an external reference,
  // is refused at the invariant's line.
  std::string f32_only = text;
  f32_only.replace(f32_only.find("[f16, bf16]"), 11, "[f32, f64]");
  EXPECT_NE(load_error(f32_only).find("invariant rounded_to_nearest needs an f16 or bf16 output"),
            std::string::npos)
      << load_error(f32_only);
}

// The f32 floor takes long sums as added pairwise or in blocks (⌈log2 n⌉
// additions per term). A correct kernel adding one with a single running
// total in another order (backwards, or column by column) erred by 33 ulps
// against a floor of 32 on 3540 terms: its failure says so, and with
// op.summation: sequential (n - 1 additions per term) it passes.
TEST(OpClosePolicy, ASequentialSumInAnotherOrderIsDeclaredNotFailed) {
  const std::string text = R"(spec: sumsq
family: op
op:
  dims: {T: [1, 64], D: [1, 512]}
  inputs:
    x: {shape: [T, D], dtype: f32, values: [normal, uniform]}
  outputs:
    y: {shape: []}
  reference:
    y: sum(x * x)
run: {trials: 100, shrink_budget_s: 1}
invariants: [matches_reference]
)";
  // sum(x * x) in f32, one running total, from the last element back.
  const auto backwards = [](const Case& c) {
    float total = 0;
    for (size_t i = c.inputs[0].size(); i-- > 0;) {
      const auto v = static_cast<float>(c.inputs[0][i]);
      total += v * v;
    }
    return Result{{{static_cast<double>(total)}}};
  };
  const auto planted = [&](const std::string& spec_text) {
    Spec spec = parse_spec(spec_text, "sumsq.yaml");
    plant_mutants(spec, [&](OpFamily& f) { f.mutant("backwards", "sums from the last element", backwards); });
    return spec;
  };
  const Spec tree = planted(text);
  int failed = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const RunReport r = run_spec(tree, scratch_run("backwards", seed, 100, "kprop_op_policy_test"));
    if (r.status != RunStatus::failed) continue;
    ++failed;
    ASSERT_TRUE(r.invariants.at(0).counterexample);
    EXPECT_NE(r.invariants[0].counterexample->message.find("declares op.summation: sequential"),
              std::string::npos)
        << r.invariants[0].counterexample->message;
    break;  // (one is enough)
  }
  EXPECT_GT(failed, 0);
  std::string seq = text;
  seq.replace(seq.find("op:\n"), 4, "op:\n  summation: sequential\n");
  const Spec sequential = planted(seq);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const RunReport r = run_spec(sequential, scratch_run("backwards", seed, 100, "kprop_op_policy_test"));
    EXPECT_EQ(r.status, RunStatus::passed) << "seed " << seed << ": " << r.detail;
  }
  // A bf16 output stored by truncation fails within a few times the bound,
  // but op.summation: sequential would not pass it (the store's rounding
  // dwarfs the sums' term): the failure does not suggest it (it did, for
  // any error within 16 times the bound).
  std::string half = text;
  half.replace(half.find("y: {shape: []}"), 14, "y: {shape: [], dtype: bf16}");
  half.replace(half.find("D: [1, 512]"), 11, "D: [4, 512]");
  const auto truncated = [](const Case& c) {
    float total = 0;
    for (const double x : c.inputs[0]) total += static_cast<float>(x) * static_cast<float>(x);
    uint32_t bits = 0;
    std::memcpy(&bits, &total, 4);
    bits &= 0xFFFF0000u;  // toward zero
    std::memcpy(&total, &bits, 4);
    return Result{{{static_cast<double>(total)}}};
  };
  Spec stored = parse_spec(half, "sumsq.yaml");
  plant_mutants(stored, [&](OpFamily& f) { f.mutant("truncated", "stores bf16 toward zero", truncated); });
  int truncations = 0;
  for (uint64_t seed = 1; seed <= 6 && truncations == 0; ++seed) {
    const RunReport r = run_spec(stored, scratch_run("truncated", seed, 100, "kprop_op_policy_test"));
    if (r.status != RunStatus::failed) continue;
    ++truncations;
    ASSERT_TRUE(r.invariants.at(0).counterexample);
    EXPECT_EQ(r.invariants[0].counterexample->message.find("op.summation"), std::string::npos)
        << r.invariants[0].counterexample->message;
  }
  EXPECT_GT(truncations, 0);
  std::string bad = text;
  bad.replace(bad.find("op:\n"), 4, "op:\n  summation: blocked\n");
  EXPECT_NE(load_error(bad).find(":4:14: op.summation is 'blocked': tree (pairwise or blocked sums, the "
                                 "default) or sequential"),
            std::string::npos)
      << load_error(bad);
}

// The summation hint only where the orders can differ: a term passes through
// n - 1 additions in a running total and ceil(log2 n) in a tree, more only
// from n = 4. An rmsnorm storing its output through f16 shrinks to D = 1 (a
// one-term sum) and its message blamed summation order all the same.
TEST(OpClosePolicy, NoSummationHintWhereTheSumIsTooShortForOrderToMatter) {
  Spec spec = parse_spec(R"(spec: rmsnorm
family: op
op:
  dims: {T: [1, 8], D: [1, 64]}
  attrs: {eps: {one_of: [1.0e-5]}}
  inputs:
    x: {shape: [T, D], dtype: f32}
    w: {shape: [D], values: {normal: {mean: 1, std: 0.1}}}
  outputs:
    y: {shape: [T, D]}
  reference:
    y: x / sqrt(mean(x * x, axis=-1, keepdims=true) + eps) * w
invariants: [matches_reference]
)",
                         "rmsnorm.yaml");
  plant_mutants(spec, [](OpFamily& f) {
    f.mutant("f16_store", "the output rounded through f16", [](const Case& c) {
      Result r = op::reference(c);
      for (double& v : r.outputs[0]) v = round_to(DType::f16, v);
      return r;
    });
  });
  int short_sums = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const RunReport r = run_spec(spec, scratch_run("f16_store", seed, 100, "kprop_op_policy_test"));
    ASSERT_EQ(r.status, RunStatus::failed) << "seed " << seed;
    const Finding& found = *r.invariants.at(0).counterexample;
    const int64_t d = case_node(found)["dims"]["D"].as<int64_t>();
    if (d >= 4) continue;
    ++short_sums;
    EXPECT_EQ(found.message.find("summation"), std::string::npos)
        << "seed " << seed << ", D = " << d << ": " << found.message;
  }
  EXPECT_GT(short_sums, 0);
}

}  // namespace
}  // namespace kprop::op::testing
