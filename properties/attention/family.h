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
  using Case = attention::Case;
  static Schema domain_schema();
  // One builder: RapidCheck generation, fuzz decoding and fuzz seed corpora.
  static Case build(Draw& draw, const Values& domain);
  static rc::Seq<Case> shrinks(const Case& c, const Values& domain);
  static std::string in_domain(const Case& c, const Values& domain);
  // Inputs, the target's, reference's and naive results, and the reference's
  // materialized Nq×Nk matrices (S, P, dP, dS), in fp64.
  static double case_bytes(const Case& c);
  static CaseSize max_case_bytes(const Values& domain);
  static YAML::Node to_yaml(const Case& c);
  static Case from_yaml(const YAML::Node& node);
  static CaseStats stats(const Case& c);
  // Metamorphic transforms (transforms.cpp): permute keys, permute queries,
  // shift keys, retile.
  static const std::vector<TransformInfo>& transforms();
  static Case transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                        expr::TensorMap& out);
};

struct FwdTraits : CaseTraits<false> {
  using Result = FwdResult;
  // Named tensors for expression invariants (tensors.cpp).
  static const expr::TensorInfos& tensor_infos();
  static void tensors(const Case& c, const Result* target, const Result* reference, expr::TensorMap& out);
  static constexpr const char* name = "attention.fwd";
  static constexpr const char* description =
      "flash attention forward: online softmax over Bq×Bk tiles, masks, GQA, O and LSE";
};

struct BwdTraits : CaseTraits<true> {
  using Result = BwdResult;
  // Named tensors for expression invariants (tensors.cpp).
  static const expr::TensorInfos& tensor_infos();
  static void tensors(const Case& c, const Result* target, const Result* reference, expr::TensorMap& out);
  static constexpr const char* name = "attention.bwd";
  static constexpr const char* description =
      "flash attention backward: dQ, dK, dV from recomputed P and D = rowsum(dO ⊙ O)";
};

void register_forward_invariants(FamilyDef<FwdTraits>& family);
// Kernels built elsewhere (properties/attention/external.cpp).
void register_forward_external(FamilyDef<FwdTraits>& family);
void register_backward_external(FamilyDef<BwdTraits>& family);
void register_backward_invariants(FamilyDef<BwdTraits>& family);

// ---- shared by the invariants and the tests
// The case with keys and values permuted (per batch and kv head, keys j ->
// perm[j]) and queries permuted (rows i -> qperm[i]), masks moved along.
Case permuted(const Case& c, const std::vector<int>& key_perm, const std::vector<int>& query_perm);
// A compact one-line description: "B1 Hq2/Hkv1 Nq3 Nk5 D2 tiles 2x3 f32 causal".
std::string shape_text(const Case& c);

}  // namespace kprop::attention
