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

// Relations of one transform and parameters share one derived case, built
// once; it lives while they are checked one after another and is freed
// before any other invariant is (AnyTrial::release_derived), so a check
// after that builds it again: one more run of the target, and the trial's
// times keep the runs of the freed one. Other parameters: another case.
TEST(OpMemory, RelationsOfOneTransformShareTheirDerivedCase) {
  const Spec spec = parse_spec(std::string(kDoubling) +
                                   "  - name: scaled\n"
                                   "    transform: {scale: {x: 2.0}}\n"
                                   "    expect: close(transformed.target.y, 2 * target.y, k=2)\n"
                                   "  - name: scaled_again\n"
                                   "    transform: {scale: {x: 2.0}}\n"
                                   "    expect: all(isfinite(transformed.target.y))\n"
                                   "  - name: quadrupled\n"
                                   "    transform: {scale: {x: 4.0}}\n"
                                   "    expect: close(transformed.target.y, 4 * target.y, k=2)\n",
                               "op.yaml");
  ASSERT_EQ(spec.invariants.size(), 4u);
  const InvariantUse &matches = spec.invariants[0], &scaled = spec.invariants[1], &again = spec.invariants[2],
                     &quadrupled = spec.invariants[3];
  ASSERT_EQ(again.name, "scaled_again");
  EXPECT_EQ(scaled.expression->transform->key, again.expression->transform->key);
  EXPECT_NE(scaled.expression->transform->key, quadrupled.expression->transform->key);
  const Impl target = resolve_target(spec, "reference");
  const auto gen = spec.family->generator(spec.domain);
  const AnyCase c = gen(rc::Random(7), 10).value();
  auto trial = spec.family->begin_trial(c, target, target);
  EXPECT_EQ(check_invariant(*trial, scaled).outcome, Outcome::pass);
  EXPECT_EQ(trial->times().target_runs, 2);  // the case and its derived case
  EXPECT_EQ(check_invariant(*trial, again).outcome, Outcome::pass);
  EXPECT_EQ(trial->times().target_runs, 2);  // the same derived case
  EXPECT_EQ(check_invariant(*trial, matches).outcome, Outcome::pass);
  EXPECT_EQ(check_invariant(*trial, scaled).outcome, Outcome::pass);
  EXPECT_EQ(trial->times().target_runs, 3);  // freed by matches_reference's check: built again
  EXPECT_EQ(check_invariant(*trial, quadrupled).outcome, Outcome::pass);
  EXPECT_EQ(trial->times().target_runs, 4);  // x 4: a case of its own
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

// A relation's transformed.* tensors count with its evaluation, and with
// those of the relations after it that share its derived case (which keeps
// them): b reads transformed.x, and with a's key holds a's
// transformed.target.y too, 1000 doubles more than under a key of its own.
TEST(OpMemory, SharedDerivedTensorsCountWithEveryRelationThatHoldsThem) {
  const auto estimate = [](const char* b_scale) {
    return largest_case(parse_spec(std::string(kDoubling) +
                                       "  - name: a\n    transform: {scale: {x: 2.0}}\n"
                                       "    expect: all(isfinite(transformed.target.y))\n"
                                       "  - name: b\n    transform: {scale: {x: " +
                                       b_scale +
                                       "}}\n    expect: all(isfinite(transformed.x) or isfinite(target.y))\n",
                                   "op.yaml"))
        .bytes;
  };
  EXPECT_EQ(estimate("2.0") - estimate("3.0"), 8.0 * 1000);
}

}  // namespace
}  // namespace kprop::op::testing
