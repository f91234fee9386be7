// kvcache's named tensors and transforms: every declared tensor published with
// its declared shape on 50 generated cases, and every transform giving a valid
// case whose transform.* tensors have their declared shapes.
#include <gtest/gtest.h>

#include "kprop/rng.h"
#include "properties/kvcache/family.h"
#include "tests/support/tensor_shapes.h"

namespace kprop::kvcache {
namespace {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/kvcache.yaml";

TEST(KvcacheTensors, EveryDeclaredTensorHasItsShape) {
  testing_support::check_named_tensors(load_spec(kSpec), 50);
}

TEST(KvcacheTensors, TransformsGiveValidCases) {
  const Spec spec = load_spec(kSpec);
  for (int seed = 1; seed <= 50; ++seed) {
    const auto bytes = spec.family->seed_bytes(spec.domain, static_cast<uint64_t>(seed), 1 + seed % 60);
    const AnyCase any = spec.family->from_bytes(bytes.data(), bytes.size(), spec.domain);
    const Case& c = *static_cast<const Case*>(any.get());
    for (const TransformInfo& tr : Traits::transforms()) {
      expr::TensorMap drawn;
      const Case t =
          Traits::transform(tr.name, c, Values::defaults(tr.params), rng::mix(uint64_t(seed)), drawn);
      EXPECT_EQ(validate(t), "") << tr.name << " on case " << seed;
    }
  }
}

}  // namespace
}  // namespace kprop::kvcache
