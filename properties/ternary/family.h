// Ternary family: case generation, shrinking and encoding (see
// kernels/ternary/ternary.h for the contract, invariants.cpp for the checks).
#pragma once

#include "kernels/ternary/ternary.h"
#include "kprop/family.h"

namespace kprop::ternary {

struct Traits {
  using Case = ternary::Case;
  using Result = ternary::Result;
  static constexpr const char* name = "ternary";
  static constexpr const char* description =
      "BitNet b1.58 linear layer: absmean ternary weights, absmax int8 activations, straight-through "
      "backward";
  static Schema domain_schema();
  static Case build(Draw& draw, const Values& domain);  // RapidCheck, fuzz bytes and seed corpora
  static rc::Seq<Case> shrinks(const Case& c, const Values& domain);
  static std::string in_domain(const Case& c, const Values& domain);
  static double case_bytes(const Case& c);
  static CaseSize max_case_bytes(const Values& domain);
  static YAML::Node to_yaml(const Case& c);
  static Case from_yaml(const YAML::Node& node);
  static CaseStats stats(const Case& c);

  // Named tensors for expression invariants (tensors.cpp).
  static const expr::TensorInfos& tensor_infos();
  static void tensors(const Case& c, const Result* target, const Result* reference, expr::TensorMap& out);
  // Metamorphic transforms (transforms.cpp): permute_out_features.
  static const std::vector<TransformInfo>& transforms();
  static Case transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                        expr::TensorMap& out);
};

void register_invariants(FamilyDef<Traits>& family);
// Kernels built elsewhere (properties/ternary/external.cpp).
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::ternary
