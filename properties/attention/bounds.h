// The tolerance policy for attention (docs/DESIGN.md): a target's max error
// against the fp64 reference may be at most k × the max error of the naive
// materialized computation in the target's own precision, plus an absolute
// floor. The floor here is floor_ulps × eps(dtype) × a first-order error
// scale computed in fp64 from the case, so that it follows the conditioning
// instead of the output's size:
//   c_i   = 2 + sqrt(|visible keys|) + 2·max_j |S|_ij + |LSE_i|
//           (relative error of row i's probabilities; |S|_ij = scale·Σ|q||k|)
//   O     max_i c_i · max_{visible j} |v_j|∞
//   LSE   max_i c_i
//   E_ij  = P_ij (c_i |dP_ij - D_i| + Σ_d |dO||v| + c_i |dO_i|₁ max|v|)
//           (error scale of dS_ij, with D taken from O or from P ⊙ dP)
//   dQ    scale · max Σ_j E_ij |k_j|,  dK  scale · max Σ_i E_ij |q_i|,
//   dV    max Σ_i P_ij c_i |dO_i|,     D   max_i c_i |dO_i|₁ max|v| + Σ_j P_ij Σ|dO||v|
// The naive computation's error alone cannot serve: on integer or constant
// inputs it is often exactly 0 while the online rescaling is not.
//
// f16/bf16 cases compute in f32 (attention.h, "Precision"): eps is f32's and
// the naive baseline is the materialized computation with every tensor it
// materializes stored in the half type. The floor adds the storage roundings
// a correct kernel makes, with u = 2^-11 (f16) or 2^-8 (bf16) the unit
// roundoff of the storage type and τ = half its smallest subnormal (the
// absolute error of rounding a tiny value), first-order terms:
//   O    P rounded before P·V: Σ_j (u·P_j + τ)|v_j| <= (u + Nk·τ)·max|v|;
//        O rounded when stored: u·|O| <= u·max|v|. With the product
//        u·(u·max|v|) of the two: (2u + u² + Nk·τ)·max|v| over the visible
//        keys of any row (ErrorScales::vmax, ::keys).
//   LSE  kept in f32: no storage term.
//   O, dQ, dK, dV: each stored element below the normal range is off by
//        up to τ whatever its size: + τ per element (Nk·τ for a key sum).
//   D    rowsum(dO ⊙ O) from the stored O, which is the forward's own
//        output and off by its storage term δO = (2u + u² + keys·τ)·max|v| + τ:
//        δD <= |dO|₁·δO.
//   dQ, dK, dV (and the key sums): the storage roundings of a correct
//        kernel, each relative u on what it rounds, summed as the products
//        sum them (the storage scales ErrorScales::s*, absolute: no
//        conditioning factor c_i, since these round stored values, not the
//        f32 path):
//          dS before dS·K and dSᵀ·Q   dQ_i: u·scale Σ_j P_ij |dP_ij - D_i| |k_j|   (dK: |q_i|, over i)
//          D (above), through dS      dQ_i: scale Σ_j P_ij δD_i |k_j|              (dK likewise)
//          the stored output          u |dQ| <= u·scale Σ_j P_ij |dP_ij - D_i| |k_j| (dK likewise)
//          P before Pᵀ·dO             dV_j: u Σ_i P_ij |dO_i|, and u |dV_j| for its store: 2u
//        (dS is formed from the unrounded P, so P's rounding in the
//        backward reaches dV only). Second-order terms (a rounding of a
//        value already off by a first-order term) add at most 2u times
//        these: the factor (1 + 2u). Plus τ per rounded P or dS element: dQ
//        τ·scale·Nk·max|k|, dK τ·scale·Nq·g·max|q|, dV τ·Nq·g·max|dO|.
// (An earlier bound multiplied the storage terms by c_i >= 2 + 2 max|S|,
// loose enough for a softmax scale rounded to the storage type to pass.)
//
// Every comparison holds each head to its own budget: k × the naive error
// there plus the floor of its own rows and keys (the maxima above over that
// head): O, LSE, D and dQ per (batch, query head), dK and dV per (batch, kv
// head). Every term of an element's scale comes from its own head (a query
// row's keys; a key's query rows, which are its kv head's), so a head's
// floor bounds its elements as the tensor's did. One budget for the tensor
// let a head of values 2^-12 the size of another's (value kind `wide`) be
// wrong by all it holds, even all zeros, and pass.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kprop/family.h"

