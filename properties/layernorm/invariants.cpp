// LayerNorm invariants.
//
// Tolerances. Comparisons against the fp64 reference follow docs/DESIGN.md: the
// target's error may be at most k × the error of the naive computation in
// the target's own precision, plus a floor. The naive computation is the
// reference's own algorithm (two passes: μ = Σx/D, then σ² = Σ(x − μ)²/D,
// sequential sums) written in the case's dtype; see kernel::two_pass. The
// floor is `floor_ulps` units of roundoff of the dtype times the magnitude
// an element is built from (|γ x̂| + |β| for y; rstd·(|g| + mean|g| +
// |x̂|·mean|g x̂|) for dx; Σ|dy x̂| and Σ|dy| for dγ and dβ), so it scales
// with the data and is the same rule for f32 and f64. Rows are compared one
// at a time: a badly conditioned row, where the naive error is large, does
// not loosen the bound on its neighbours.
//
// Why this baseline and not another: at a large mean with a small spread the
// naive two-pass f32 error grows like u·|μ|/σ (its μ is rounded before it is
// subtracted), which the fused kernel avoids and E[x²] − E[x]² squares
// (u·(|μ|/σ)²); the bound therefore admits a correct one-pass kernel and
// rejects the naive-variance one by orders of magnitude. On well-scaled rows
// all three are within a few ulps and the floor decides.
//
// Half-precision cases (f16, bf16; the precision contract of layernorm.h:
// half storage, f32 arithmetic). The baseline is two_pass with the same
// storage (half inputs and outputs, f32 arithmetic, μ and rstd f32). The
// floor keeps floor_ulps × f32's roundoff u × the magnitude (the f32
// arithmetic, as for f32 cases) and adds what storing in half costs, with
// u_s the storage dtype's unit roundoff (2^-11, 2^-8) and s half its
// smallest subnormal (the absolute error of a rounding that lands there):
//   y:  rounded once at the store: u_s |y| + s <= u_s y_scale + s.
//   dx: rounded once at the store (u_s dx_scale + s), and computed from the
//       x̂ cache stored in half: x̂'_i = x̂_i + e_i, |e_i| <= u_s |x̂_i| + s,
//       so dx_i moves by rstd (|e_i| |mean(g x̂)| + |x̂_i| |mean(g e)|)
//       <= 2 u_s dx_scale + 2 s max|x̂| dx_scale (rstd mean|g| and
//       rstd mean|g x̂| / max|x̂| are each at most dx_scale), max|x̂| <= sqrt(D).
//   dγ: rounded at the store (u_s dγ_scale + s) after an f32 sum of dy x̂'
//       over the rows: the cache adds u_s Σ|dy x̂| + s Σ|dy|, i.e. u_s
//       dγ_scale + s dβ_scale.
//   dβ: rounded at the store: u_s dβ_scale + s.
// For f32 and f64 cases these terms are 0 and every bound is as before.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <utility>

#include "kprop/search.h"
#include "kprop/tolerance.h"
#include "properties/layernorm/family.h"

namespace kprop::layernorm {
namespace {

using T = Trial<Traits>;

// The storage terms of a half case (see the header comment): u_s; 0 for
// f32 and f64 (s is subnormal_half_step, also 0 there).
double store_u(DType t) {
  return is_half(t) ? unit_roundoff(t) : 0;
}

// Gradual underflow of the arithmetic (f32 for f32, f16 and bf16 cases, f64
// for f64). A product or quotient whose result lands below the normal range
// of the compute type errs by up to eta = denorm_min/2 absolutely, not by
// u times its value (the standard model: fl(a op b) = (a op b)(1 + d) + e,
// |d| <= u, |e| <= eta); a sum or difference lands on a multiple of
// denorm_min and is exact there, adding no eta. The ulps terms, relative to
// the magnitudes, cannot hold it: a correct f32 dx of 1e-40 errs by up to
// 2^-150 = 7.0e-46 where 64 u |dx| is 3.8e-46. Returned: u_f = denorm_min
// itself, 2 eta: f64's eta, 2^-1075, is no double, and the factor 2 covers
// the (1 + u) factors an eta picks up in the operations after it (second
// order). Each bound below counts the products and quotients whose u_f it
// adds.
double underflow_step(DType t) {
  return denorm_min(arithmetic_type(t));
}

size_t at(size_t r, size_t d, size_t D) {
  return r * D + d;
}

std::span<const double> row(const std::vector<double>& v, size_t r, size_t D) {
  return std::span<const double>(v).subspan(r * D, D);
}

// Output shapes; "" when every tensor has the size the case implies.
std::string shape_error(const Case& c, const Result& got) {
  const size_t n = static_cast<size_t>(c.rows) * static_cast<size_t>(c.dim), D = static_cast<size_t>(c.dim),
               R = static_cast<size_t>(c.rows);
  struct Want {
    const char* name;
    size_t have, want;
  };
  for (const Want& w : {Want{"y", got.y.size(), n}, Want{"xhat", got.xhat.size(), n},
                        Want{"dx", got.dx.size(), n}, Want{"rstd", got.rstd.size(), R},
                        Want{"dgamma", got.dgamma.size(), D}, Want{"dbeta", got.dbeta.size(), D}})
    if (w.have != w.want) return fmt::format("{} has {} values, expected {}", w.name, w.have, w.want);
  return "";
}

}  // namespace

// ---- magnitudes an element is computed from (from the reference result);
// shared with the floor.* tensors (tensors.cpp), so both use one floor.
double y_scale(const Case& c, const Result& ref, size_t r) {
  const size_t D = static_cast<size_t>(c.dim);
  double s = 0;
  for (size_t d = 0; d < D; ++d)
    s = std::max(s, std::fabs(c.gamma[d] * ref.xhat[at(r, d, D)]) + std::fabs(c.beta[d]));
  return s;
}

namespace {
struct RowGrad {
  double mean_abs_g = 0, mean_abs_gx = 0, mean_gx = 0, sum_abs_g = 0, sum_abs_xhat = 0, max_abs_g = 0,
         max_abs_xhat = 0;
};
RowGrad row_grad(const Case& c, const Result& ref, size_t r) {
  const size_t D = static_cast<size_t>(c.dim);
  RowGrad g;
  for (size_t d = 0; d < D; ++d) {
    const double gd = c.gamma[d] * c.dy[at(r, d, D)], xh = ref.xhat[at(r, d, D)];
    g.sum_abs_g += std::fabs(gd);
    g.mean_abs_gx += std::fabs(gd * xh);
    g.mean_gx += gd * xh;
    g.sum_abs_xhat += std::fabs(xh);
    g.max_abs_g = std::max(g.max_abs_g, std::fabs(gd));
    g.max_abs_xhat = std::max(g.max_abs_xhat, std::fabs(xh));
  }
  g.mean_abs_g = g.sum_abs_g / static_cast<double>(D);
  g.mean_abs_gx /= static_cast<double>(D);
  g.mean_gx /= static_cast<double>(D);
  return g;
}
}  // namespace

double dx_scale(const Case& c, const Result& ref, size_t r) {
  const RowGrad g = row_grad(c, ref, r);
  return ref.rstd[r] * (g.max_abs_g + g.mean_abs_g + g.max_abs_xhat * g.mean_abs_gx);
}

double dgamma_scale(const Case& c, const Result& ref) {
  const size_t D = static_cast<size_t>(c.dim);
  double s = 0;
  for (size_t d = 0; d < D; ++d) {
    double col = 0;
    for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r)
      col += std::fabs(c.dy[at(r, d, D)] * ref.xhat[at(r, d, D)]);
    s = std::max(s, col);
  }
  return s;
}

