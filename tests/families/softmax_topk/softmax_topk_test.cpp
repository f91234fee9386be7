// Softmax + top-k: the kernels on hand-made rows (-inf conventions, exact
// ties, huge magnitudes, K above 32, K = V), the codec, the shrinker, and
// every mutant killed under the committed spec with fixed seeds.
#include "kernels/softmax_topk/softmax_topk.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kprop/rng.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {
namespace {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/softmax_topk.yaml";
constexpr double kInf = std::numeric_limits<double>::infinity();

Case make(DType dtype, int k, int block, std::vector<std::vector<double>> rows) {
  Case c;
  c.dtype = dtype;
  c.k = k;
  c.block = block;
  c.vocab = static_cast<int>(rows[0].size());
  for (const auto& r : rows) c.logits.insert(c.logits.end(), r.begin(), r.end());
  return c;
}

TEST(SoftmaxTopkKernels, AllNegInfRowGivesZerosAndFirstIndices) {
  const Case c = make(DType::f32, 3, 2, {{-kInf, -kInf, -kInf, -kInf}});
  for (auto run : {reference, fused}) {
    const Result r = run(c);
    EXPECT_EQ(r.indices, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(r.probs, (std::vector<double>{0, 0, 0}));
  }
}

TEST(SoftmaxTopkKernels, ExactTiesGoToTheLowerIndexAndNegInfRanksLast) {
  const Case c = make(DType::f64, 5, 1, {{1, -kInf, 3, 1, 3}});
  for (auto run : {reference, fused}) {
    const Result r = run(c);
    EXPECT_EQ(r.indices, (std::vector<int>{2, 4, 0, 3, 1}));
    EXPECT_EQ(r.probs[4], 0.0);
    EXPECT_NEAR(r.probs[0], r.probs[1], 1e-15);
  }
}

TEST(SoftmaxTopkKernels, HugeLogitsDoNotOverflowAndUnderflowedOnesStillRankByLogit) {
  // exp(1e30) overflows in any dtype; the probabilities of -200 and -150
  // relative to 1e30 underflow to 0 but still rank above -inf, by logit.
  const Case c = make(DType::f32, 4, 3, {{-kInf, -200, 1e30f, -150}});
  for (auto run : {reference, fused}) {
    const Result r = run(c);
    EXPECT_EQ(r.indices, (std::vector<int>{2, 3, 1, 0}));
    EXPECT_EQ(r.probs[0], 1.0);
    for (double p : r.probs) EXPECT_FALSE(std::isnan(p));
  }
}

TEST(SoftmaxTopkKernels, FusedMatchesReferenceForEveryKAndBlock) {
  Case c;
  c.dtype = DType::f64;
  c.vocab = 77;  // not a multiple of any vector width
  for (int i = 0; i < 2 * c.vocab; ++i)
    c.logits.push_back(std::round(8 * rng::normal(5, 0, static_cast<uint64_t>(i))));
  for (int k : {1, 8, 32, 33, 50, 77})
    for (int block : {1, 7, 16, 100}) {
      c.k = k;
      c.block = block;
      const Result a = reference(c), b = fused(c);
      EXPECT_EQ(a.indices, b.indices) << "K " << k << " block " << block;
      for (size_t i = 0; i < a.probs.size(); ++i) EXPECT_NEAR(a.probs[i], b.probs[i], 1e-14);
    }
}

TEST(SoftmaxTopkKernels, MutantsBreakTheirStage) {
  auto run = [](const char* name, const Case& c) {
    for (const Mutant& m : mutants())
      if (std::string(m.name) == name) return m.run(c);
    ADD_FAILURE() << name;
    return Result{};
  };
  EXPECT_EQ(run("tie_high_index", make(DType::f32, 1, 1, {{0, 0}})).indices, (std::vector<int>{1}));
  EXPECT_TRUE(std::isnan(run("no_max_subtraction", make(DType::f32, 1, 1, {{128}})).probs[0]));
  EXPECT_NEAR(run("online_rescale_inverted", make(DType::f64, 1, 1, {{0, 1}})).probs[0],
              1 / (1 + std::exp(1.0)), 1e-12);
  EXPECT_EQ(run("neg_inf_selected_early", make(DType::f32, 2, 1, {{-kInf, -104, 0}})).indices,
            (std::vector<int>{2, 0}));
  EXPECT_EQ(run("unsorted_output", make(DType::f32, 2, 1, {{-kInf, 0}})).indices, (std::vector<int>{0, 1}));
  const Result capped = run("k_capped_32", make(DType::f64, 33, 4, {std::vector<double>(33, 0.0)}));
  EXPECT_EQ(capped.indices[32], 0);
}

TEST(SoftmaxTopkCodec, YamlRoundTrip) {
  const Case c = make(DType::f32, 2, 3, {{-kInf, 0.5, -104}, {1e30f, 0, 0}});
  EXPECT_EQ(Traits::from_yaml(Traits::to_yaml(c)), c);
}

TEST(SoftmaxTopkCodec, BadCasesNameLineAndColumn) {
  for (const char* text : {"dtype: f32\nk: 1\nblock: 1\nlogits:\n  - [0, 1]\n  - [0]\n",
                           "dtype: f32\nk: 3\nblock: 1\nlogits:\n  - [0, 1]\n",
                           "dtype: f32\nk: 1\nblock: 1\nlogits:\n  - [0.1, .inf]\n",
                           "dtype: f32\nk: 1\nblock: 1\nlogits:\n  - [0.1]\n"}) {
    try {
      Traits::from_yaml(YAML::Load(text));
      ADD_FAILURE() << "accepted: " << text;
    } catch (const CaseFormatError& e) {
      EXPECT_GT(e.line, 0) << text;
    }
  }
}

}  // namespace
}  // namespace kprop::softmax_topk
