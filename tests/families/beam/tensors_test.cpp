// beam's named tensors and transforms: every declared tensor published with
// its declared shape on 50 generated cases, and every transform giving a valid
// case whose transform.* tensors have their declared shapes.
#include <gtest/gtest.h>

#include "kprop/rng.h"
#include "properties/beam/family.h"
#include "tests/support/tensor_shapes.h"

namespace kprop::beam {
namespace {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/beam.yaml";

TEST(BeamTensors, EveryDeclaredTensorHasItsShape) {
  testing_support::check_named_tensors(load_spec(kSpec), 50);
}

TEST(BeamTensors, TransformsGiveValidCases) {
  testing_support::check_transforms_valid<Traits>(load_spec(kSpec), 50,
                                                  [](const Case&, const Case& t) { return validate(t); });
}

}  // namespace
}  // namespace kprop::beam
