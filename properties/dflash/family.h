// DFlash family: case generation, shrinking and encoding (see
// kernels/dflash/dflash.h for the contract, invariants.cpp for the checks).
#pragma once

#include "kernels/dflash/dflash.h"
#include "kprop/family.h"

namespace kprop::dflash {

struct Traits {
  KPROP_FAMILY_TRAITS(
      dflash::Case, dflash::Result, "dflash",
      "speculative decoding: draft-tree attention, parent-indexed greedy verification, bonus token");

  // Named tensors (tensors.cpp) and metamorphic transforms (transforms.cpp):
  // reorder_siblings.
  KPROP_FAMILY_EXPRESSIONS();
};

// Advances `context` as a correct verifier would after `tree`: the greedy
// path through the tree plus the bonus token; `state`, the decoder after the
// context, is pushed the same tokens, so it stays exactly the decoder after
// the (new) context without decoding the context again (build.cpp; the
// builder, the named tensors and the shrinker share it).
void advance_context(Autoregressive& state, const DraftTree& tree, std::vector<int>& context);

void register_invariants(FamilyDef<Traits>& family);
// The ops of include/kprop/abi/dflash.h for plugin: and exec: targets.
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::dflash
