// The shipped gpu profiles: generated cases and a sample of their first-level
// shrink candidates are inside the profile's (constrained) domain.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <filesystem>

#include "kprop/spec.h"
#include "tests/support/registered.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

class ShippedProfile : public ::testing::TestWithParam<std::string> {};

TEST_P(ShippedProfile, CasesAndShrinkCandidatesStayInside) {
  const std::string path = (fs::path(KPROP_SOURCE_DIR) / "specs" / (GetParam() + ".yaml")).string();
  const std::vector<std::string> built = testing::shipped_specs([](const Family&) { return true; });
  if (std::find(built.begin(), built.end(), path) == built.end())
    GTEST_SKIP() << "spec " << GetParam() << "'s family is not built (KPROP_FAMILIES)";
  const Spec spec = load_spec(path, "gpu");
  ASSERT_EQ(spec.profile, "gpu");
  const Family& f = *spec.family;
  for (int i = 0; i < 12; ++i) {
    const AnyCase c = f.generator(spec.domain)(rc::Random(uint64_t(300 + i)), (i * 9) % 101).value();
    ASSERT_EQ(f.in_domain(c, spec.domain), "") << f.stats(c).summary;
    auto seq = f.shrinks(c, spec.domain);
    int n = 0;
    while (auto s = seq.next()) {
      ASSERT_EQ(f.in_domain(*s, spec.domain), "") << f.stats(*s).summary;
      if (++n >= 32) break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, ShippedProfile,
                         ::testing::Values("layernorm", "softmax_topk", "kvcache", "attention_fwd",
                                           "attention_bwd"));

}  // namespace
}  // namespace kprop
