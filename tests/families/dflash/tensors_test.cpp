// dflash's named tensors and transforms: every declared tensor published with
// its declared shape on 50 generated cases, and every transform giving a valid
// case whose transform.* tensors have their declared shapes.
#include <gtest/gtest.h>

#include "kprop/rng.h"
#include "properties/dflash/family.h"
#include "tests/support/tensor_shapes.h"

namespace kprop::dflash {
namespace {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/dflash.yaml";

TEST(DflashTensors, EveryDeclaredTensorHasItsShape) {
  testing_support::check_named_tensors(load_spec(kSpec), 50);
}

TEST(DflashTensors, TransformsGiveValidCases) {
  testing_support::check_transforms_valid<Traits>(load_spec(kSpec), 50,
                                                  [](const Case&, const Case& t) { return validate(t); });
}

}  // namespace
}  // namespace kprop::dflash
