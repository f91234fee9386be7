// attention.fwd/bwd transforms: each transformed case valid under the
// contract (every declared tensor's shape is checked for every spec in
// tests/core/spec_contract_test.cpp).
#include <gtest/gtest.h>

#include "kprop/rng.h"
#include "properties/attention/family.h"
#include "tests/support/tensor_shapes.h"

namespace kprop::attention {
namespace {

const std::string kFwd = std::string(KPROP_SOURCE_DIR) + "/specs/attention_fwd.yaml";
const std::string kBwd = std::string(KPROP_SOURCE_DIR) + "/specs/attention_bwd.yaml";

// (Valid derived cases: tests/sweeps/family_contract_test.cpp.)
TEST(AttentionTensors, TransformsKeepTheNumberOfVisiblePairs) {
  for (const std::string& path : {kFwd, kBwd}) {
    const Spec spec = load_spec(path);
    for (int seed = 1; seed <= 50; ++seed) {
      const auto bytes = spec.family->seed_bytes(spec.domain, static_cast<uint64_t>(seed), 1 + seed % 100);
      const AnyCase any = spec.family->from_bytes(bytes.data(), bytes.size(), spec.domain);
      const Case& c = *static_cast<const Case*>(any.get());
      for (const TransformInfo& tr : FwdTraits::transforms()) {
        expr::TensorMap drawn;
        const Case t =
            FwdTraits::transform(tr.name, c, Values::defaults(tr.params), rng::mix(uint64_t(seed)), drawn);
        // The mask is the same relation, permuted: as many visible pairs.
        int before = 0, after = 0;
        for (int b = 0; b < c.shape.batch; ++b)
          for (int i = 0; i < c.shape.nq; ++i)
            for (int j = 0; j < c.shape.nk; ++j) before += visible(c, b, i, j), after += visible(t, b, i, j);
        EXPECT_EQ(before, after) << tr.name << " on case " << seed;
      }
    }
  }
}

}  // namespace
}  // namespace kprop::attention
