// `deterministic` on a declared op: any NaN equals any NaN between two runs
// (IEEE 754 leaves a NaN result's sign and payload unspecified; NumPy's
// SIMD sum of a NaN gives +nan or -nan with the input buffer's alignment,
// and a correct NumPy kernel failed on one run in four), while 0 and -0,
// which an order-dependent sum gives either of, still differ.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "op_support.h"

namespace kprop::op::testing {
namespace {

const std::string kSum = R"(spec: colsum
family: op
op:
  dims: {T: [1, 6], D: [1, 4]}
  inputs:
    x:
      shape: [T, D]
      dtype: [f32, f64]
      specials: {rate: 0.3, values: [nan]}
  outputs:
    y: {shape: [D]}
  reference:
    y: sum(x, axis=0)
run: {trials: 100}
invariants: [deterministic]
)";

// `text` with a target returning the reference's result with the sign of
// every element `flipped` picks changed on every other call.
Spec flipping(const std::string& text, bool (*flipped)(double)) {
  Spec spec = parse_spec(text, "colsum.yaml");
  plant_mutants(spec, [flipped](OpFamily& f) {
    auto calls = std::make_shared<int>(0);
    f.mutant("flips", "flips signs between calls", [calls, flipped](const Case& c) {
      Result r = op::reference(c);
      const bool odd = (++*calls % 2) != 0;
      for (double& v : r.outputs[0])
        if (flipped(v) && odd) v = -v;
      return r;
    });
  });
  return spec;
}

TEST(OpDeterministic, ANansSignIsNoDifferenceAZerosIs) {
  const RunReport nan_only = run_spec(flipping(kSum, [](double v) { return std::isnan(v); }),
                                      scratch_run("flips", 3, 100, "kprop_op_determinism_test"));
  EXPECT_EQ(nan_only.status, RunStatus::passed) << nan_only.detail;
  ASSERT_EQ(nan_only.invariants.size(), 1u);
  EXPECT_EQ(nan_only.invariants[0].passed, 100);

  std::string zeros = kSum;
  zeros.replace(zeros.find("values: [nan]"), std::string("values: [nan]").size(), "values: [nan, 0]");
  const Spec spec = flipping(zeros, [](double v) { return v == 0; });
  const RunReport with_zeros = run_spec(spec, scratch_run("flips", 3, 100, "kprop_op_determinism_test"));
  ASSERT_EQ(with_zeros.status, RunStatus::failed) << with_zeros.detail;
  ASSERT_TRUE(with_zeros.invariants.at(0).counterexample);
  EXPECT_NE(with_zeros.invariants[0].counterexample->message.find("is -0 on one run and 0 on the next"),
            std::string::npos)
      << with_zeros.invariants[0].counterexample->message;
}

}  // namespace
}  // namespace kprop::op::testing
