// Attention families: attention.fwd and attention.bwd share one Case (the
// backward adds dO), one generator, one shrinker and one YAML codec; see
// kernels/attention/attention.h for the contract and invariants_*.cpp for the
// checks.
#pragma once

#include "kernels/attention/attention.h"
#include "kprop/family.h"

namespace kprop::attention {

// Everything but the result type and the names is shared; `backward`
// decides whether cases carry dO.
template <bool Backward>
struct CaseTraits {
  // case_bytes: inputs, the target's, reference's and naive results, and the
  // reference's materialized Nq×Nk matrices (S, P, dP, dS), in fp64.
  KPROP_FAMILY_CASE_TRAITS(attention::Case);
  static uint64_t content_hash(const Case& c);  // without the YAML tree (FamilyDef::content_hash)
  // build's draws, and its case before Q, K, V and dO are filled where
  // `hollow` holds for that header (Family::build_hollow; build.cpp).
  static Case build(Draw& draw, const Values& domain, const std::function<bool(const Case&)>& hollow);
  // Metamorphic transforms (transforms.cpp): permute keys, permute queries,
  // shift keys, retile.
  KPROP_FAMILY_TRANSFORMS();
};

struct FwdTraits : CaseTraits<false> {
  KPROP_FAMILY_RESULT(FwdResult, "attention.fwd",
                      "flash attention forward: online softmax over Bq×Bk tiles, masks, GQA, O and LSE");
  KPROP_FAMILY_TENSORS();  // tensors.cpp
};

struct BwdTraits : CaseTraits<true> {
  KPROP_FAMILY_RESULT(BwdResult, "attention.bwd",
                      "flash attention backward: dQ, dK, dV from recomputed P and D = rowsum(dO ⊙ O)");
  KPROP_FAMILY_TENSORS();  // tensors.cpp
};

void register_forward_invariants(FamilyDef<FwdTraits>& family);
// Kernels built elsewhere (properties/attention/external.cpp).
void register_forward_external(FamilyDef<FwdTraits>& family);
void register_backward_external(FamilyDef<BwdTraits>& family);
void register_backward_invariants(FamilyDef<BwdTraits>& family);
// The f16/bf16 stores of dQ, dK, dV where a case pins their exact values
// (invariants_stores.cpp; registered by register_backward_invariants).
void register_backward_store_invariants(FamilyDef<BwdTraits>& family);

// ---- shared by the invariants and the tests
// The case with keys and values permuted (per batch and kv head, keys j ->
// perm[j]) and queries permuted (rows i -> qperm[i]), masks moved along.
Case permuted(const Case& c, const std::vector<int>& key_perm, const std::vector<int>& query_perm);
// A compact one-line description: "B1 Hq2/Hkv1 Nq3 Nk5 D2 tiles 2x3 f32 causal".
std::string shape_text(const Case& c);

}  // namespace kprop::attention