double dbeta_scale(const Case& c) {
  const size_t D = static_cast<size_t>(c.dim);
  double s = 0;
  for (size_t d = 0; d < D; ++d) {
    double col = 0;
    for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) col += std::fabs(c.dy[at(r, d, D)]);
    s = std::max(s, col);
  }
  return s;
}

namespace {
// The mean's rounding, carried into x̂ = (x - μ) rstd. A sum of D terms in
// any order (sequential, pairwise, SIMD lanes, a warp's tree) errs by at most
// (D - 1) u Σ|x|, so μ by (D - 1) u mean|x| and every x̂ of the row by the
// same δ = rstd (D - 1) u mean|x| (σ² moves only at second order: Σ(x - μ)
// = 0). On a row with a large mean and a small spread δ is far above
// y_scale's ulps: the naive two-pass baseline's own error covers it only
// when its summation order happens to round the mean the same way (a tree
// sum failed a row where the sequential baseline's mean was exact).
double xhat_shift(const Case& c, const Result& ref, size_t r) {
  const size_t D = static_cast<size_t>(c.dim);
  double sum = 0;
  for (size_t d = 0; d < D; ++d) sum += std::fabs(c.x[at(r, d, D)]);
  return std::fabs(ref.rstd[r]) * static_cast<double>(D - 1) * accumulation_roundoff(c.dtype) * sum /
         static_cast<double>(D);
}
}  // namespace

// matches_reference's floors (the header comment derives the half terms).
// Each adds what the mean's rounding moves (xhat_shift δ): y = γ x̂ + β by
// max|γ| δ; dx = rstd (g - mean g - x̂ mean(g x̂)), g = γ dy, by
// rstd δ (mean|g x̂| + max|x̂| mean|g|); dγ = Σ_rows dy x̂ by Σ_rows |dy| δ.
double y_floor(const Case& c, const Result& ref, size_t r, double ulps) {
  const double u = accumulation_roundoff(c.dtype), us = store_u(c.dtype), s = subnormal_half_step(c.dtype);
  const double ys = y_scale(c, ref, r);
  double max_gamma = 0;
  for (double g : c.gamma) max_gamma = std::max(max_gamma, std::fabs(g));
  return ulps * u * ys + us * ys + s + max_gamma * xhat_shift(c, ref, r);
}
namespace {
// What the mean's rounding moves dx of row r and dγ by (derived above).
double dx_shift(const Case& c, const Result& ref, size_t r) {
  const RowGrad g = row_grad(c, ref, r);
  return std::fabs(ref.rstd[r]) * xhat_shift(c, ref, r) * (g.mean_abs_gx + g.max_abs_xhat * g.mean_abs_g);
}
double dgamma_shift(const Case& c, const Result& ref) {
  const size_t D = static_cast<size_t>(c.dim), R = static_cast<size_t>(c.rows);
  std::vector<double> delta(R);
  for (size_t r = 0; r < R; ++r) delta[r] = xhat_shift(c, ref, r);
  double shift = 0;
  for (size_t d = 0; d < D; ++d) {
    double col = 0;
    for (size_t r = 0; r < R; ++r) col += std::fabs(c.dy[at(r, d, D)]) * delta[r];
    shift = std::max(shift, col);
  }
  return shift;
}
}  // namespace

double dx_floor(const Case& c, const Result& ref, size_t r, double ulps) {
  const double u = accumulation_roundoff(c.dtype), us = store_u(c.dtype), s = subnormal_half_step(c.dtype);
  const double dxs = dx_scale(c, ref, r), root_d = std::sqrt(static_cast<double>(c.dim));
  return ulps * u * dxs + (3 * us + 2 * s * root_d) * dxs + s + dx_shift(c, ref, r);
}
double dgamma_floor(const Case& c, const Result& ref, double ulps) {
  const double u = accumulation_roundoff(c.dtype), us = store_u(c.dtype), s = subnormal_half_step(c.dtype);
  const double gs = dgamma_scale(c, ref);
  return ulps * u * gs + 2 * us * gs + s * dbeta_scale(c) + s + dgamma_shift(c, ref);
}
double dbeta_floor(const Case& c, double ulps) {
  const double u = accumulation_roundoff(c.dtype), us = store_u(c.dtype), s = subnormal_half_step(c.dtype);
  const double bs = dbeta_scale(c);
  return ulps * u * bs + us * bs + s;
}

// saved_statistics' floors. μ = Σx/D: a sum of D terms rounds within a few
// u × Σ|x| (the k × naive term covers long sums), divided by D; storing μ
// rounds by u |μ| <= u Σ|x|/D. rstd = 1/sqrt(σ² + ε): σ² + ε is a sum of
// non-negative terms, so on a well-conditioned row its relative rounding
// is a few u, and 1/sqrt halves a relative error and adds one rounding:
// u × rstd. An ill-conditioned row (large |μ|/σ) is the k × naive term's,
// as for y. u is the arithmetic's roundoff (f32's for a half case, whose
// μ and rstd are stored in f32: no storage term).
// Both add the mean's rounding in any summation order (xhat_shift): μ by
// (D - 1) u mean|x| = δ / rstd; σ² = Σ(x - μ')²/D by (μ' - μ)² (Σ(x - μ) = 0),
// so rstd by rstd δ² / 2 to first order in it.
double mean_floor(const Case& c, size_t r, double ulps) {
  const size_t D = static_cast<size_t>(c.dim);
  double sum = 0;
  for (size_t d = 0; d < D; ++d) sum += std::fabs(c.x[r * D + d]);
  return (ulps + static_cast<double>(D - 1)) * accumulation_roundoff(c.dtype) * sum / static_cast<double>(D);
}
double rstd_floor(const Case& c, const Result& ref, size_t r, double ulps) {
  const double delta = xhat_shift(c, ref, r);
  return ulps * accumulation_roundoff(c.dtype) * std::fabs(ref.rstd[r]) +
         std::fabs(ref.rstd[r]) * delta * delta;
}

