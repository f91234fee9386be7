// KV cache family: case generation, shrinking and encoding (see
// kernels/kvcache/kvcache.h for the contract, invariants.cpp for the checks).
#pragma once

#include "kernels/kvcache/kvcache.h"
#include "kprop/family.h"

namespace kprop::kvcache {

struct Traits {
  KPROP_FAMILY_TRAITS(
      kvcache::Case, kvcache::Result, "kvcache",
      "KV cache: variable-length batch prefilled then decoded; contiguous, paged, chunked prefill, int8");
  // A case holds at most 2^15 tokens (validate): batch × (prompt + decode) must fit.
  static std::string check_domain(const Values& domain);

  // Named tensors (tensors.cpp) and metamorphic transforms (transforms.cpp):
  // reorder_sequences, change_block_size.
  KPROP_FAMILY_EXPRESSIONS();
};

// The derived int8 error bound (invariants.cpp) of every output element, per
// sequence like Result::out.
std::vector<std::vector<double>> int8_bound(const Case& c);
// The derived floor (invariants.cpp) of every output element of an f32, f16
// or bf16 case, from the reference's outputs (zeros for f64 cases): the f32
// arithmetic error (× f32_k) and the rounding of the output to the dtype.
std::vector<std::vector<double>> storage_floor(const Case& c, const Result& reference, double f32_k);
// The floor's first-order f32 error term per output element (empty rows for
// f64 cases): a function of the case alone, O(T²·Hq·D), so a trial computes
// it once (Trial::once) for all its invariants; and the floor from it.
std::vector<std::vector<double>> f32_error(const Case& c);
std::vector<std::vector<double>> storage_floor(const Case& c, const Result& reference, double f32_k,
                                               const std::vector<std::vector<double>>& f32_error);

void register_invariants(FamilyDef<Traits>& family);
// Kernels built elsewhere (properties/kvcache/external.cpp).
void register_external(FamilyDef<Traits>& family);

}  // namespace kprop::kvcache
