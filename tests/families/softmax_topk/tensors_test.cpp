// softmax_topk's transforms keep what their descriptions claim on the
// reference (every declared tensor's shape: tests/core/spec_contract_test.cpp;
// valid derived cases: tests/sweeps/family_contract_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kprop/rng.h"
#include "properties/softmax_topk/family.h"
#include "tests/support/tensor_shapes.h"

namespace kprop::softmax_topk {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Ties (2.5 twice, -inf twice) and a large offset row in f32.
Case tie_case() {
  Case c;
  c.dtype = DType::f32, c.vocab = 6, c.k = 4, c.block = 4;
  c.logits = {2.5, kNegInf, 2.5, 1, kNegInf, -3, 1048576.5, 1048576, 1048577, 1048576.5, 1048575, kNegInf};
  EXPECT_EQ(validate(c), "");
  return c;
}

Values defaults(const std::string& transform) {
  return testing_support::transform_defaults<Traits>(transform);
}

TEST(SoftmaxTopkTensors, AddConstantIsExactAndKeepsTheRanking) {
  const Case c = tie_case();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Values p = defaults("add_constant");
    p.set("magnitude", 1e6);
    expr::TensorMap drawn;
    drawn.want("transform.shift");
    const Case t = Traits::transform("add_constant", c, p, seed, drawn);
    ASSERT_EQ(validate(t), "");
    for (size_t i = 0; i < c.logits.size(); ++i) {
      const double s = std::isfinite(c.logits[i]) ? drawn.find("transform.shift")->data[i / 6] : 0;
      EXPECT_EQ(t.logits[i] - s, c.logits[i]);  // exact; -inf stays -inf
    }
    EXPECT_EQ(reference(t).indices, reference(c).indices) << "seed " << seed;
  }
}

// Under a permutation the logits at the top-k slots are the same sequence,
// and indices map back through π except inside runs of equal logits.
TEST(SoftmaxTopkTensors, PermuteRowMapsIndicesUpToTies) {
  const Case c = tie_case();
  const Result r = reference(c);
  bool tie_order_moved = false;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    expr::TensorMap drawn;
    drawn.want("transform.perm");
    const Case t = Traits::transform("permute_row", c, defaults("permute_row"), seed, drawn);
    ASSERT_EQ(validate(t), "");
    const std::vector<double>& perm = drawn.find("transform.perm")->data;
    const Result s = reference(t);
    for (size_t j = 0; j < r.indices.size(); ++j) {
      const size_t row = j / 4;
      const int mapped = static_cast<int>(perm[static_cast<size_t>(s.indices[j])]);
      EXPECT_EQ(c.logits[row * 6 + static_cast<size_t>(mapped)],
                c.logits[row * 6 + static_cast<size_t>(r.indices[j])]);
      tie_order_moved = tie_order_moved || mapped != r.indices[j];
    }
  }
  EXPECT_TRUE(tie_order_moved) << "no permutation reordered a tie: the tie rule is untested";
}

}  // namespace
}  // namespace kprop::softmax_topk
