// The shared comparators of src/kprop/tolerance.h where a non-finite value
// meets them: an infinity allows nothing but itself, and a same-precision
// baseline that overflowed gives no budget of k × inf (audit of the
// tolerance machinery; each of these passed a wrong value before).
#include "kprop/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kprop {
namespace {

TEST(Within, AnInfinityIsWithinOnlyOfItself) {
  EXPECT_TRUE(within(1.0, 1.0 + 1e-12, 0, 1e-10));
  EXPECT_FALSE(within(1.0, 1.1, 0, 1e-10));
  // atol + rtol·inf allowed any value next to an infinite want.
  EXPECT_FALSE(within(1.0, INFINITY, 1e-10, 1e-10));
  EXPECT_FALSE(within(-INFINITY, INFINITY, 1e-10, 1e-10));
  EXPECT_FALSE(within(INFINITY, 1.0, 1e-10, 1e-10));
  // inf - inf is NaN, which failed a value equal to its want.
  EXPECT_TRUE(within(INFINITY, INFINITY, 0, 0));
  EXPECT_TRUE(within(-INFINITY, -INFINITY, 1e-10, 1e-10));
  EXPECT_FALSE(within(NAN, NAN, 1, 1));
  EXPECT_FALSE(within(NAN, 1.0, 1, 1));
}

TEST(CompareWithBaseline, ABaselineThatOverflowsGivesNoInfiniteBudget) {
  const std::vector<double> reference = {1, 2}, target = {1000, 2};
  // The baseline overflowed on element 0: the budget comes from element 1.
  const ToleranceReport r =
      compare_with_baseline(reference, target, std::vector<double>{INFINITY, 2.5}, 2, 0);
  EXPECT_FALSE(r.ok) << r.message;
  EXPECT_EQ(r.baseline_error, 0.5);
  EXPECT_EQ(r.worst_index, 0u);
  // A target inside that budget passes.
  EXPECT_TRUE(
      compare_with_baseline(reference, std::vector<double>{1.5, 2}, std::vector<double>{NAN, 2.5}, 2, 0).ok);
}

}  // namespace
}  // namespace kprop
