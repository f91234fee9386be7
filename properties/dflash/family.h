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

// The autoregressive oracle's verification of one cycle (oracle.cpp): the
// logits a correct implementation reports and the greedy path it accepts.
struct OracleCycle {
  Logits context_logits;            // after the context: predicts the roots
  std::vector<Logits> node_logits;  // [i]: after context ++ path(i), predicts i's children
  std::vector<int> path;            // the accepted nodes, root first
  int bonus = -1;                   // the greedy token after the path
  double margin = 0;                // smallest argmax margin of the walk (the bonus step too)
  // The tokens a correct verifier emits: the path's, then the bonus.
  std::vector<int> emitted(const DraftTree& tree) const;
};
// `state` is the decoder after the cycle's context, and is left there.
// Every tree edge is decoded once (a depth-first walk that truncates the
// cache on the way back up), with the same pushes in the same order as
// decoding each node's path from scratch: the same logits, bit for bit.
OracleCycle oracle_cycle(Autoregressive& state, const DraftTree& tree);
// Every cycle of `c` against the context a correct verifier reaches: the
// prompt, then each cycle's greedy emissions. A pure function of the case,
// so a trial computes it once (Trial::once) for its invariants and its named
// tensors.
struct Oracle {
  std::vector<int> context_lengths;
  std::vector<OracleCycle> cycles;
};
Oracle oracle_of(const Case& c);

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
