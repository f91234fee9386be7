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

// Shrinking (shrink.cpp). Per cycle, which nodes' tokens equal the greedy
// continuation of their own path, each cycle against the context a correct
// verifier reaches (at most 65 cycles); and `c` with every cycle's tokens
// re-chosen, against that context, so that node i of cycle k matches
// exactly when want[k][i] (where a free token allows it).
std::vector<std::vector<bool>> acceptance_pattern(const Case& c);
Case redraft_all(Case c, const std::vector<std::vector<bool>>& want);

void register_invariants(FamilyDef<Traits>& family);
// The ops of include/kprop/abi/dflash.h for plugin: and exec: targets.
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::dflash
