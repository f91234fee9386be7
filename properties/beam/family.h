// Beam family: case generation, shrinking and encoding (see kernels/beam/beam.h
// for the contract, invariants.cpp for the checks).
#pragma once

#include "kernels/beam/beam.h"
#include "kprop/family.h"

namespace kprop::beam {

struct Traits {
  using Case = beam::Case;
  using Result = beam::Result;
  static constexpr const char* name = "beam";
  static constexpr const char* description =
      "beam search with finished beams retained in the pool and a length penalty on generated tokens";
  static Schema domain_schema();
  static Case build(Draw& draw, const Values& domain);  // RapidCheck draws and fuzz bytes alike
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
  // Metamorphic transforms (transforms.cpp): relabel_vocab.
  static const std::vector<TransformInfo>& transforms();
  static Case transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                        expr::TensorMap& out);
};

void register_invariants(FamilyDef<Traits>& family);
// Kernels built elsewhere: the op "beam.step" (include/kprop/abi/beam.h).
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::beam