namespace {

// The close(k=) policy's parameters: k × the naive error, plus a floor of
// floor_ulps × the roundoff of the dtype × `floor_of`.
Schema policy_params(const std::string& floor_of) {
  return {field::k(2, "multiple of the naive two-pass error in the case's dtype", 0),
          field::real("floor_ulps", 64, 0, 1e12, "floor: units of roundoff " + floor_of)};
}

// The schema with the absolute floor every bound of this file takes.
Schema with_atol(Schema s) {
  s.push_back(field::atol(0, "absolute floor added to the bound", 1e300));
  return s;
}

Schema ulps_param(double fallback, const std::string& what) {
  return with_atol(
      {field::real("ulps", fallback, 0, 1e12,
                   "allowed error in units of roundoff of the arithmetic (2^-24 for f32, f16, bf16; "
                   "2^-53 for f64) times " +
                       what)});
}

// A half case whose exact outputs do not fit the storage dtype cannot be
// judged (a correct kernel stores inf): "" when they fit, else why not.
// The generator keeps outputs under a quarter of the range; shrinking can
// leave it (dy = 1 at a large rstd).
std::string beyond_range(const Case& c, const Result& ref) {
  if (!is_half(c.dtype)) return "";
  const double top = max_finite(c.dtype) * (1 - 2 * unit_roundoff(c.dtype));
  struct Named {
    const char* name;
    const std::vector<double>* v;
  };
  for (const Named& n : {Named{"y", &ref.y}, Named{"xhat", &ref.xhat}, Named{"dx", &ref.dx},
                         Named{"dgamma", &ref.dgamma}, Named{"dbeta", &ref.dbeta}})
    for (double v : *n.v)
      if (!(std::fabs(v) <= top))
        return fmt::format("the reference's {} = {:.6g} is beyond the {} range", n.name, v,
                           dtype_name(c.dtype));
  return "";
}

// The numbers behind a failed comparison: where, then the target's and the
// naive computation's errors and what was allowed.
std::vector<Measured> measured_error(const ToleranceReport& rep, std::vector<Measured> where) {
  where.push_back({"target_error", rep.target_error});
  where.push_back({"naive_error", rep.baseline_error});
  where.push_back({"allowed", rep.allowed});
  return where;
}

// What every comparison starts with: the target's outputs have the case's
// shapes (else it fails) and the reference stays in the dtype's range (else
// the case is discarded). Nothing: go on.
std::optional<Verdict> unusable(const Case& c, const Result& got, const Result& ref) {
  if (const std::string e = shape_error(c, got); !e.empty()) return Verdict::fail(e);
  if (const std::string why = beyond_range(c, ref); !why.empty()) return Verdict::discard(why);
  return std::nullopt;
}

// A pass with its ratio, and each output's (kprop/search.h, kErrorRatioOf).
Verdict with_outputs(double worst, const std::map<std::string, double>& per_output) {
  std::vector<Measured> m = {{kErrorRatio, worst}};
  for (const auto& [name, ratio] : per_output) m.push_back({kErrorRatioOf + name, ratio});
  return Verdict::pass(std::move(m));
}

// The naive baseline against the run's oracle: re-centred on it when it is
// not the family's reference (kprop/tolerance.h recentred).
Result oracle_baseline(T& t, Result naive) {
  if (t.oracle_is_own()) return naive;
  const Result &own = t.own_reference(), &oracle = t.reference();
  for (auto field : {&Result::y, &Result::dx, &Result::dgamma, &Result::dbeta, &Result::mean, &Result::rstd})
    naive.*field = recentred(naive.*field, own.*field, oracle.*field);
  return naive;
}

// ---- matches_reference
Verdict matches_reference(T& t, const Values& p) {
  const Case& c = t.input();
  const Result &got = t.target(), &ref = t.reference();
  if (auto v = unusable(c, got, ref)) return *v;
  const Result naive = oracle_baseline(t, two_pass(c));
  const double k = p.real("k"), ulps = p.real("floor_ulps"), atol = p.real("atol");
  const size_t D = static_cast<size_t>(c.dim);
  double worst = 0;
  std::map<std::string, double> per_output;  // kprop/search.h: ratios per output
  struct Check {
    const char* name;
    const std::vector<double>* got;
    const std::vector<double>* ref;
    const std::vector<double>* naive;
  };
  for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) {
    const double floors[2] = {atol + y_floor(c, ref, r, ulps), atol + dx_floor(c, ref, r, ulps)};
    const Check checks[2] = {{"y", &got.y, &ref.y, &naive.y}, {"dx", &got.dx, &ref.dx, &naive.dx}};
    for (int i = 0; i < 2; ++i) {
      const ToleranceReport rep = compare_with_baseline(row(*checks[i].ref, r, D), row(*checks[i].got, r, D),
                                                        row(*checks[i].naive, r, D), k, floors[i]);
      worst = std::max(worst, error_ratio(rep));
      per_output[checks[i].name] = std::max(per_output[checks[i].name], error_ratio(rep));
      if (!rep.ok) {
        const size_t e = at(r, rep.worst_index, D);
        return Verdict::fail(
            fmt::format("{}[{}][{}] = {}, reference {}: {}", checks[i].name, r, rep.worst_index,
                        (*checks[i].got)[e], (*checks[i].ref)[e], rep.message),
            measured_error(rep, {{"row", double(r)}, {"col", double(rep.worst_index)}}));
      }
    }
  }
  const double floors[2] = {atol + dgamma_floor(c, ref, ulps), atol + dbeta_floor(c, ulps)};
  const Check checks[2] = {{"dgamma", &got.dgamma, &ref.dgamma, &naive.dgamma},
                           {"dbeta", &got.dbeta, &ref.dbeta, &naive.dbeta}};
  for (int i = 0; i < 2; ++i) {
    const ToleranceReport rep =
        compare_with_baseline(*checks[i].ref, *checks[i].got, *checks[i].naive, k, floors[i]);
    worst = std::max(worst, error_ratio(rep));
    per_output[checks[i].name] = std::max(per_output[checks[i].name], error_ratio(rep));
    if (!rep.ok)
      return Verdict::fail(
          fmt::format("{}[{}] = {}, reference {}: {}", checks[i].name, rep.worst_index,
                      (*checks[i].got)[rep.worst_index], (*checks[i].ref)[rep.worst_index], rep.message),
          measured_error(rep, {{"col", double(rep.worst_index)}}));
  }
  return with_outputs(worst, per_output);
}

// ---- saved_statistics: μ and rstd, which a forward saves for its backward
// kernel, compared row by row with the fp64 reference by the policy of
// matches_reference (k × the naive two-pass error + the floors above).
Verdict saved_statistics(T& t, const Values& p) {
  const Case& c = t.input();
  const Result &got = t.target(), &ref = t.reference();
  if (auto v = unusable(c, got, ref)) return *v;
  const Result naive = oracle_baseline(t, two_pass(c));
  const double k = p.real("k"), ulps = p.real("floor_ulps");
  double worst = 0;
  std::map<std::string, double> per_output;
  for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) {
    const struct {
      const char* name;
      const std::vector<double>& got;
      const std::vector<double>& ref;
      const std::vector<double>& naive;
      double floor;
    } checks[2] = {{"mean", got.mean, ref.mean, naive.mean, mean_floor(c, r, ulps)},
                   {"rstd", got.rstd, ref.rstd, naive.rstd, rstd_floor(c, ref, r, ulps)}};
    for (const auto& ch : checks) {
      const ToleranceReport rep = compare_with_baseline(std::span(&ch.ref[r], 1), std::span(&ch.got[r], 1),
                                                        std::span(&ch.naive[r], 1), k, ch.floor);
      worst = std::max(worst, error_ratio(rep));
      per_output[ch.name] = std::max(per_output[ch.name], error_ratio(rep));
      if (!rep.ok)
        return Verdict::fail(
            fmt::format("saved {}[{}] = {}, reference {}: {}", ch.name, r, ch.got[r], ch.ref[r], rep.message),
            measured_error(rep, {{"row", double(r)}}));
    }
  }
  return with_outputs(worst, per_output);
}

