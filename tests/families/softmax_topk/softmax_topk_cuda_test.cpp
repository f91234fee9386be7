// The `cuda` implementation of softmax_topk. Without a device (or built
// without CUDA) it must report skipped, never passed or failed; everything
// that needs a device GTEST_SKIPs here and runs where a GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/softmax_topk/softmax_topk.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "properties/softmax_topk/family.h"
#include "tests/support/registered.h"
#if KPROP_HAVE_CUDA
#include "kernels/softmax_topk/softmax_topk_cuda.h"
#endif

namespace kprop::softmax_topk {
namespace {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/softmax_topk.yaml";
constexpr double kInf = std::numeric_limits<double>::infinity();

int devices() {
#if KPROP_HAVE_CUDA
  return cuda_raw::device_count();
#else
  return 0;
#endif
}

const FamilyDef<Traits>& family() {
  return testing::registered_family<Traits>("softmax_topk");
}
size_t cuda_index() {
  return testing::implementation_index(family(), "cuda");
}

Case make(DType dtype, int k, std::vector<std::vector<double>> rows) {
  Case c;
  c.dtype = dtype;
  c.k = k;
  c.vocab = static_cast<int>(rows[0].size());
  for (const auto& r : rows) c.logits.insert(c.logits.end(), r.begin(), r.end());
  return c;
}

TEST(SoftmaxTopkCuda, RegisteredOnDeviceCuda) {
  testing::expect_registered_on_cuda(family(), cuda_index());
}

TEST(SoftmaxTopkCuda, SkippedWithoutDevice) {
  if (devices() > 0) GTEST_SKIP() << "a CUDA device is present";
  testing::expect_cuda_run_skipped(kSpec);
}

TEST(SoftmaxTopkCuda, DirectCallThrowsUnsupportedWithoutDevice) {
  if (devices() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(family().run(cuda_index(), make(DType::f32, 1, {{0, 1}})), Unsupported);
}

// --- device only

TEST(SoftmaxTopkCuda, ConventionsOnHandMadeRows) {
  if (devices() == 0) GTEST_SKIP() << "needs a CUDA device";
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
    const Result want = reference(c), got = family().run(cuda_index(), c);
    EXPECT_EQ(got.indices, want.indices);
    ASSERT_EQ(got.probs.size(), want.probs.size());
    for (size_t i = 0; i < want.probs.size(); ++i) {
      EXPECT_FALSE(std::isnan(got.probs[i]));
      EXPECT_NEAR(got.probs[i], want.probs[i], 1e-5 * want.probs[i] + 1e-30);
    }
  }
}

TEST(SoftmaxTopkCuda, PassesTheSpecOnDevice) {
  if (devices() == 0) GTEST_SKIP() << "needs a CUDA device";
  for (uint64_t seed : {11u, 12u, 13u}) {
    RunOptions o;
    o.target = "cuda";
    o.seed = seed;
    o.write_corpus = false;
    EXPECT_EQ(run_spec(load_spec(kSpec), o).status, RunStatus::passed) << "seed " << seed;
  }
}

TEST(SoftmaxTopkCuda, BitwiseDeterministic) {
  if (devices() == 0) GTEST_SKIP() << "needs a CUDA device";
  std::vector<double> x;
  for (int i = 0; i < 3 * 777; ++i) x.push_back(0.125 * ((i * 7919) % 1009) - 60);
  Case c = make(DType::f32, 100, {x});
  c.vocab = 777;
  const Result a = family().run(cuda_index(), c), b = family().run(cuda_index(), c);
  EXPECT_EQ(a.probs, b.probs);
  EXPECT_EQ(a.indices, b.indices);
}

}  // namespace
}  // namespace kprop::softmax_topk
