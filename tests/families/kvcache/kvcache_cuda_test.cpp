// The `cuda` implementation of kvcache on a device (every test here
// GTEST_SKIPs without one: reported SKIPPED, never passed). What every
// `cuda` implementation shares (skipped without a device, passes its spec
// on one) is tests/specs/cuda_target_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/kvcache/kvcache.h"
#include "properties/kvcache/family.h"
#include "tests/families/kvcache/three_sequences.h"
#include "tests/support/cuda.h"
#include "tests/support/registered.h"

namespace kprop::kvcache {
namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace cuda {

Result run_cuda(const Case& c) {
  return testing::registered_implementation<Traits>("kvcache", "cuda")(c);
}

// The third sequence reuses blocks the second released.
Case batch_case() {
  return three_sequences(7, 1, kShuffledPool);
}

// --- device only

TEST(KvcacheCuda, MatchesTheReferenceAndTheCpuPagedBookkeeping) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  for (Poison p : {Poison::nan, Poison::huge}) {
    Case c = batch_case();
    c.poison = p;
    const Result got = run_cuda(c), want = reference(c), cpu = paged(c);
    ASSERT_EQ(got.out.size(), want.out.size());
    for (size_t b = 0; b < want.out.size(); ++b) {
      ASSERT_EQ(got.out[b].size(), want.out[b].size());
      for (size_t i = 0; i < want.out[b].size(); ++i)
        EXPECT_NEAR(got.out[b][i], want.out[b][i], 1e-12) << "sequence " << b << " element " << i;
    }
    EXPECT_EQ(got.blocks_allocated, cpu.blocks_allocated);
    EXPECT_EQ(got.blocks_reused, cpu.blocks_reused);
    EXPECT_GT(got.blocks_reused, 0);
    EXPECT_FALSE(got.int8_cache);
  }
}

TEST(KvcacheCuda, IsBitwiseDeterministic) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  const Case c = batch_case();
  EXPECT_EQ(run_cuda(c).out, run_cuda(c).out);
}

}  // namespace cuda
}  // namespace
}  // namespace kprop::kvcache
