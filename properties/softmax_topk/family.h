// Softmax + top-k family: case generation, shrinking and encoding (see
// kernels/softmax_topk/softmax_topk.h for the contract, invariants.cpp for
// the checks).
#pragma once

#include "kernels/softmax_topk/softmax_topk.h"
#include "kprop/family.h"

namespace kprop::softmax_topk {

struct Traits {
  using Case = softmax_topk::Case;
  using Result = softmax_topk::Result;
  static constexpr const char* name = "softmax_topk";
  static constexpr const char* description =
      "fused softmax + top-k: K largest probabilities and indices per row, ties to the lower index, -inf "
      "logits";
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
  // Metamorphic transforms (transforms.cpp): add_constant, permute_row.
  static const std::vector<TransformInfo>& transforms();
  static Case transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                        expr::TensorMap& out);
};

void register_invariants(FamilyDef<Traits>& family);
// Kernels built elsewhere (external.cpp): op "softmax_topk" of include/kprop/abi/softmax_topk.h.
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::softmax_topk
