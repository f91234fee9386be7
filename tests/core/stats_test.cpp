// The run statistics' number formats (src/stats.cpp).
#include "kprop/stats.h"

#include <gtest/gtest.h>

namespace kprop {
namespace {

// A ratio short of the bound is not shown as "1", at the bound: kvcache's
// int8_error_bound reported "worst error/allowed 1" and median, p99 and max
// all "1" for ratios of 0.9999998.
TEST(Stats, ARatioShortOfOneIsNotShownAsOne) {
  EXPECT_EQ(ratio_text(0.9999998), "0.9999998");
  EXPECT_EQ(ratio_text(1.0000004), "1.0000004");
  EXPECT_EQ(ratio_text(1.0), "1");
  EXPECT_EQ(ratio_text(0.45), "0.45");
  EXPECT_EQ(ratio_text(0.000312345), "0.000312");
}

}  // namespace
}  // namespace kprop
