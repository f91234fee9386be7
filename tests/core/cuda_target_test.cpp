// The checks every family's `cuda` implementation shares, run on every spec
// whose family registers one (the families' CUDA tests keep only what needs
// their kernels on a device): it is an optimized target on device cuda;
// without a device (or built without CUDA) a run on it is skipped at once,
// every invariant not run, never passed or failed; on a device the spec
// passes on fixed seeds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kprop/runner.h"
#include "kprop/spec.h"
#include "tests/support/cuda.h"
#include "tests/support/registered.h"

namespace kprop {
namespace {

std::vector<std::string> cuda_specs() {
  return testing::shipped_specs([](const Family& f) { return f.find_implementation("cuda") >= 0; });
}

RunReport run_cuda(const std::string& spec_path, uint64_t seed) {
  RunOptions o;
  o.target = "cuda";
  o.seed = seed;
  o.write_corpus = false;
  return run_spec(load_spec(spec_path), o);
}

class CudaTarget : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTarget, RegisteredOnDeviceCuda) {
  const Spec spec = load_spec(GetParam());
  const ImplInfo& info = spec.family->implementations()[spec.family->find_implementation("cuda")];
  EXPECT_EQ(info.device, "cuda");
  EXPECT_EQ(info.kind, ImplKind::optimized);
}

TEST_P(CudaTarget, SkippedWithoutDevice) {
  if (testing::cuda_device_present()) GTEST_SKIP() << "a CUDA device is present";
  const RunReport r = run_cuda(GetParam(), 1);
  EXPECT_EQ(r.status, RunStatus::skipped);
  // The reason the implementation raised (TargetUnavailable), not a run
  // whose cases were all declined.
#if KPROP_HAVE_CUDA
  EXPECT_EQ(r.detail, "skipped: no CUDA device");
#else
  EXPECT_EQ(r.detail, "skipped: built without CUDA");
#endif
  for (const auto& inv : r.invariants) EXPECT_EQ(inv.status, InvariantStatus::not_run) << inv.name;
}

TEST_P(CudaTarget, PassesTheSpecOnDevice) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  for (uint64_t seed : {11u, 12u, 13u})
    EXPECT_EQ(run_cuda(GetParam(), seed).status, RunStatus::passed) << seed;
}

// A partial build (KPROP_FAMILIES) may have no CUDA family.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaTarget);
INSTANTIATE_TEST_SUITE_P(Specs, CudaTarget, ::testing::ValuesIn(cuda_specs()), testing::spec_stem);

}  // namespace
}  // namespace kprop
