// The `cuda` implementation of layernorm on a device (every test here
// GTEST_SKIPs without one: reported SKIPPED, never passed). What every
// `cuda` implementation shares (skipped without a device, passes its spec
// on one) is tests/specs/cuda_target_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/layernorm/layernorm.h"
#include "properties/layernorm/family.h"
#include "tests/support/cuda.h"
#include "tests/support/registered.h"

namespace kprop::layernorm {
namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace cuda {

Result run_cuda(const Case& c) {
  return testing::registered_implementation<Traits>("layernorm", "cuda")(c);
}

// --- device only

Case make(DType dtype, int rows, int dim, std::vector<double> x) {
  Case c;
  c.dtype = dtype, c.rows = rows, c.dim = dim, c.eps = 1e-5;
  c.x = std::move(x);
  for (int i = 0; i < dim; ++i) c.gamma.push_back(1 + 0.25 * i), c.beta.push_back(0.5 - 0.125 * i);
  for (int i = 0; i < rows * dim; ++i) c.dy.push_back((i % 3) - 1.0 + 0.5 * (i % 2));
  round_to_dtype(c);
  return c;
}

TEST(LayerNormCuda, EdgeCasesMatchReference) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  std::vector<double> big;  // D > the block size, at a large offset
  for (int i = 0; i < 2 * 700; ++i) big.push_back(1e4 + 0.01 * ((i * 37) % 101));
  const Case cases[] = {
      make(DType::f32, 1, 1, {3}),                 // D = 1: y = beta, dx = 0
      make(DType::f64, 2, 3, {2, 2, 2, 1, 2, 4}),  // a constant row
      make(DType::f32, 2, 700, big),               // several elements per thread
      make(DType::f64, 3, 33, std::vector<double>(99, -7.5)),
  };
  for (const Case& c : cases) {
    const Result want = reference(c), got = run_cuda(c);
    const double tol = c.dtype == DType::f32 ? 1e-3 : 1e-9;
    ASSERT_EQ(got.y.size(), want.y.size());
    for (size_t i = 0; i < want.y.size(); ++i) {
      EXPECT_NEAR(got.y[i], want.y[i], tol * (1 + std::abs(want.y[i])));
      EXPECT_NEAR(got.dx[i], want.dx[i], tol * (1 + std::abs(want.dx[i])) * 300);
    }
    for (size_t i = 0; i < want.dbeta.size(); ++i) EXPECT_NEAR(got.dbeta[i], want.dbeta[i], tol);
  }
}

TEST(LayerNormCuda, ForwardIsBitwiseDeterministic) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  std::vector<double> x;
  for (int i = 0; i < 4 * 513; ++i) x.push_back(0.001 * ((i * 7919) % 1009) - 0.5);
  const Case c = make(DType::f32, 4, 513, x);
  const Result a = run_cuda(c), b = run_cuda(c);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.dgamma, b.dgamma);
}

}  // namespace cuda
}  // namespace
}  // namespace kprop::layernorm
