// DFlash family: case generation, shrinking and encoding (see
// kernels/dflash/dflash.h for the contract, invariants.cpp for the checks).
#pragma once

#include "kernels/dflash/dflash.h"
#include "kprop/family.h"

namespace kprop::dflash {

struct Traits {
  using Case = dflash::Case;
  using Result = dflash::Result;
  static constexpr const char* name = "dflash";
  static constexpr const char* description =
      "speculative decoding: draft-tree attention, parent-indexed greedy verification, bonus token";
  static Schema domain_schema();
  static Case build(Draw& draw, const Values& domain);
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
  // Metamorphic transforms (transforms.cpp): reorder_siblings.
  static const std::vector<TransformInfo>& transforms();
  static Case transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                        expr::TensorMap& out);
};

// Advances `context` as a correct verifier would after `tree` (root: the
// decoder after the context): the greedy path through the tree plus the
// bonus token (build.cpp; the builder and the shrinker share it).
void advance_context(const Autoregressive& root, const DraftTree& tree, std::vector<int>& context);

void register_invariants(FamilyDef<Traits>& family);
// The ops of include/kprop/abi/dflash.h for plugin: and exec: targets.
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::dflash
