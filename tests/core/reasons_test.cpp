// Discard and decline reasons read as kinds, not as one line per case: a
// reason that carries the case's numbers (a softmax scale, a length) made
// --stats list hundreds of "discarded 1x" lines for one kind of discard.
#include "kprop/reasons.h"

#include <gtest/gtest.h>

namespace kprop {
namespace {

TEST(Reasons, ThoseDifferingOnlyInNumbersAreOneGroupWithTheVaryingNumbersElided) {
  const std::map<std::string, int64_t> reasons = {
      {"softmax scale 1.35 is not a power of two: fold into dS", 1},
      {"softmax scale 1.4173380136489868 is not a power of two: fold into dS", 2},
      {"softmax scale -2e-05 is not a power of two: fold into dS", 1},
      {"needs 7+ elements, got 3", 4},
      {"needs 7+ elements, got 5", 1},
      {"Nq = Nk = 1: no other tiling", 4},
  };
  const auto groups = grouped_reasons(reasons);
  ASSERT_EQ(groups.size(), 3u);
  // Largest count first; a tie in text order.
  EXPECT_EQ(groups[0], (std::pair<std::string, int64_t>{"needs 7+ elements, got …", 5}));
  EXPECT_EQ(groups[1], (std::pair<std::string, int64_t>{"Nq = Nk = 1: no other tiling", 4}));
  EXPECT_EQ(groups[2],
            (std::pair<std::string, int64_t>{"softmax scale … is not a power of two: fold into dS", 4}));
}

TEST(Reasons, NumbersInsideWordsAreTextAndASingleReasonKeepsItsNumbers) {
  const std::map<std::string, int64_t> reasons = {
      {"dQ may pass f16's largest finite value 65504", 2},
      {"dQ may pass bf16's largest finite value 3.39e38", 1},
      {"tiles 4x4 vs 1x1", 1},
      {"tiles 4x4 vs 2x2", 1},
      {"row 3 of 8", 1},
  };
  const auto counts = grouped_reason_counts(reasons);
  EXPECT_EQ(counts, (std::map<std::string, int64_t>{{"dQ may pass f16's largest finite value 65504", 2},
                                                    {"dQ may pass bf16's largest finite value 3.39e38", 1},
                                                    {"tiles 4x4 vs 1x1", 1},
                                                    {"tiles 4x4 vs 2x2", 1},
                                                    {"row 3 of 8", 1}}));
}

TEST(Reasons, OnlyTheNumbersThatVaryAreElided) {
  const auto groups = grouped_reasons({{"row 3 of 8 is masked", 1}, {"row 5 of 8 is masked", 1}});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].first, "row … of 8 is masked");
  EXPECT_EQ(groups[0].second, 2);
}

TEST(Reasons, TheSummaryNamesTheLargestGroupsAndCountsTheRest) {
  const std::map<std::string, int64_t> reasons = {
      {"a 1", 5}, {"a 2", 1}, {"b", 4}, {"c", 3}, {"d", 2},
  };
  EXPECT_EQ(reasons_summary(reasons, 2), "a … (6), b (4), and 2 more");
  EXPECT_EQ(reasons_summary(reasons, 9), "a … (6), b (4), c (3), d (2)");
  EXPECT_EQ(reasons_summary({}, 3), "");
}

}  // namespace
}  // namespace kprop
