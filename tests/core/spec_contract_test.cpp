// Checks run on every shipped spec (specs/*.yaml whose family is built), so a
// new family's spec is held to them without writing a test: every named
// tensor its family declares is published with its declared shape on 50
// generated cases of the spec's domain (through the spec's target and
// reference), and so are every transform's "transform.*" and
// "transformed.*" tensors (tests/support/tensor_shapes.h).
#include <gtest/gtest.h>

#include <string>

#include "kprop/spec.h"
#include "tests/support/registered.h"
#include "tests/support/tensor_shapes.h"

namespace kprop {
namespace {

class SpecTensors : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecTensors, EveryDeclaredTensorHasItsShape) {
  testing_support::check_named_tensors(load_spec(GetParam()), 50);
}

INSTANTIATE_TEST_SUITE_P(Specs, SpecTensors, ::testing::ValuesIn(testing::shipped_specs([](const Family& f) {
                           return !f.tensor_infos().empty();
                         })),
                         testing::spec_stem);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SpecTensors);

}  // namespace
}  // namespace kprop
