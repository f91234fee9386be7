// Mutants: each is the fused implementation (fused_with, fused.cpp) with
// exactly one switch flipped to a known bug: a kernel::Bug of the fused
// kernel (kernels.h), for bf16_truncate and bf16_round_half_away the
// output store, for saved_std_not_rstd the saved statistic, for
// backward_unrounded_xhat the x̂ the backward reads.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/layernorm/kernels.h"
#include "kernels/layernorm/layernorm.h"
#include "kprop/half.h"

namespace kprop::layernorm {
namespace {

using kernel::Bug;

template <Bug B>
Result with(const Case& c) {
  return fused_with(c, B);
}

// The correct kernel, but a bf16 case's outputs (and x̂ cache) are converted
// to bf16 by truncation (the low 16 bits dropped, the store switch of
// fused_with); other dtypes as fused.
float store_bf16_truncated(float v) {
  return half::bf16_to_float(half::bf16_truncate(v));
}
Result bf16_truncate(const Case& c) {
  if (c.dtype != DType::bf16) return fused(c);
  return fused_with(c, Bug::none, store_bf16_truncated);
}

// The correct kernel, but a bf16 case's outputs (and x̂ cache) are converted
// to bf16 by (bits + 0x8000) >> 16, rounding ties away from zero instead of
// to even: one bf16 ulp off where the f32 value is exactly halfway between
// two bf16 values, which the f32 column sums dβ = Σ dy (and dγ = Σ dy x̂')
// of bf16 terms often are (few significant bits, exact in f32); other
// dtypes as fused.
float store_bf16_half_away(float v) {
  return half::bf16_to_float(half::bf16_round_half_away(v));
}
Result bf16_round_half_away(const Case& c) {
  if (c.dtype != DType::bf16) return fused(c);
  return fused_with(c, Bug::none, store_bf16_half_away);
}

// The correct kernel, but the rstd it saves for the backward kernel is the
// standard deviation sqrt(sigma^2 + eps), the inverse of what the contract
// names, while y, x̂ and the fused backward use the right rstd internally:
// only the saved statistic is wrong (f32 for a half case, as kept).
Result saved_std_not_rstd(const Case& c) {
  Result r = fused(c);
  for (double& v : r.rstd)
    v = c.dtype == DType::f64 ? 1.0 / v : static_cast<double>(1.0f / static_cast<float>(v));
  return r;
}

// The row length held in a uint16 (a kernel written for D < 65536, the old
// cap of the spec): for D >= 65536 each row is normalised over its first
// D mod 65536 elements only, the rest of y, x̂ and dx stays 0 and dgamma,
// dbeta count those columns only (specs/layernorm.yaml, profile large).
Result dim_u16(const Case& c) {
  const int kept = static_cast<uint16_t>(c.dim);
  if (kept == c.dim) return fused(c);
  const size_t D = size_t(c.dim), K = size_t(kept), R = size_t(c.rows);
  Result r;
  r.y.assign(R * D, 0), r.xhat.assign(R * D, 0), r.dx.assign(R * D, 0);
  r.dgamma.assign(D, 0), r.dbeta.assign(D, 0);
  r.mean.assign(R, 0), r.rstd.assign(R, 1 / std::sqrt(c.eps));
  if (K == 0) return r;
  Case head = c;
  head.dim = kept;
  head.gamma.resize(K), head.beta.resize(K);
  head.x.clear(), head.dy.clear();
  for (size_t i = 0; i < R; ++i) {
    head.x.insert(head.x.end(), c.x.begin() + long(i * D), c.x.begin() + long(i * D + K));
    head.dy.insert(head.dy.end(), c.dy.begin() + long(i * D), c.dy.begin() + long(i * D + K));
  }
  const Result h = fused(head);
  for (size_t i = 0; i < R; ++i)
    for (size_t j = 0; j < K; ++j) {
      r.y[i * D + j] = h.y[i * K + j];
      r.xhat[i * D + j] = h.xhat[i * K + j];
      r.dx[i * D + j] = h.dx[i * K + j];
    }
  std::copy(h.dgamma.begin(), h.dgamma.end(), r.dgamma.begin());
  std::copy(h.dbeta.begin(), h.dbeta.end(), r.dbeta.begin());
  r.mean = h.mean, r.rstd = h.rstd;
  return r;
}

// The correct kernel, but an f16/bf16 case's y is computed from the rstd
// rounded to bf16's 8-bit precision (the saved statistic packed as bf16 and
// read back before the normalisation): every y of a row is off by the same
// relative error, up to 2^-8 (bf16's unit roundoff), which is often inside the naive two-pass error
// of a bf16 case and exceeds twice it only on some rows. A small-effect
// precision bug; f32 and f64 cases as fused.
Result rstd_bf16_for_y(const Case& c) {
  Result r = fused(c);
  if (!is_half(c.dtype)) return r;
  const size_t D = static_cast<size_t>(c.dim);
  for (size_t row = 0; row < static_cast<size_t>(c.rows); ++row) {
    // The storage type's precision, not its range (f16's range would
    // overflow a large rstd, a different and louder bug).
    int e = 0;
    const double m = std::frexp(r.rstd[row], &e);
    const float rstd = static_cast<float>(std::ldexp(round_to(DType::bf16, m), e));
    const float mean = static_cast<float>(r.mean[row]);
    for (size_t d = 0; d < D; ++d) {
      const float xhat = (static_cast<float>(c.x[row * D + d]) - mean) * rstd;
      r.y[row * D + d] =
          round_to(c.dtype, static_cast<float>(c.gamma[d]) * xhat + static_cast<float>(c.beta[d]));
    }
  }
  return r;
}

// The correct forward, but an f16/bf16 case's backward reads the f32 x̂
// from before its store (kept in registers, or in a second f32 buffer)
// instead of the cache rounded to the dtype, which is what the forward
// reports and the contract says the backward reads (layernorm.h, "Precision
// contract"): dx, dγ and dβ are the f32 backward of the unrounded x̂, then
// stored in the dtype. y, x̂, μ and rstd are fused's. Each x̂ differs from
// its cache by at most u_s |x̂| + s (u_s = 2^-11 for f16, 2^-8 for bf16), so
// dx moves by rstd (e_i mean(g x̂) + x̂_i mean(g e)) only: a small-effect
// precision bug that the fp64 comparisons' storage terms absorb.
// f32 and f64 cases as fused (their cache is the arithmetic's own type).
float keep_f32(float v) {
  return v;
}
Result backward_unrounded_xhat(const Case& c) {
  Result r = fused(c);
  if (!is_half(c.dtype)) return r;
  // The same kernel with no store at all (keep_f32 replaces the dtype's
  // rounding): the same forward, its backward on the f32 x̂, dx, dγ and dβ
  // left in f32. Each is then stored as fused stores it (round to nearest
  // even, once, from f32).
  const Result raw = fused_with(c, Bug::none, keep_f32);
  for (auto field : {&Result::dx, &Result::dgamma, &Result::dbeta})
    for (size_t i = 0; i < (r.*field).size(); ++i) (r.*field)[i] = round_to(c.dtype, (raw.*field)[i]);
  return r;
}

// The correct kernel, but an f16/bf16 case's y is computed from the x̂
// it has already stored in the dtype, y = γ x̂_stored + β in f32 (the
// normalised value written out, then read back for the affine step, as an
// unfused normalise-then-scale pair of kernels does): y is rounded twice,
// an error up to |γ| u_s |x̂| (u_s = 2^-11 for f16, 2^-8 for bf16) before
// its own store. A small-effect precision bug that matches_reference's
// storage terms absorb. f32 and f64 cases as fused.
Result y_from_rounded_xhat(const Case& c) {
  Result r = fused(c);
  if (!is_half(c.dtype)) return r;
  const size_t D = static_cast<size_t>(c.dim);
  for (size_t i = 0; i < r.y.size(); ++i)
    r.y[i] = round_to(c.dtype, static_cast<float>(c.gamma[i % D]) * static_cast<float>(r.xhat[i]) +
                                   static_cast<float>(c.beta[i % D]));
  return r;
}

}  // namespace

const std::vector<Mutant>& mutants() {
  static const std::vector<Mutant> table = {
      {"naive_variance",
       "sigma^2 = E[x^2] - E[x]^2 in one pass over raw x (clamped at 0): cancels catastrophically at large "
       "means",
       with<Bug::naive_variance>},
      {"missing_mean_term", "dx = rstd * (g - xhat * mean(g xhat)): the -mean(g) term dropped",
       with<Bug::missing_mean_term>},
      {"missing_proj_term", "dx = rstd * (g - mean(g)): the -xhat * mean(g xhat) projection dropped",
       with<Bug::missing_proj_term>},
      {"eps_outside_sqrt", "rstd = 1 / (sqrt(sigma^2) + eps) instead of 1 / sqrt(sigma^2 + eps)",
       with<Bug::eps_outside_sqrt>},
      {"unbiased_variance", "sigma^2 = M2 / (D - 1) instead of the biased M2 / D",
       with<Bug::unbiased_variance>},
      {"dgamma_no_xhat",
       "dgamma = sum dy * x: the raw input instead of xhat (right only for normalised inputs)",
       with<Bug::dgamma_no_xhat>},
      {"variance_in_storage",
       "Welford's M2 (the sum of squared deviations) accumulated in the storage type (f16/bf16) instead of "
       "f32: overflows past f16's 65504; f32 and f64 cases as fused",
       with<Bug::variance_in_storage>},
      {"bf16_truncate",
       "outputs (and the xhat cache) converted to bf16 by truncation instead of round-to-nearest-even; "
       "other dtypes as fused",
       bf16_truncate},
      {"bf16_round_half_away",
       "outputs (and the xhat cache) converted to bf16 by (bits + 0x8000) >> 16, ties away from zero "
       "instead of to even; other dtypes as fused",
       bf16_round_half_away},
      {"saved_std_not_rstd",
       "the rstd saved for the backward is sqrt(sigma^2 + eps), its inverse; y, xhat and dx are right",
       saved_std_not_rstd},
      {"dim_u16",
       "row length held in a uint16: for D >= 65536 only the first D mod 65536 elements of a row are "
       "normalised, the rest of y, xhat and dx stays 0",
       dim_u16},
      {"rstd_bf16_for_y",
       "f16/bf16: y normalised with the rstd rounded to bf16 precision (up to 2^-8 off per row); other "
       "dtypes as fused",
       rstd_bf16_for_y},
      {"y_from_rounded_xhat",
       "f16/bf16: y = gamma * xhat + beta computed from the xhat already stored in the dtype (rounded "
       "twice); other dtypes as fused",
       y_from_rounded_xhat},
      {"backward_unrounded_xhat",
       "f16/bf16: the backward (dx, dgamma) reads the f32 xhat from before its store instead of the cache "
       "rounded to the dtype that the forward reports; other dtypes as fused",
       backward_unrounded_xhat},
  };
  return table;
}

}  // namespace kprop::layernorm
