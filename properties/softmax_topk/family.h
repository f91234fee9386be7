// Softmax + top-k family: case generation, shrinking and encoding (see
// kernels/softmax_topk/softmax_topk.h for the contract, invariants.cpp for
// the checks).
#pragma once

#include <limits>

#include "kernels/softmax_topk/softmax_topk.h"
#include "kprop/family.h"

namespace kprop::softmax_topk {

// A masked logit (the generator draws them; invariants look for them).
inline constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Traits {
  KPROP_FAMILY_TRAITS(
      softmax_topk::Case, softmax_topk::Result, "softmax_topk",
      "fused softmax + top-k: K largest probabilities and indices per row, ties to the lower index, -inf "
      "logits");
  static uint64_t content_hash(const Case& c);  // without the YAML tree (FamilyDef::content_hash)

  // Named tensors (tensors.cpp) and metamorphic transforms (transforms.cpp):
  // add_constant, permute_row.
  KPROP_FAMILY_EXPRESSIONS();
};

void register_invariants(FamilyDef<Traits>& family);
// Kernels built elsewhere (external.cpp): op "softmax_topk" of include/kprop/abi/softmax_topk.h.
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::softmax_topk