// ---- exact identities of the backward, within rounding of the dtype
Verdict dx_sums_to_zero(T& t, const Values& p) {
  const Case& c = t.input();
  const Result &got = t.target(), &ref = t.reference();
  if (auto v = unusable(c, got, ref)) return *v;
  const size_t D = static_cast<size_t>(c.dim);
  const double u = accumulation_roundoff(c.dtype), us = store_u(c.dtype), s = subnormal_half_step(c.dtype);
  double worst = 0;
  for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) {
    long double sum = 0, abs_sum = 0;
    for (size_t d = 0; d < D; ++d) sum += got.dx[at(r, d, D)], abs_sum += std::fabs(got.dx[at(r, d, D)]);
    // The half terms below bound each store by the stored value itself
    // (u_s |dx|): only for finite values, or an inf would allow itself.
    if (is_half(c.dtype) && !std::isfinite(static_cast<double>(abs_sum)))
      return Verdict::fail(
          fmt::format("row {}: dx is not finite (sum of |dx| {})", r, static_cast<double>(abs_sum)),
          {{"row", double(r)}});
    const RowGrad g = row_grad(c, ref, r);
    // Σ dx = rstd·(Σg − D·mean(g) − mean(g x̂)·Σx̂): each term is rounded.
    const double scale =
        ref.rstd[r] * (g.sum_abs_g + std::fabs(g.mean_gx) * (g.sum_abs_xhat + static_cast<double>(D)));
    // A half case also stores each dx (u_s |dx| + s each) and computes from
    // the x̂ cache stored in half (x̂' = x̂ + e, |e| <= u_s |x̂| + s): Σ dx'
    // gains rstd |mean(g x̂')| |Σ e|, with |mean(g x̂')| <= |mean(g x̂)| +
    // u_s mean|g x̂| + s mean|g|. 0 for f32 and f64.
    const double half_terms = us * static_cast<double>(abs_sum) + static_cast<double>(D) * s +
                              ref.rstd[r] * (std::fabs(g.mean_gx) + us * g.mean_abs_gx + s * g.mean_abs_g) *
                                  (us * g.sum_abs_xhat + static_cast<double>(D) * s);
    // The mean's rounding shifts every x̂ by δ (xhat_shift): Σx̂ becomes D δ and
    // mean(g x̂) moves by δ mean|g|, adding rstd D δ (|mean(g x̂)| + δ mean|g|).
    const double delta = xhat_shift(c, ref, r);
    const double mean_shift =
        ref.rstd[r] * static_cast<double>(D) * delta * (std::fabs(g.mean_gx) + delta * g.mean_abs_g);
    // Underflow (underflow_step, u_f per product or quotient): g_j = γ_j dy_j
    // (u_f each), mean(g) = Σg/D (its quotient's u_f plus the g's D u_f / D:
    // 2 u_f), g_j x̂_j (u_f, plus |x̂_j| u_f from g_j), mean(g x̂) (u_f, plus
    // the products' (1 + mean|x̂|) u_f: (2 + mean|x̂|) u_f), x̂_i mean(g x̂)
    // (u_f + |x̂_i| (2 + mean|x̂|) u_f): the inner term g_i - mean(g) - x̂_i
    // mean(g x̂) of dx_i errs by (4 + |x̂_i| (2 + mean|x̂|)) u_f, times rstd,
    // and the products by rstd add up to 3 u_f (rstd times the inner term,
    // or distributed over its three terms). Summed over the row:
    // 3 D u_f + rstd u_f (4 D + Σ|x̂| (2 + mean|x̂|)).
    // (Audit: the fused f32 kernel's Σ dx was -2^-149 on a row whose dx are
    // subnormal, Σ|dx| = 1.4e-40, where the relative terms allowed 8.4e-46.)
    const double uf = underflow_step(c.dtype), mean_abs_xhat = g.sum_abs_xhat / static_cast<double>(D);
    const double underflow =
        3 * static_cast<double>(D) * uf +
        ref.rstd[r] * uf * (4 * static_cast<double>(D) + g.sum_abs_xhat * (2 + mean_abs_xhat));
    const double allowed = p.real("atol") + p.real("ulps") * u * scale + half_terms + mean_shift + underflow;
    worst = std::max(worst, error_ratio(std::fabs(static_cast<double>(sum)), allowed));
    if (!(std::fabs(static_cast<double>(sum)) <= allowed))
      return Verdict::fail(fmt::format("row {}: sum of dx = {:.6g} (sum of |dx| {:.6g}), allowed {:.3g}", r,
                                       static_cast<double>(sum), static_cast<double>(abs_sum), allowed),
                           {{"row", double(r)}, {"sum_dx", static_cast<double>(sum)}, {"allowed", allowed}});
  }
  return Verdict::pass({{kErrorRatio, worst}});
}

// A column sum of the backward, out[d] = Σ_r term(r, d) (dβ: term = dy;
// dγ: dy · x̂), against the target's out within the f32 sum's rounding
// (ulps u Σ|term|) and, for a half case, out's rounding to the storage
// dtype: u_s times the f32 sum's magnitude, or s. dγ's term reads the
// target's own x̂ as reported, which for a half case is the cache rounded
// to the dtype: the cache the contract's backward reads (layernorm.h), so
// the sum has no storage term of x̂. (It had one, u_s Σ|dy x̂'| / (1 - u_s)
// + s Σ|dy|, while the NumPy worker summed dγ from its f32 x̂ before the
// store; a kernel that does so breaks the contract, see
// backward_reads_stored_xhat.)
// `products`: how many products of the arithmetic make each term (dγ: dy x̂,
// 1; dβ: dy itself, 0), each of which may underflow (underflow_step: up to
// u_f per product where the term dy x̂ lands among the subnormals, which the
// relative ulps term does not cover), so the sum over the rows adds rows ×
// products × u_f. The sums themselves add no u_f (a sum of values of the
// arithmetic's type is exact among the subnormals).
//
// Where the f32 sum is exact in every order, the tolerance gives way to an
// exact check of the store. The tolerance (64 ulps of f32, plus u_s of the
// value) cannot see a store one ulp of the dtype off at a tie (bf16 stored
// by (bits + 0x8000) >> 16, ties away from zero: audit). A column's f32
// sum is known exactly when (exact_f32_sum) every term is an f32 value (dβ:
// dy, a value of the dtype; dγ: dy x̂', 8 + 8 (bf16) or 11 + 11 (f16)
// significant bits, which f32's 24 hold unless the product underflows:
// checked as fl32(t) = t, which most f32 cases' 48-bit products fail) and,
// with q = 2^e the lowest set bit over the nonzero terms (q >= 2^-149: they
// are f32 values), Σ|t| <= 2^24 q. Then every partial sum that any order,
// blocking, tree, FMA (its product exact) or wider accumulator forms is a
// multiple k q of q with |k| q <= Σ|t| <= 2^24 q: an integer |k| <= 2^24
// has at most 24 significant bits (2^24 is a power of two), and k q with
// q >= 2^-149 is an f32 value, subnormal or not (Σ|t| <= FLT_MAX is
// checked too): no addition rounds, the f32 sum is S = Σ t itself. The
// contract then stores RNE_dtype(S), one value, a tie included; a target
// that reports unrounded sums (the fp64 reference) reports S itself; `atol`
// relaxes this check too. Columns where the condition fails keep the
// tolerance alone. f64 cases are left to it: their products dy x̂ are not
// checkable in double. (A column of bf16 dy spans a few powers of two, far
// inside the 2^24 the condition allows, so most half cases' dβ columns are
// judged exactly.)
std::optional<long double> exact_f32_sum(DType dtype, size_t count,
                                         const std::function<double(size_t)>& term) {
  if (dtype == DType::f64) return std::nullopt;
  long double sum = 0, abs_sum = 0;
  int low = std::numeric_limits<int>::max();  // log2 of q
  for (size_t i = 0; i < count; ++i) {
    const double t = term(i);
    if (t == 0) continue;
    if (!std::isfinite(t) || static_cast<double>(static_cast<float>(t)) != t) return std::nullopt;
    low = std::min(low, lowest_bit(t));
    sum += t, abs_sum += std::fabs(t);  // exact in long double wherever the condition holds
  }
  if (low == std::numeric_limits<int>::max()) return 0.0L;  // every term 0
  if (!(abs_sum <= std::ldexp(1.0L, low + 24)) || !(abs_sum <= std::numeric_limits<float>::max()))
    return std::nullopt;
  return sum;
}

