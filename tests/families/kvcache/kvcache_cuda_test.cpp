// The `cuda` implementation of kvcache. Without a device (or built without
// CUDA) it must report skipped, never passed or failed; everything that needs
// a device GTEST_SKIPs here and runs where a GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/kvcache/kvcache.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "properties/kvcache/family.h"
#include "tests/support/registered.h"
#if KPROP_HAVE_CUDA
#include "kernels/kvcache/kvcache_cuda.h"
#endif

namespace kprop::kvcache {
namespace {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/kvcache.yaml";

int devices() {
#if KPROP_HAVE_CUDA
  return cuda_raw::device_count();
#else
  return 0;
#endif
}

const FamilyDef<Traits>& family() {
  return testing::registered_family<Traits>("kvcache");
}
size_t cuda_index() {
  return testing::implementation_index(family(), "cuda");
}

// Three sequences, GQA 2x2, pages of 3 that divide no length, staggered
// arrivals so the third sequence reuses blocks the second released.
Case batch_case() {
  Case c;
  c.kv_heads = 2;
  c.group = 2;
  c.head_dim = 4;
  c.seqs = {{4, 2, 0, 11}, {1, 5, 0, 12}, {5, 3, 7, 13}};
  c.page_size = 3;
  c.k_spread = 20;
  c.v_spread = 30;
  c.q_scale = 2;
  c.seed = 5;
  c.pool = {4, 1, 6, 0, 3, 5, 2, 7, 8, 9};
  return fit_pool(c);
}

TEST(KvcacheCuda, RegisteredOnDeviceCuda) {
  testing::expect_registered_on_cuda(family(), cuda_index());
}

TEST(KvcacheCuda, SkippedWithoutDevice) {
  if (devices() > 0) GTEST_SKIP() << "a CUDA device is present";
  testing::expect_cuda_run_skipped(kSpec);
}

TEST(KvcacheCuda, DirectCallThrowsUnsupportedWithoutDevice) {
  if (devices() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(family().run(cuda_index(), batch_case()), Unsupported);
}

// --- device only

TEST(KvcacheCuda, MatchesTheReferenceAndTheCpuPagedBookkeeping) {
  if (devices() == 0) GTEST_SKIP() << "needs a CUDA device";
  for (Poison p : {Poison::nan, Poison::huge}) {
    Case c = batch_case();
    c.poison = p;
    const Result got = family().run(cuda_index(), c), want = reference(c), cpu = paged(c);
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
  if (devices() == 0) GTEST_SKIP() << "needs a CUDA device";
  const Case c = batch_case();
  EXPECT_EQ(family().run(cuda_index(), c).out, family().run(cuda_index(), c).out);
}

TEST(KvcacheCuda, PassesTheSpecOnDevice) {
  if (devices() == 0) GTEST_SKIP() << "needs a CUDA device";
  for (uint64_t seed : {11u, 12u}) {
    RunOptions o;
    o.target = "cuda";
    o.seed = seed;
    o.trials = 100;
    o.write_corpus = false;
    EXPECT_EQ(run_spec(load_spec(kSpec), o).status, RunStatus::passed) << "seed " << seed;
  }
}

}  // namespace
}  // namespace kprop::kvcache
