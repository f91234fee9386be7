// The `cuda` implementation of softmax_topk on a device (every test here
// GTEST_SKIPs without one: reported SKIPPED, never passed). What every
// `cuda` implementation shares (skipped without a device, passes its spec
// on one) is tests/specs/cuda_target_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/softmax_topk/softmax_topk.h"
#include "properties/softmax_topk/family.h"
#include "tests/families/softmax_topk/rows_case.h"
#include "tests/support/cuda.h"
#include "tests/support/registered.h"

namespace kprop::softmax_topk {
namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace cuda {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/softmax_topk.yaml";
constexpr double kInf = std::numeric_limits<double>::infinity();

Result run_cuda(const Case& c) {
  return testing::registered_implementation<Traits>("softmax_topk", "cuda")(c);
}

Case make(DType dtype, int k, const std::vector<std::vector<double>>& rows) {
  return rows_case(dtype, k, rows);
}

// --- device only

TEST(SoftmaxTopkCuda, ConventionsOnHandMadeRows) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  std::vector<double> wide;  // V > the block size, with ties and -inf
  for (int i = 0; i < 1000; ++i) wide.push_back(i % 7 == 0 ? -kInf : double((i * 13) % 50));
  const Case cases[] = {
      make(DType::f32, 3, {{-kInf, -kInf, -kInf, -kInf}}),                // all -inf: zeros, 0..K-1
      make(DType::f64, 4, {{1, 1, -kInf, 1}, {-kInf, 2, -kInf, -kInf}}),  // ties; K = V
      make(DType::f32, 1, {{5}}),                                         // V = K = 1
      make(DType::f32, 1000, {wide}),                                     // K = V > block size
      make(DType::f64, 40, {wide}),
  };
  for (const Case& c : cases) {
    const Result want = reference(c), got = run_cuda(c);
    EXPECT_EQ(got.indices, want.indices);
    ASSERT_EQ(got.probs.size(), want.probs.size());
    for (size_t i = 0; i < want.probs.size(); ++i) {
      EXPECT_FALSE(std::isnan(got.probs[i]));
      EXPECT_NEAR(got.probs[i], want.probs[i], 1e-5 * want.probs[i] + 1e-30);
    }
  }
}

TEST(SoftmaxTopkCuda, BitwiseDeterministic) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  std::vector<double> x;
  for (int i = 0; i < 3 * 777; ++i) x.push_back(0.125 * ((i * 7919) % 1009) - 60);
  Case c = make(DType::f32, 100, {x});
  c.vocab = 777;
  const Result a = run_cuda(c), b = run_cuda(c);
  EXPECT_EQ(a.probs, b.probs);
  EXPECT_EQ(a.indices, b.indices);
}

}  // namespace cuda
}  // namespace
}  // namespace kprop::softmax_topk
