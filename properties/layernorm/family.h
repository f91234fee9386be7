// LayerNorm family: case generation, shrinking and encoding (see
// kernels/layernorm/layernorm.h for the contract, invariants.cpp for the checks).
#pragma once

#include "kernels/layernorm/layernorm.h"
#include "kprop/family.h"

namespace kprop::layernorm {

struct Traits {
  using Case = layernorm::Case;
  using Result = layernorm::Result;
  static constexpr const char* name = "layernorm";
  static constexpr const char* description =
      "LayerNorm forward and backward over the last dim (biased variance), f16, bf16 (f32 arithmetic), f32 "
      "and f64";
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
  // Metamorphic transforms (transforms.cpp): shift_rows, scale_rows.
  static const std::vector<TransformInfo>& transforms();
  static Case transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                        expr::TensorMap& out);
};

void register_invariants(FamilyDef<Traits>& family);

// The magnitude each element of an output is computed from (invariants.cpp),
// from a reference result: matches_reference's floor is floor_ulps × unit
// roundoff × these, and the floor.* tensors publish the same.
double y_scale(const Case& c, const Result& ref, size_t row);  // max_d |γ x̂| + |β|
double dx_scale(const Case& c, const Result& ref, size_t row);  // rstd (max|g| + mean|g| + max|x̂| mean|g x̂|)
double dgamma_scale(const Case& c, const Result& ref);          // max_d Σ_rows |dy x̂|
double dbeta_scale(const Case& c);                              // max_d Σ_rows |dy|
// matches_reference's floors without its atol: `ulps` × the arithmetic's
// roundoff (f32's for a half case) × the scale above, plus, for a half
// case, the cost of storing in f16/bf16 (derived in invariants.cpp).
double y_floor(const Case& c, const Result& ref, size_t row, double ulps);
double dx_floor(const Case& c, const Result& ref, size_t row, double ulps);
double dgamma_floor(const Case& c, const Result& ref, double ulps);
double dbeta_floor(const Case& c, double ulps);
// saved_statistics' floors for row `row` (derived in invariants.cpp):
// `ulps` × the arithmetic's roundoff × Σ|x|/D for μ, × rstd for rstd.
double mean_floor(const Case& c, size_t row, double ulps);
double rstd_floor(const Case& c, const Result& ref, size_t row, double ulps);
// Kernels built elsewhere (external.cpp): op "layernorm" of include/kprop/abi/layernorm.h.
void register_external(FamilyDef<Traits>& family);

// Significant decimal digits of v as the case prints it (shortest repr in
// the dtype): the shrinker's measure of how simple a value is.
int significant_digits(double v, DType dtype);

}  // namespace kprop::layernorm
