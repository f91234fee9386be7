// Beam family: case generation, shrinking and encoding (see kernels/beam/beam.h
// for the contract, invariants.cpp for the checks).
#pragma once

#include "kernels/beam/beam.h"
#include "kprop/family.h"

namespace kprop::beam {

struct Traits {
  KPROP_FAMILY_TRAITS(
      beam::Case, beam::Result, "beam",
      "beam search with finished beams retained in the pool and a length penalty on generated tokens");

  // Named tensors (tensors.cpp) and metamorphic transforms (transforms.cpp):
  // relabel_vocab.
  KPROP_FAMILY_EXPRESSIONS();
};

void register_invariants(FamilyDef<Traits>& family);
// Kernels built elsewhere: the op "beam.step" (include/kprop/abi/beam.h).
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::beam
