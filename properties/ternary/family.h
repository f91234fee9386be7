// Ternary family: case generation, shrinking and encoding (see
// kernels/ternary/ternary.h for the contract, invariants.cpp for the checks).
#pragma once

#include "kernels/ternary/ternary.h"
#include "kprop/family.h"

namespace kprop::ternary {

struct Traits {
  KPROP_FAMILY_TRAITS(
      ternary::Case, ternary::Result, "ternary",
      "BitNet b1.58 linear layer: absmean ternary weights, absmax int8 activations, straight-through "
      "backward");
  static uint64_t content_hash(const Case& c);            // without the YAML tree (FamilyDef::content_hash)
  static std::string check_domain(const Values& domain);  // values within kMaxMagnitude (schema.cpp)

  // Named tensors (tensors.cpp) and metamorphic transforms (transforms.cpp):
  // permute_out_features.
  KPROP_FAMILY_EXPRESSIONS();
};

void register_invariants(FamilyDef<Traits>& family);
// Kernels built elsewhere (properties/ternary/external.cpp).
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::ternary
