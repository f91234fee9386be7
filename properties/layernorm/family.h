// LayerNorm family: case generation, shrinking and encoding (see
// kernels/layernorm/layernorm.h for the contract, invariants.cpp for the checks).
#pragma once

#include "kernels/layernorm/layernorm.h"
#include "kprop/family.h"

namespace kprop::layernorm {

struct Traits {
  KPROP_FAMILY_TRAITS(
      layernorm::Case, layernorm::Result, "layernorm",
      "LayerNorm forward and backward over the last dim (biased variance), f16, bf16 (f32 arithmetic), f32 "
      "and f64");
  static uint64_t content_hash(const Case& c);  // without the YAML tree (FamilyDef::content_hash)

  // Named tensors (tensors.cpp) and metamorphic transforms (transforms.cpp):
  // shift_rows, scale_rows.
  KPROP_FAMILY_EXPRESSIONS();
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

}  // namespace kprop::layernorm