template <typename Term>
Verdict column_sums(T& t, const Values& p, const char* name, const char* what, const std::vector<double>& out,
                    Term term, int products) {
  const Case& c = t.input();
  const size_t D = static_cast<size_t>(c.dim);
  const double u = accumulation_roundoff(c.dtype), us = store_u(c.dtype), s = subnormal_half_step(c.dtype);
  const double ulps = p.real("ulps"), atol = p.real("atol");
  double worst = 0;
  for (size_t d = 0; d < D; ++d) {
    long double sum = 0, abs_sum = 0;
    for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) {
      const double x = term(at(r, d, D));
      sum += x, abs_sum += std::fabs(x);
    }
    // A term that is not finite (an inf or NaN in the target's x̂; x̂ is
    // bounded by sqrt(D) for any finite input) makes `allowed` inf and
    // would allow itself.
    if (!std::isfinite(static_cast<double>(abs_sum)))
      return Verdict::fail(
          fmt::format("{}[{}]: {} is not finite (a term is {}): the outputs it reads are not "
                      "finite",
                      name, d, what, static_cast<double>(abs_sum)),
          {{"col", double(d)}});
    const double want = static_cast<double>(sum);
    if (const auto exact = exact_f32_sum(c.dtype, static_cast<size_t>(c.rows),
                                         [&](size_t r) { return term(at(r, d, D)); })) {
      const double s32 = static_cast<double>(*exact), stored = round_to(c.dtype, s32);
      if (!(out[d] == stored || out[d] == s32 || std::fabs(out[d] - stored) <= atol))
        return Verdict::fail(
            fmt::format("{}[{}] = {}, but the f32 {} is exactly {} (every term a multiple of its lowest "
                        "bit, their magnitudes summing to at most 2^24 of it: exact in any order), "
                        "stored to nearest even in {} as {} (a store that rounds ties away from zero, "
                        "or truncates?)",
                        name, d, out[d], what, s32, dtype_name(c.dtype), stored),
            {{"col", double(d)}, {name, out[d]}, {"expected", stored}});
    }
    const double acc = ulps * u * static_cast<double>(abs_sum) +
                       static_cast<double>(c.rows) * products * underflow_step(c.dtype);
    const double allowed = atol + acc + us * (std::fabs(want) + acc) + s;
    worst = std::max(worst, error_ratio(std::fabs(out[d] - want), allowed));
    if (!(std::fabs(out[d] - want) <= allowed))
      return Verdict::fail(
          fmt::format("{}[{}] = {}, {} = {} (allowed error {:.3g})", name, d, out[d], what, want, allowed),
          {{"col", double(d)}, {name, out[d]}, {"expected", want}});
  }
  return Verdict::pass({{kErrorRatio, worst}});
}

Verdict dbeta_is_sum_dy(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& got = t.target();
  if (auto v = unusable(c, got, t.reference())) return *v;
  return column_sums(
      t, p, "dbeta", "sum of dy", got.dbeta, [&](size_t i) { return c.dy[i]; }, 0);
}

// dγ against the target's own cached x̂: the backward agrees with its forward.
Verdict dgamma_is_sum_dy_xhat(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& got = t.target();
  if (auto v = unusable(c, got, t.reference())) return *v;
  return column_sums(
      t, p, "dgamma", "sum of dy * xhat (the target's own xhat)", got.dgamma,
      [&](size_t i) { return c.dy[i] * got.xhat[i]; }, 1);
}

// The values that give v when stored in the half dtype t (round to
// nearest even; a tie counted on both sides): from the midpoint to v's
// lower neighbour to the midpoint to its upper one (past the largest
// finite value, the overflow threshold; from 0, half the smallest
// subnormal either way). v itself when it is not a value of t (a target
// that does not round: nothing but v gives v). v finite. Half values and
// their midpoints are exact in double.
std::pair<double, double> rounds_from(DType t, double v) {
  if (round_to(t, v) != v) return {v, v};
  const double a = std::fabs(v);
  const double down = neighbour_abs(t, a, -1);  // -denorm_min from 0
  double up = neighbour_abs(t, a, +1);
  if (std::isinf(up)) up = a + (a - down);
  const double lo = (down + a) / 2, hi = (a + up) / 2;
  return std::signbit(v) ? std::pair{-hi, -lo} : std::pair{lo, hi};
}

// ---- y_from_unrounded_xhat (f16/bf16 cases): y from the target's own
// statistics. The contract (layernorm.h, "Precision contract") computes
// y = γ x̂ + β in f32 from the f32 x̂ and rounds y once, at its store; a
// kernel that computes y from the x̂ it has already rounded to the dtype
// rounds twice, an error of up to |γ| u_s |x̂| (u_s = 2^-11 f16, 2^-8
// bf16) that matches_reference's storage terms absorb. Here y is
// recomputed from the target's own reported mean μ and rstd ρ (f32 values:
// a half case keeps them in f32) and must be what an f32 evaluation of the
// contract, stored to nearest, can give.
//
// The bound, per element (row r, column d), with x, γ, β the case's half
// values. In exact arithmetic y* = γ (x - μ) ρ + β. A correct kernel (u =
// 2^-24; γ_n = n u / (1 - n u) as for backward_reads_stored_xhat) computes
// x̂ = ((x - x₀) - c) ρ with x₀ a shift and c = μ - x₀ (Welford over x
// shifted by the row's first element, kernels.h; or x - μ directly: x₀ =
// 0), and reports μ = fl(x₀ + c). The two subtractions, the product and
// μ's own rounding each err by at most u times a value no larger than
// |x| + |μ| + 2W (W: the row's largest |x|, which bounds x₀, and with it
// c up to |μ| + W), so
//   |x̂_f32 - (x - μ) ρ| <= E = γ_4 ρ (|x| + 2 |μ| + 2 W) + u_f,
// u_f (underflow_step) for the product by ρ in the subnormals. Then y_f32 =
// fl(fl(γ x̂_f32) + β) (an FMA rounds once): |y_f32 - (γ x̂_f32 + β)| <=
// γ_2 (|γ| |x̂_f32| + |β|) + u_f, so y_f32 lies within
//   A = |γ| E + γ_2 (|γ| (|x̂*| + E) + |β|) + u_f
// of y* (x̂* = (x - μ) ρ). The store: y is RNE_s(y_f32), so the values that
// round to y (rounds_from) must meet [y* - A, y* + A]; a y that is not a
// value of the dtype (the fp64 reference) must lie in it itself; an
// infinite y needs |y*| + A past the dtype's overflow threshold. The
// evaluator's long double arithmetic adds 8 ε_L (|γ x̂*| + |β|) and the
// double rounding 2^-52 (|y*| + A), as there. On a row far off zero
// (|μ| >> σ) E is large and little can be seen; on centred rows A is a
// few f32 ulps of |γ| (|x̂| + 3) + |β|, far below the double rounding's
// |γ| 2^-12 |x̂| (f16).
// f32 and f64 cases are discarded: y is computed and stored in the
// arithmetic's own type.
// The `needs` of the half-only invariants: a domain with f16 or bf16 cases.
std::string needs_half_cases(const Values& d, const Values&) {
  const Choices& dtypes = d.choices("dtypes");
  if (std::any_of(dtypes.begin(), dtypes.end(),
                  [](const std::string& t) { return t == "f16" || t == "bf16"; }))
    return "";
  return fmt::format("f16 or bf16 cases, but domain.dtypes is [{}]; add one or drop the invariant",
                     join(dtypes));
}

