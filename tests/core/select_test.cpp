// kprop/select.h: the pieces shrinkers cut cases with.
#include "kprop/select.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kprop::select {
namespace {

TEST(Select, HalvingRunsGoFromEveryElementDownToTwoThenFromTheBack) {
  EXPECT_EQ(halving_runs(0), std::vector<int64_t>{});
  EXPECT_EQ(halving_runs(1), std::vector<int64_t>{});  // one element: the single edits
  EXPECT_EQ(halving_runs(2), std::vector<int64_t>{2});
  EXPECT_EQ(halving_runs(11), (std::vector<int64_t>{11, 5, 2, -5, -2}));
}

TEST(Select, EditRunEditsTheFirstOrLastPickedElements) {
  const std::vector<double> v = {0, 3, 0, -2, 7, 0, 5};
  auto zeroed = [&v](int64_t m) {
    std::vector<double> s = v;
    edit_run(
        s.begin(), s.end(), m, [](double x) { return x != 0; }, [](double& x) { x = 0; });
    return s;
  };
  EXPECT_EQ(zeroed(2), (std::vector<double>{0, 0, 0, 0, 7, 0, 5}));
  EXPECT_EQ(zeroed(-3), (std::vector<double>{0, 3, 0, 0, 0, 0, 0}));
  EXPECT_EQ(zeroed(9), std::vector<double>(7, 0.0));  // past the picked ones: all of them
  EXPECT_EQ(zeroed(0), v);
}

TEST(Select, IotaExceptRowsAndCols) {
  EXPECT_EQ(iota_except(5, 1, 3), (std::vector<int>{0, 3, 4}));
  const std::vector<int> m = {1, 2, 3, 4, 5, 6};  // 2 x 3
  EXPECT_EQ(rows(m, 3, {1}), (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(cols(m, 3, {2, 0}), (std::vector<int>{3, 1, 6, 4}));
}

}  // namespace
}  // namespace kprop::select
