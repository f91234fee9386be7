// The `cuda` implementation of attention.bwd on a device (every test here
// GTEST_SKIPs without one: reported SKIPPED, never passed). What every
// `cuda` implementation shares (skipped without a device, passes its spec
// on one) is tests/specs/cuda_target_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/attention/attention.h"
#include "properties/attention/family.h"
#include "tests/support/cuda.h"
#include "tests/support/registered.h"

namespace kprop::attention {
namespace {

BwdResult run_cuda(const Case& c) {
  return testing::registered_implementation<BwdTraits>("attention.bwd", "cuda")(c);
}

// GQA 4/2, Nq 7 > Nk 5 under a causal mask (the first two rows fully masked),
// tiles 3x2 that divide neither length, small integer-ish values.
Case gqa_case(DType dtype, MaskKind mask) {
  Case c;
  c.shape = {2, 4, 2, 7, 5, 3};
  c.block_q = 3;
  c.block_k = 2;
  c.dtype = dtype;
  c.mask = mask;
  if (mask == MaskKind::key_padding) c.key_lengths = {0, 4};
  if (mask == MaskKind::boolean)
    for (int x = 0; x < 2 * 7 * 5; ++x) c.allowed.push_back(static_cast<uint8_t>((x * 7 % 3) != 0));
  for (size_t i = 0; i < c.shape.q_size(); ++i)
    c.q.push_back(0.25 * double(int(i * 7 % 9) - 4)), c.d_out.push_back(0.5 * double(int(i % 5) - 2));
  for (size_t j = 0; j < c.shape.kv_size(); ++j)
    c.k.push_back(0.25 * double(int(j * 5 % 7) - 3)), c.v.push_back(double(int(j * 3 % 11) - 5));
  return c;
}

// --- device only

TEST(AttentionBwdCuda, MatchesTheTiledCpuKernelOnEveryMask) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  for (DType dtype : {DType::f64, DType::f32})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::key_padding, MaskKind::boolean}) {
      const Case c = gqa_case(dtype, mask);
      const BwdResult got = run_cuda(c), want = reference_backward(c);
      // |values| <= 5, D = 3, Nk = 5: gradients are O(100); f32 rounding of a
      // few dozen terms stays far under 1e-3 of that, f64 under 1e-10.
      const double tol = dtype == DType::f64 ? 1e-10 : 1e-3;
      for (auto field : {&BwdResult::dq, &BwdResult::dk, &BwdResult::dv, &BwdResult::d}) {
        ASSERT_EQ((got.*field).size(), (want.*field).size());
        for (size_t i = 0; i < (want.*field).size(); ++i)
          ASSERT_NEAR((got.*field)[i], (want.*field)[i], tol) << mask_name(mask) << " " << dtype_name(dtype);
      }
      EXPECT_GT(got.workspace_peak, 0u);
    }
}

TEST(AttentionBwdCuda, IsBitwiseDeterministic) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  const Case c = gqa_case(DType::f32, MaskKind::causal);
  const BwdResult a = run_cuda(c), b = run_cuda(c);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

}  // namespace
}  // namespace kprop::attention