Verdict y_from_unrounded_xhat(T& t, const Values& p) {
  const Case& c = t.input();
  if (!is_half(c.dtype)) return Verdict::discard("f32/f64 case: y is stored in the arithmetic's own type");
  const Result &got = t.target(), &ref = t.reference();
  if (auto v = unusable(c, got, ref)) return *v;
  const size_t D = static_cast<size_t>(c.dim);
  const double u = accumulation_roundoff(c.dtype), uf = underflow_step(c.dtype), atol = p.real("atol");
  const double gamma2 = 2 * u / (1 - 2 * u), gamma4 = 4 * u / (1 - 4 * u);
  const double eval_u = 8 * std::numeric_limits<long double>::epsilon();
  const double overflow = rounds_from(c.dtype, max_finite(c.dtype)).second;
  double worst = 0;
  for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) {
    const double mu = got.mean[r], rho = got.rstd[r];
    if (!std::isfinite(mu) || !std::isfinite(rho))
      return Verdict::fail(fmt::format("row {}: the mean or rstd the target reports is not finite (mean {}, "
                                       "rstd {})",
                                       r, mu, rho),
                           {{"row", double(r)}});
    double widest = 0;
    for (size_t d = 0; d < D; ++d) widest = std::max(widest, std::fabs(c.x[at(r, d, D)]));
    for (size_t d = 0; d < D; ++d) {
      const size_t i = at(r, d, D);
      const long double xh = (static_cast<long double>(c.x[i]) - mu) * rho;
      const long double want = c.gamma[d] * xh + c.beta[d];
      const double g = std::fabs(c.gamma[d]), b = std::fabs(c.beta[d]),
                   ax = std::fabs(static_cast<double>(xh));
      const double e = gamma4 * std::fabs(rho) * (std::fabs(c.x[i]) + 2 * std::fabs(mu) + 2 * widest) + uf;
      const double arith = g * e + gamma2 * (g * (ax + e) + b) + uf + atol;
      const double centre = static_cast<double>(want);
      const double a = arith + eval_u * (g * ax + b) + 0x1.0p-52 * (std::fabs(centre) + arith);
      const double y = got.y[i];
      double error = INFINITY;
      if (std::isfinite(y)) {
        const std::pair<double, double> from = rounds_from(c.dtype, y);
        error = std::max({0.0, from.first - centre, centre - from.second});
      } else if (std::isinf(y) && std::signbit(y) == std::signbit(centre)) {
        error = std::max(0.0, overflow - std::fabs(centre));
      }
      worst = std::max(worst, error_ratio(error, a));
      if (!(error <= a))
        return Verdict::fail(
            fmt::format("y[{}][{}] = {}, but the contract's y from the target's own mean and rstd is "
                        "{:.9g} +- {:.3g} before the store (is y computed from the xhat already rounded "
                        "to {}?)",
                        r, d, y, centre, a, dtype_name(c.dtype)),
            {{"row", double(r)}, {"col", double(d)}, {"y", y}, {"expected", centre}, {"allowed", a}});
    }
  }
  return Verdict::pass({{kErrorRatio, worst}});
}

// ---- backward_reads_stored_xhat (f16/bf16 cases): dx from the cache the
// target reports. The contract (layernorm.h, "Precision contract") stores
// the x̂ cache rounded to the dtype and has the backward read that rounded
// cache; a kernel whose backward uses its f32 x̂ from before the store is
// off by rstd (e_i mean(g x̂) + x̂_i mean(g e)), |e_i| <= u_s |x̂_i| + s,
// which the fp64 comparisons absorb in their storage terms. Here dx is
// recomputed from the target's own reported x̂' (half values) and rstd ρ
// (an f32 value: a half case keeps rstd in f32) and must be what an f32
// evaluation of the contract's formula, stored to nearest, can give.
//
// The bound, per element i of a row. In exact arithmetic, with g = γ ⊙ dy
// (γ, dy: the case's half values),
//   dx*_i = ρ (g_i - mean(g) - x̂'_i mean(g x̂')),
//   M_i   = ρ (|g_i| + mean|g| + |x̂'_i| mean|g x̂'|).
// A correct kernel evaluates dx*_i in f32 (u = 2^-24; the standard model
// fl(a op b) = (a op b)(1 + δ), |δ| <= u, γ_n = n u / (1 - n u), and
// (1 + θ_j)(1 + θ_k) = 1 + θ_{j+k}, |θ_n| <= γ_n), sums in any order:
//   g_i = γ_i dy_i                     1 rounding (exact for halves in f32's
//                                      normal range; counted anyway)
//   mean(g): a sum of D terms in any order, D - 1 roundings, divided by D
//       (or times a rounded 1/D: 2): |err| <= γ_{D+2} mean|g|
//   mean(g x̂'): the products add 2 (g, then g x̂'), the sum D - 1, the
//       quotient 2: |err| <= γ_{D+3} mean|g x̂'|
//   x̂'_i mean(g x̂'): one more: |err| <= γ_{D+4} |x̂'_i| mean|g x̂'|
//   g_i - mean(g) - x̂'_i mean(g x̂'): two subtractions in either order,
//       each rounding its partial result (at most the sum of the three
//       magnitudes): |err| <= γ_{D+6} (|g_i| + mean|g| + |x̂'_i| mean|g x̂'|)
//   times ρ (or ρ distributed over the three terms: one rounding each):
//       |dx_f32,i - dx*_i| <= γ_{D+7} M_i.
// An FMA, a wider accumulator or a shorter summation order rounds less.
// Underflow of the f32 arithmetic (underflow_step, u_f per product or
// quotient, as dx_sums_to_zero derives it): the inner term errs by
// (4 + |x̂'_i| (2 + mean|x̂'|)) u_f, ρ times it, and the products by ρ add
// up to 3 u_f. So dx_f32,i lies in [dx*_i - A_i, dx*_i + A_i],
//   A_i = γ_{D+7} M_i + ρ u_f (4 + |x̂'_i| (2 + mean|x̂'|)) + 3 u_f.
// The store. The kernel stores v = RNE_s(dx_f32,i) (round to nearest even
// in the dtype, subnormals and overflow included), so dx_f32,i lies among
// the values that round to v, [m_-, m_+] (the midpoints to v's neighbours,
// rounds_from), and that interval must meet [dx*_i - A_i, dx*_i + A_i]:
//   error_i = max(0, m_- - dx*_i, dx*_i - m_+) <= A_i.
// This is the store's whole allowance, no u_s |dx| + s slack beyond the
// dtype's own grid: where [dx*_i - A_i, dx*_i + A_i] holds no rounding
// boundary, one stored value is right. A target that reports dx unrounded
// (the fp64 reference; a dx that is not a value of the dtype) must lie in
// [dx*_i - A_i, dx*_i + A_i] itself.
// The evaluator's own arithmetic: dx*_i and M_i in long double (unit
// roundoff ε_L / 2, ε_L its epsilon; the inputs are half or f32 values,
// exact there), the same D + 7 roundings: (D + 8) ε_L M_i; dx*_i is then
// rounded to double and error_i taken in double (2^-53 |dx*_i| and 2^-53
// error_i, which 2^-52 (|dx*_i| + A_i) covers where it matters).
// `atol` is added to A_i (0 by default). The error ratio reported is
// error_i / A_i: how far the f32 dx must have been from dx*_i, in A_i.
// f32 and f64 cases are discarded: their cache is the arithmetic's own
// type, nothing is rounded between the forward and the backward.
Verdict backward_reads_stored_xhat(T& t, const Values& p) {
  const Case& c = t.input();
  if (!is_half(c.dtype))
    return Verdict::discard("f32/f64 case: its xhat cache is not rounded to a storage dtype");
  const Result &got = t.target(), &ref = t.reference();
  if (auto v = unusable(c, got, ref)) return *v;
  const size_t D = static_cast<size_t>(c.dim);
  const double u = accumulation_roundoff(c.dtype), uf = underflow_step(c.dtype), atol = p.real("atol");
  const double n = static_cast<double>(D) + 7;
  const double gamma_n = n * u / (1 - n * u);
  const double eval_u = (static_cast<double>(D) + 8) * std::numeric_limits<long double>::epsilon();
  double worst = 0;
  for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) {
    const long double rho = got.rstd[r];
    long double sum_g = 0, sum_gx = 0, abs_g = 0, abs_gx = 0, abs_xhat = 0;
    for (size_t d = 0; d < D; ++d) {
      const long double g = static_cast<long double>(c.gamma[d]) * c.dy[at(r, d, D)],
                        xh = got.xhat[at(r, d, D)];
      sum_g += g, sum_gx += g * xh;
      abs_g += std::fabs(g), abs_gx += std::fabs(g * xh), abs_xhat += std::fabs(xh);
    }
    // A cache or rstd that is not finite would make the bound inf or NaN
    // and allow itself (x̂ is bounded by sqrt(D) and rstd by 1/sqrt(ε)).
    if (!std::isfinite(static_cast<double>(abs_gx + abs_xhat)) || !std::isfinite(static_cast<double>(rho)))
      return Verdict::fail(fmt::format("row {}: the xhat cache or rstd the backward reads is not finite "
                                       "(rstd {}, sum |xhat| {})",
                                       r, static_cast<double>(rho), static_cast<double>(abs_xhat)),
                           {{"row", double(r)}});
    const long double Dl = static_cast<long double>(D);
    const long double mean_g = sum_g / Dl, mean_gx = sum_gx / Dl, mean_abs_g = abs_g / Dl,
                      mean_abs_gx = abs_gx / Dl, mean_abs_xhat = abs_xhat / Dl;
    for (size_t d = 0; d < D; ++d) {
      const size_t i = at(r, d, D);
      const long double g = static_cast<long double>(c.gamma[d]) * c.dy[i], xh = got.xhat[i];
      const long double want = rho * (g - mean_g - xh * mean_gx);
      const double mag =
          static_cast<double>(std::fabs(rho) * (std::fabs(g) + mean_abs_g + std::fabs(xh) * mean_abs_gx));
      const double arith = gamma_n * mag +
                           static_cast<double>(std::fabs(rho)) * uf *
                               (4 + std::fabs(got.xhat[i]) * (2 + static_cast<double>(mean_abs_xhat))) +
                           3 * uf + atol;
      const double a = arith + eval_u * mag + 0x1.0p-52 * (std::fabs(static_cast<double>(want)) + arith);
      const double dx = got.dx[i], centre = static_cast<double>(want);
      // How far dx* is from what may give dx: from the values that round
      // to dx when dx is a value of the dtype, else from dx itself.
      // (A NaN dx would compare false everywhere: failed as not finite.)
      const std::pair<double, double> from = rounds_from(c.dtype, dx);
      const double error =
          std::isfinite(dx) ? std::max({0.0, from.first - centre, centre - from.second}) : INFINITY;
      worst = std::max(worst, error_ratio(error, a));
      if (!(error <= a))
        return Verdict::fail(
            fmt::format(
                "dx[{}][{}] = {} (what [{}, {}] gives when stored in {}), but the contract's dx from "
                "the target's own xhat cache (as stored in {}) and rstd is {:.9g} +- {:.3g} before the "
                "store (does the backward read the xhat from before its store?)",
                r, d, dx, from.first, from.second, dtype_name(c.dtype), dtype_name(c.dtype), centre, a),
            {{"row", double(r)}, {"col", double(d)}, {"dx", dx}, {"expected", centre}, {"allowed", a}});
    }
  }
  return Verdict::pass({{kErrorRatio, worst}});
}

