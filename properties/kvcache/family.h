// KV cache family: case generation, shrinking and encoding (see
// kernels/kvcache/kvcache.h for the contract, invariants.cpp for the checks).
#pragma once

#include "kernels/kvcache/kvcache.h"
#include "kprop/draw.h"
#include "kprop/family.h"

namespace kprop::kvcache {

struct Traits {
  using Case = kvcache::Case;
  using Result = kvcache::Result;
  static constexpr const char* name = "kvcache";
  static constexpr const char* description =
      "KV cache: variable-length batch prefilled then decoded; contiguous, paged, chunked prefill, int8";
  static Schema domain_schema();
  // One builder for RapidCheck draws, fuzz bytes and fuzz seed corpora (kprop/draw.h).
  static Case build(Draw& draw, const Values& domain);
  static rc::Seq<Case> shrinks(const Case& c, const Values& domain);
  static std::string in_domain(const Case& c, const Values& domain);
  static double case_bytes(const Case& c);
  static CaseSize max_case_bytes(const Values& domain);
  // A case holds at most 2^15 tokens (validate): batch × (prompt + decode) must fit.
  static std::string check_domain(const Values& domain);
  static YAML::Node to_yaml(const Case& c);
  static Case from_yaml(const YAML::Node& node);
  static CaseStats stats(const Case& c);

  // Named tensors for expression invariants (tensors.cpp).
  static const expr::TensorInfos& tensor_infos();
  static void tensors(const Case& c, const Result* target, const Result* reference, expr::TensorMap& out);
  // Metamorphic transforms (transforms.cpp): reorder_sequences, change_block_size.
  static const std::vector<TransformInfo>& transforms();
  static Case transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                        expr::TensorMap& out);
};

// The derived int8 error bound (invariants.cpp) of every output element, per
// sequence like Result::out.
std::vector<std::vector<double>> int8_bound(const Case& c);
// The derived floor (invariants.cpp) of every output element of an f32, f16
// or bf16 case, from the reference's outputs (zeros for f64 cases): the f32
// arithmetic error (× f32_k) and the rounding of the output to the dtype.
std::vector<std::vector<double>> storage_floor(const Case& c, const Result& reference, double f32_k);

void register_invariants(FamilyDef<Traits>& family);
// Kernels built elsewhere (properties/kvcache/external.cpp).
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::kvcache
