// The checks every family's `cuda` implementation shares, run on every spec
// whose family registers one (the families' CUDA tests keep only what needs
// their kernels on a device): it is an optimized target on device cuda;
// without a device (or built without CUDA) a run on it is skipped at once,
// every invariant not run, never passed or failed; on a device the spec
// passes on fixed seeds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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

// The domain a spec's cuda run draws from where it is not the spec's own
// (scripts/cuda_domains.txt, "NAME: {DOMAIN}" lines, which gpu_check.sh and
// cuda_sanitize.sh read too); "" for the spec's own.
std::string cuda_domain(const std::string& spec_path) {
  std::ifstream in(std::string(KPROP_SOURCE_DIR) + "/scripts/cuda_domains.txt");
  const std::string prefix = std::filesystem::path(spec_path).stem().string() + ": ";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  return "";
}

RunReport run_cuda(const std::string& spec_path, uint64_t seed, const std::string& domain = "") {
  RunOptions o;
  o.target = "cuda";
  o.seed = seed;
  o.write_corpus = false;
  return run_spec(load_spec(spec_path, "", domain), o);
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
  const std::string domain = cuda_domain(GetParam());
  for (uint64_t seed : {11u, 12u, 13u})
    EXPECT_EQ(run_cuda(GetParam(), seed, domain).status, RunStatus::passed) << seed << " " << domain;
}

// Every spec scripts/cuda_domains.txt names has a cuda target, and its
// domain loads (a typo there would otherwise surface only on a GPU).
TEST(CudaDomains, NameSpecsWithACudaTargetAndLoad) {
  std::ifstream in(std::string(KPROP_SOURCE_DIR) + "/scripts/cuda_domains.txt");
  ASSERT_TRUE(in) << "scripts/cuda_domains.txt";
  int entries = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::string name = line.substr(0, line.find(':'));
    const std::string path = std::string(KPROP_SOURCE_DIR) + "/specs/" + name + ".yaml";
    ++entries;
    if (!std::filesystem::exists(path)) {
      ADD_FAILURE() << "scripts/cuda_domains.txt names " << name << ", which is no spec";
      continue;
    }
    const Family* family = Registry::instance().find(YAML::LoadFile(path)["family"].as<std::string>());
    if (!family) continue;  // not in this build (KPROP_FAMILIES)
    EXPECT_GE(family->find_implementation("cuda"), 0) << name << " has no cuda target";
    EXPECT_NO_THROW(load_spec(path, "", cuda_domain(path))) << line;
  }
  EXPECT_GT(entries, 0);
}

// A partial build (KPROP_FAMILIES) may have no CUDA family.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaTarget);
INSTANTIATE_TEST_SUITE_P(Specs, CudaTarget, ::testing::ValuesIn(cuda_specs()), testing::spec_stem);

}  // namespace
}  // namespace kprop