// ---- stability
Verdict constant_rows(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& got = t.target();
  if (const std::string e = shape_error(c, got); !e.empty()) return Verdict::fail(e);
  const size_t D = static_cast<size_t>(c.dim);
  const double tol = p.real("xhat_tol");
  bool any_constant = false;
  for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) {
    const auto xr = row(c.x, r, D);
    if (!std::all_of(xr.begin(), xr.end(), [&](double v) { return v == xr[0]; })) continue;
    any_constant = true;
    for (size_t d = 0; d < D; ++d) {
      const double xh = got.xhat[at(r, d, D)], y = got.y[at(r, d, D)];
      if (!(std::fabs(xh) <= tol) || !(std::fabs(y - c.beta[d]) <= tol * std::fabs(c.gamma[d])))
        return Verdict::fail(
            fmt::format("row {} is constant ({:.9g}, zero variance) but xhat[{}] = {:.6g} and "
                        "y = {:.9g} where beta = {:.9g}",
                        r, xr[0], d, xh, y, c.beta[d]),
            {{"row", double(r)}, {"col", double(d)}, {"xhat", xh}});
    }
  }
  if (!any_constant) return Verdict::discard("no constant row");
  return Verdict::pass();
}

Verdict all_finite(T& t, const Values&) {
  const Case& c = t.input();
  const Result &got = t.target(), &ref = t.reference();
  if (auto v = unusable(c, got, ref)) return *v;
  struct Named {
    const char* name;
    const std::vector<double>* got;
    const std::vector<double>* ref;
  };
  for (const Named& n : {Named{"y", &got.y, &ref.y}, Named{"xhat", &got.xhat, &ref.xhat},
                         Named{"rstd", &got.rstd, &ref.rstd}, Named{"dx", &got.dx, &ref.dx},
                         Named{"dgamma", &got.dgamma, &ref.dgamma}, Named{"dbeta", &got.dbeta, &ref.dbeta}}) {
    for (double v : *n.ref)
      if (!std::isfinite(v)) return Verdict::discard(fmt::format("the reference's {} is not finite", n.name));
    for (size_t i = 0; i < n.got->size(); ++i)
      if (!std::isfinite((*n.got)[i]))
        return Verdict::fail(fmt::format("{}[{}] = {} where the reference is finite ({:.9g})", n.name, i,
                                         (*n.got)[i], (*n.ref)[i]),
                             {{"index", double(i)}});
  }
  return Verdict::pass();
}

