// ternary's transform: the reference's outputs move as the description
// claims (every declared tensor's shape: tests/core/spec_contract_test.cpp;
// valid derived cases: tests/sweeps/family_contract_test.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "kprop/rng.h"
#include "properties/ternary/family.h"
#include "tests/support/tensor_shapes.h"

namespace kprop::ternary {
namespace {

TEST(TernaryTensors, PermuteOutFeaturesPermutesTheReferenceOutputs) {
  Case c;
  c.tokens = 3, c.in_features = 7, c.out_features = 5;
  for (int i = 0; i < 21; ++i) c.x.push_back(rng::normal(1, 1, static_cast<uint64_t>(i)));
  for (int i = 0; i < 35; ++i) c.w.push_back(rng::normal(1, 2, static_cast<uint64_t>(i)));
  for (int i = 0; i < 15; ++i) c.dy.push_back(rng::normal(1, 3, static_cast<uint64_t>(i)));
  expr::TensorMap drawn;
  drawn.want("transform.perm");
  const Case t = Traits::transform("permute_out_features", c, Values::defaults({}), 4, drawn);
  ASSERT_EQ(validate(t), "");
  const std::vector<double>& perm = drawn.find("transform.perm")->data;
  const Result r = reference(c), s = reference(t);
  EXPECT_EQ(s.x_q, r.x_q);
  EXPECT_EQ(s.x_scale, r.x_scale);
  for (size_t n = 0; n < 5; ++n) {
    const auto from = static_cast<size_t>(perm[n]);
    for (size_t k = 0; k < 7; ++k) EXPECT_EQ(s.w_q[n * 7 + k], r.w_q[from * 7 + k]);
    for (size_t m = 0; m < 3; ++m) {
      EXPECT_EQ(s.acc[m * 5 + n], r.acc[m * 5 + from]);
      EXPECT_NEAR(s.y[m * 5 + n], r.y[m * 5 + from], 1e-12 * std::fabs(r.y[m * 5 + from]));
    }
  }
}

}  // namespace
}  // namespace kprop::ternary
