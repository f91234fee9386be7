// The `cuda` implementation of layernorm. Without a device (or built without
// CUDA) it must report skipped, never passed or failed; everything that
// needs a device GTEST_SKIPs here and runs where a GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/layernorm/layernorm.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "properties/layernorm/family.h"
#include "tests/support/registered.h"
#if KPROP_HAVE_CUDA
#include "kernels/layernorm/layernorm_cuda.h"
#endif

namespace kprop::layernorm {
namespace {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/layernorm.yaml";

int devices() {
#if KPROP_HAVE_CUDA
  return cuda_raw::device_count();
#else
  return 0;
#endif
}

const FamilyDef<Traits>& family() {
  return testing::registered_family<Traits>("layernorm");
}
size_t cuda_index() {
  return testing::implementation_index(family(), "cuda");
}

TEST(LayerNormCuda, RegisteredOnDeviceCuda) {
  testing::expect_registered_on_cuda(family(), cuda_index());
}

TEST(LayerNormCuda, SkippedWithoutDevice) {
  if (devices() > 0) GTEST_SKIP() << "a CUDA device is present";
  testing::expect_cuda_run_skipped(kSpec);
}

TEST(LayerNormCuda, DirectCallThrowsUnsupportedWithoutDevice) {
  if (devices() > 0) GTEST_SKIP() << "a CUDA device is present";
  Case c;
  c.x = {1}, c.gamma = {1}, c.beta = {0}, c.dy = {1};
  EXPECT_THROW(family().run(cuda_index(), c), Unsupported);
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
  if (devices() == 0) GTEST_SKIP() << "needs a CUDA device";
  std::vector<double> big;  // D > the block size, at a large offset
  for (int i = 0; i < 2 * 700; ++i) big.push_back(1e4 + 0.01 * ((i * 37) % 101));
  const Case cases[] = {
      make(DType::f32, 1, 1, {3}),                 // D = 1: y = beta, dx = 0
      make(DType::f64, 2, 3, {2, 2, 2, 1, 2, 4}),  // a constant row
      make(DType::f32, 2, 700, big),               // several elements per thread
      make(DType::f64, 3, 33, std::vector<double>(99, -7.5)),
  };
  for (const Case& c : cases) {
    const Result want = reference(c), got = family().run(cuda_index(), c);
    const double tol = c.dtype == DType::f32 ? 1e-3 : 1e-9;
    ASSERT_EQ(got.y.size(), want.y.size());
    for (size_t i = 0; i < want.y.size(); ++i) {
      EXPECT_NEAR(got.y[i], want.y[i], tol * (1 + std::abs(want.y[i])));
      EXPECT_NEAR(got.dx[i], want.dx[i], tol * (1 + std::abs(want.dx[i])) * 300);
    }
    for (size_t i = 0; i < want.dbeta.size(); ++i) EXPECT_NEAR(got.dbeta[i], want.dbeta[i], tol);
  }
}

TEST(LayerNormCuda, PassesTheSpecOnDevice) {
  if (devices() == 0) GTEST_SKIP() << "needs a CUDA device";
  for (uint64_t seed : {11u, 12u, 13u}) {
    RunOptions o;
    o.target = "cuda";
    o.seed = seed;
    o.write_corpus = false;
    EXPECT_EQ(run_spec(load_spec(kSpec), o).status, RunStatus::passed) << "seed " << seed;
  }
}

TEST(LayerNormCuda, ForwardIsBitwiseDeterministic) {
  if (devices() == 0) GTEST_SKIP() << "needs a CUDA device";
  std::vector<double> x;
  for (int i = 0; i < 4 * 513; ++i) x.push_back(0.001 * ((i * 7919) % 1009) - 0.5);
  const Case c = make(DType::f32, 4, 513, x);
  const Result a = family().run(cuda_index(), c), b = family().run(cuda_index(), c);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.dgamma, b.dgamma);
}

}  // namespace
}  // namespace kprop::layernorm