// ---- finite differences of the fp64 reference forward
// L = Σ dy ⊙ y. ∂L/∂x by central differences of each row's x̂ (step
// `step`/rstd, the row's natural scale; L restricted to the row and without β
// so the difference is not lost under it); ∂L/∂γ and ∂L/∂β are exact
// differences of an affine function, taken with a large step.
Verdict finite_differences(T& t, const Values& p) {
  const Case& c = t.input();
  if (c.dtype != DType::f64) return Verdict::discard("finite differences run on f64 cases");
  if (static_cast<int64_t>(c.rows) * c.dim > p.integer("max_elements"))
    return Verdict::discard("case larger than max_elements");
  const Result& got = t.target();
  if (const std::string e = shape_error(c, got); !e.empty()) return Verdict::fail(e);
  const Result& ref = t.reference();
  const size_t D = static_cast<size_t>(c.dim), R = static_cast<size_t>(c.rows);
  const double step = p.real("step"), rtol = p.real("rtol"), atol = p.real("atol");

  // The losses run the reference's forward (reference_forward_row) into
  // scratch rows: no Result per step, and the same arithmetic as reference().
  std::vector<double> xhat(D), y(D);
  for (size_t r = 0; r < R; ++r) {
    std::vector<double> x(c.x.begin() + static_cast<long>(r * D),
                          c.x.begin() + static_cast<long>((r + 1) * D));
    const double* dy = &c.dy[r * D];
    auto loss = [&] {
      reference_forward_row(x.data(), c.gamma.data(), c.beta.data(), D, c.eps, xhat.data(), y.data());
      long double l = 0;
      for (size_t d = 0; d < D; ++d) l += dy[d] * c.gamma[d] * xhat[d];
      return static_cast<double>(l);
    };
    // The target's own rounding on a row with a large mean (dx_shift) comes
    // on top of the finite differences' tolerance.
    const double scale = dx_scale(c, ref, r), shift = dx_shift(c, ref, r);
    for (size_t d = 0; d < D; ++d) {
      // The row, moved to x0 ± h and back (no copy per element).
      const double x0 = x[d], h = step / ref.rstd[r];
      const double up = x0 + h, down = x0 - h, width = up - down;
      if (!(width > 0) || width > 20 * h)
        return Verdict::discard("x too coarse for the finite-difference step");
      x[d] = up;
      const double loss_up = loss();
      x[d] = down;
      const double loss_down = loss();
      x[d] = x0;
      const double fd = (loss_up - loss_down) / width;
      const double g = got.dx[at(r, d, D)];
      const double allowed = allowed_error(atol, rtol, scale) + shift;
      if (!(std::fabs(g - fd) <= allowed))
        return Verdict::fail(
            fmt::format("dx[{}][{}] = {:.9g}, finite differences of the fp64 forward give {:.9g} "
                        "(allowed error {:.3g})",
                        r, d, g, fd, allowed),
            {{"row", double(r)}, {"col", double(d)}, {"dx", g}, {"finite_difference", fd}});
    }
  }

  // γ and β: y is affine in each, so any step is exact up to rounding.
  auto column_loss = [&](const Case& k, size_t d) {
    long double l = 0;
    for (size_t r = 0; r < R; ++r) {
      reference_forward_row(&k.x[r * D], k.gamma.data(), k.beta.data(), D, k.eps, xhat.data(), y.data());
      l += k.dy[at(r, d, D)] * y[d];
    }
    return static_cast<double>(l);
  };
  double max_y = 0, max_gamma = 0, max_beta = 0, max_xhat = 0;
  for (double v : ref.y) max_y = std::max(max_y, std::fabs(v));
  for (double v : ref.xhat) max_xhat = std::max(max_xhat, std::fabs(v));
  for (double v : c.gamma) max_gamma = std::max(max_gamma, std::fabs(v));
  for (double v : c.beta) max_beta = std::max(max_beta, std::fabs(v));
  const double gamma_scale = dgamma_scale(c, ref), beta_scale = dbeta_scale(c),
               gamma_shift = dgamma_shift(c, ref);
  Case moved = c;  // moved one parameter at a time and back
  for (size_t d = 0; d < D; ++d) {
    struct Param {
      const char* name;
      std::vector<double> Case::*field;
      double h, got, scale;
    };
    const double h_gamma =
        std::min(1e300, 1e-2 * std::max({max_gamma, max_y / std::max(max_xhat, 1e-300), 1e-300}));
    const double h_beta = std::min(1e300, 1e-2 * std::max({max_beta, max_y, 1e-300}));
    for (const Param& q : {Param{"dgamma", &Case::gamma, h_gamma, got.dgamma[d], gamma_scale},
                           Param{"dbeta", &Case::beta, h_beta, got.dbeta[d], beta_scale}}) {
      double& v = (moved.*q.field)[d];
      const double v0 = v, up = v0 + q.h, down = v0 - q.h, width = up - down;
      v = up;
      const double loss_up = column_loss(moved, d);
      v = down;
      const double loss_down = column_loss(moved, d);
      v = v0;
      const double fd = (loss_up - loss_down) / width;
      const double allowed = allowed_error(atol, rtol, q.scale) + (q.field == &Case::gamma ? gamma_shift : 0);
      if (!(std::fabs(q.got - fd) <= allowed))
        return Verdict::fail(
            fmt::format("{}[{}] = {:.9g}, finite differences of the fp64 forward give {:.9g} "
                        "(allowed error {:.3g})",
                        q.name, d, q.got, fd, allowed),
            {{"col", double(d)}, {q.name, q.got}, {"finite_difference", fd}});
    }
  }
  return Verdict::pass();
}

}  // namespace

void register_invariants(FamilyDef<Traits>& f) {
  f.invariant(
      {"matches_reference",
       "y, dx, dgamma, dbeta within k x the naive same-precision two-pass error + a floor of the fp64 "
       "reference",
       with_atol(policy_params("of the dtype times the magnitude each element is built from"))},
      matches_reference);
  f.invariant(
      {"saved_statistics",
       "mean and rstd saved for the backward within k x the naive two-pass error + a floor of the fp64 "
       "reference, row by row",
       policy_params("times sum|x|/D (mean) or rstd (rstd)")},
      saved_statistics);
  f.invariant({"dx_sums_to_zero", "sum over D of dx is 0 in every row (within rounding)",
               ulps_param(64, "rstd * (sum|g| + |mean(g xhat)| * (sum|xhat| + D))")},
              dx_sums_to_zero);
  f.invariant({"dbeta_is_sum_dy",
               "dbeta = sum over rows of dy (within rounding); where the f32 sum is exact in any order, "
               "dbeta is that sum stored to nearest even",
               ulps_param(64, "sum|dy|")},
              dbeta_is_sum_dy);
  f.invariant({"dgamma_is_sum_dy_xhat",
               "dgamma = sum over rows of dy * xhat, with the target's own cached xhat; where the f32 sum is "
               "exact in any order, dgamma is that sum stored to nearest even",
               ulps_param(64, "sum|dy xhat|")},
              dgamma_is_sum_dy_xhat);
  f.invariant({"backward_reads_stored_xhat",
               "f16/bf16: dx is the contract's f32 backward of the xhat cache the target reports (rounded to "
               "the dtype) and its rstd, stored to nearest; not of the f32 xhat from before the store",
               with_atol({}), needs_half_cases},
              backward_reads_stored_xhat)
      .observing("dtypes", {"f16", "bf16"});
  f.invariant({"y_from_unrounded_xhat",
               "f16/bf16: y is the contract's f32 gamma * xhat + beta from the target's own mean and rstd, "
               "stored to nearest once; not computed from the xhat already rounded to the dtype",
               with_atol({}), needs_half_cases},
              y_from_unrounded_xhat)
      .observing("dtypes", {"f16", "bf16"});
  f.invariant(
      {"constant_rows",
       "a constant row (zero variance) gives xhat = 0 and y = beta",
       {field::real("xhat_tol", 0, 0, 1e6, "largest |xhat| allowed on a constant row (0: exactly zero)")},
       [](const Values& d, const Values&) -> std::string {
         if (d.int_range("dim").lo <= 1 || d.real("x.constant_rate") > 0) return "";
         return "constant rows, but domain.x.constant_rate is 0 and domain.dim excludes 1; raise one or drop "
                "the invariant";
       }},
      constant_rows);
  f.invariant({"all_finite", "no NaN or inf in any output where the reference is finite", {}}, all_finite);
  f.invariant({"finite_differences",
               "dx, dgamma, dbeta equal central finite differences of the fp64 reference forward (f64 cases)",
               {field::integer("max_elements", 1024, 1, 1 << 20, "only cases with rows x D up to this"),
                field::real("step", 1e-4, 1e-12, 1, "step for x as a fraction of the row's sqrt(var + eps)"),
                field::rtol(1e-6, "allowed error relative to the gradient's natural magnitude"),
                field::atol(0, "absolute floor", 1e300)},
               [](const Values& d, const Values& p) -> std::string {
                 if (std::string why = needs_choice(d, "dtypes", "f64", "f64 cases"); !why.empty())
                   return why;
                 const int64_t smallest = d.int_range("rows").lo * d.int_range("dim").lo;
                 if (smallest > p.integer("max_elements"))
                   return fmt::format(
                       "cases of at most max_elements = {} elements, but the smallest case of "
                       "the domain has rows x D = {}; raise max_elements or narrow rows or dim",
                       p.integer("max_elements"), smallest);
                 return "";
               }},
              finite_differences)
      .observing("dtypes", {"f64"});
}

}  // namespace kprop::layernorm
