// What a trial holds for its expression invariants, and what the load-time
// estimate (kprop::largest_case) says it holds: the named tensors an
// invariant reads stay in the trial's map, counted once however many
// invariants read them; a metamorphic relation's derived case lives only
// while its invariant is checked.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <string>

#include "op_support.h"

namespace kprop::op::testing {
namespace {

const char* const kDoubling = R"(spec: doubling
family: op
op:
  dims: {N: [1000, 1000]}
  inputs:
    x: {shape: [N], dtype: f64}
  outputs:
    y: {shape: [N]}
  reference:
    y: x * 2
invariants:
  - matches_reference
)";

// The derived case of `scaled` is freed once the invariant is checked
// (AnyTrial::release_derived): a second check builds it again, one more run
// of the target, and the trial's times keep the runs of the freed ones.
TEST(OpMemory, ADerivedCaseLivesWhileItsInvariantIsChecked) {
  const Spec spec = parse_spec(std::string(kDoubling) +
                                   "  - name: scaled\n"
                                   "    transform: {scale: {x: 2.0}}\n"
                                   "    expect: close(transformed.target.y, 2 * target.y, k=2)\n",
                               "op.yaml");
  const InvariantUse& scaled = spec.invariants.at(1);
  ASSERT_EQ(scaled.name, "scaled");
  const Impl target = resolve_target(spec, "reference");
  const auto gen = spec.family->generator(spec.domain);
  const AnyCase c = gen(rc::Random(7), 10).value();
  auto trial = spec.family->begin_trial(c, target, target);
  EXPECT_EQ(check_invariant(*trial, scaled).outcome, Outcome::pass);
  EXPECT_EQ(trial->times().target_runs, 2);  // the case and its derived case
  EXPECT_EQ(check_invariant(*trial, scaled).outcome, Outcome::pass);
  EXPECT_EQ(trial->times().target_runs, 3);  // the derived case again; the case's run is kept
}

// Each distinct named tensor an invariant reads adds its elements (8 bytes
// each) to the estimate once: target.y and naive.y, read by two invariants,
// add 2 x 1000 doubles; an invariant's transformed.* tensors count with its
// own evaluation, not as kept.
TEST(OpMemory, TheEstimateCountsTheNamedTensorsKeptOnce) {
  const double base = largest_case(parse_spec(kDoubling, "op.yaml")).bytes;
  const std::string two = std::string(kDoubling) +
                          "  - name: a\n    expect: all(isfinite(target.y) or isfinite(naive.y))\n"
                          "  - name: b\n    expect: all(isfinite(target.y) or isfinite(naive.y))\n";
  const double with_two = largest_case(parse_spec(two, "op.yaml")).bytes;
  // Each evaluation's own peak: isfinite of both (2000), their `or` (1000),
  // then all: 3000 elements at most.
  EXPECT_EQ(with_two - base, 8.0 * (2 * 1000 + 3000));
}

}  // namespace
}  // namespace kprop::op::testing