namespace kprop::attention {

// Machine epsilon of the precision the kernels compute in (f32 for halves).
double epsilon(DType dtype);
// Unit roundoff of the storage type: 2^-11 (f16), 2^-8 (bf16), else 0.
double storage_roundoff(DType dtype);

// Error scales (to be multiplied by floor_ulps × eps) of one case.
struct ErrorScales {
  double o = 0, lse = 0;
  double dq = 0, dk = 0, dv = 0, d = 0;
  double dk_sum = 0, dv_sum = 0;  // of Σ_j dK_j and Σ_j dV_j per (batch, kv head, d)
  // Storage error bounds of the backward (f16/bf16 roundings, the derivation
  // above), absolute; 0 for f32/f64.
  double sdq = 0, sdk = 0, sdv = 0, sd = 0, sdk_sum = 0, sdv_sum = 0;
  // Backward: the largest exact |dS_ij| and Σ_d |dO_d v_jd| (the magnitude
  // dP's f32 dot product rounds against) over the visible entries: how far
  // a half case's stored dS can reach (invariants_bwd.cpp, beyond_half_range).
  double ds_max = 0, dp_abs_max = 0;
  double vmax = 0;  // max |v| over the visible keys of any row
  int keys = 0;     // most visible keys of any row
};
// The scales of each head and their maxima over the case: the query side's
// (O, LSE, D, dQ and their storage terms) per (batch, query head), the key
// side's (dK, dV, their key sums) per (batch, kv head).
struct Scales {
  ErrorScales all;                    // the maxima
  std::vector<ErrorScales> groups;    // key side, per (batch, kv head), row-major
  std::vector<ErrorScales> q_groups;  // query side, per (batch, query head), row-major
  // One value of `field` per group of its side, in order: compare_tensor's floors.
  std::vector<double> of(double ErrorScales::*field) const;
};
// O, LSE, D, dQ (and their storage terms sd, sdq): judged per query head.
bool query_side(double ErrorScales::*field);
Scales error_scales(const Case& c, bool backward);
// The same, as functions of the case alone: what Trial::once caches, so the
// invariants of one case compute them once (they cost O(B·H·Nq·Nk·D)).
Scales forward_scales(const Case& c);
Scales backward_scales(const Case& c);

// The absolute floor of every tensor: floor_ulps × eps × its error scale,
// plus the storage terms above for f16/bf16 cases; `scales` are
// error_scales(c, backward).
Scales floors(const Case& c, const Scales& scales, bool backward, double floor_ulps);
Scales floors(const Case& c, bool backward, double floor_ulps);
// The floors of the case's maxima alone (Scales::all of floors()), without
// every head's: what a check of the whole case reads.
ErrorScales largest_floors(const Case& c, const Scales& scales, bool backward, double floor_ulps);

// One tensor under the policy, each head to its own floor (`floors`, one
// per head, Scales::of): a pass, or a fail naming the tensor, the element
// (as [b,h,i,d] under `dims`) and the numbers. Every attention tensor's
// elements are equal, contiguous groups, one per (batch, head).
Verdict compare_tensor(const std::string& name, const std::vector<int>& dims,
                       std::span<const double> reference, std::span<const double> target,
                       std::span<const double> naive, double k, std::span<const double> floors);

// max |x - reference| over the elements where the reference is finite.
double max_error(std::span<const double> reference, std::span<const double> x);

// "[1,0,2,3]": the multi-index of flat element `index` of a row-major tensor.
std::string element_name(size_t index, const std::vector<int>& dims);
// The dims to name an element by: of Q, O, dO, dQ ([B, Hq, Nq, D]), of K, V,
// dK, dV ([B, Hkv, Nk, D]), of LSE and D ([B, Hq, Nq]).
inline std::vector<int> q_dims(const Shape& s) {
  return {s.batch, s.heads_q, s.nq, s.dim};
}
inline std::vector<int> kv_dims(const Shape& s) {
  return {s.batch, s.heads_kv, s.nk, s.dim};
}
inline std::vector<int> lse_dims(const Shape& s) {
  return {s.batch, s.heads_q, s.nq};
}

}  // namespace kprop::attention
