// The fp64 reference: two passes per row, written for clarity.
#include <fmt/format.h>

#include <cmath>

#include "kernels/layernorm/layernorm.h"

namespace kprop::layernorm {

double accumulation_roundoff(DType t) {
  return unit_roundoff(arithmetic_type(t));
}
double subnormal_half_step(DType t) {
  return is_half(t) ? denorm_min(t) / 2 : 0;
}
double round_eps(double eps, DType t) {
  return t == DType::f64 ? eps : static_cast<double>(static_cast<float>(eps));
}

std::string validate(const Case& c) {
  if (c.rows < 1 || c.dim < 1)
    return fmt::format("shape {}x{}: rows and dim must be at least 1", c.rows, c.dim);
  const size_t n = static_cast<size_t>(c.rows) * static_cast<size_t>(c.dim);
  if (c.x.size() != n || c.dy.size() != n) return "x and dy must hold rows x dim values";
  if (c.gamma.size() != static_cast<size_t>(c.dim) || c.beta.size() != static_cast<size_t>(c.dim))
    return "gamma and beta must hold dim values";
  if (!(c.eps > 0) || !std::isfinite(c.eps)) return fmt::format("eps = {} must be finite and > 0", c.eps);
  for (const auto* v : {&c.x, &c.gamma, &c.beta, &c.dy})
    for (double e : *v)
      if (!std::isfinite(e)) return "every value must be finite";
  return "";
}

void round_to_dtype(Case& c) {
  if (c.dtype == DType::f64) return;
  for (auto* v : {&c.x, &c.gamma, &c.beta, &c.dy})
    for (double& e : *v) e = round_to(c.dtype, e);
  c.eps = round_eps(c.eps, c.dtype);
}

RowStats reference_forward_row(const double* x, const double* gamma, const double* beta, size_t D, double eps,
                               double* xhat, double* y) {
  // Pass 1: the mean. The row is first shifted by its first element; the
  // shift changes nothing mathematically, and x - x[0] is exact for f32
  // inputs (and for any row at a large offset), so a 1e4 offset does not
  // cost the reference u·|μ|/σ of accuracy, which at σ = 1e-4 would be
  // larger than the error of the fp64 implementations it judges.
  // The sums are long double (x87: 64-bit significand, 11 bits past f64):
  // a sequential f64 sum of D terms errs by up to (D − 1)·2^-53 of its
  // magnitude, which at D = 98304 exceeded the error of a correct f64
  // kernel with 16 Welford lanes (its rstd 68 ulps off an f64 reference
  // that itself summed in f64, against a 64-ulp floor), and the naive f64
  // baseline, the same algorithm in f64, agreed with it to the bit.
  const long double shift = x[0];
  long double sum = 0;
  for (size_t d = 0; d < D; ++d) sum += x[d] - shift;
  const long double centre = sum / static_cast<long double>(D);
  // Pass 2: the biased variance.
  long double ss = 0;
  for (size_t d = 0; d < D; ++d) {
    const long double dev = (x[d] - shift) - centre;
    ss += dev * dev;
  }
  const long double var = ss / static_cast<long double>(D);
  const long double rstd = 1.0L / std::sqrt(var + static_cast<long double>(eps));
  for (size_t d = 0; d < D; ++d) {
    const long double xh = ((x[d] - shift) - centre) * rstd;
    xhat[d] = static_cast<double>(xh);
    y[d] = static_cast<double>(gamma[d] * xh + beta[d]);
  }
  return {static_cast<double>(shift + centre), static_cast<double>(rstd)};
}

Result reference(const Case& c) {
  const size_t rows = static_cast<size_t>(c.rows), D = static_cast<size_t>(c.dim);
  Result r;
  r.y.resize(rows * D);
  r.xhat.resize(rows * D);
  r.dx.resize(rows * D);
  r.mean.resize(rows);
  r.rstd.resize(rows);
  r.dgamma.assign(D, 0.0);
  r.dbeta.assign(D, 0.0);
  for (size_t i = 0; i < rows; ++i) {
    const RowStats stats = reference_forward_row(&c.x[i * D], c.gamma.data(), c.beta.data(), D, c.eps,
                                                 &r.xhat[i * D], &r.y[i * D]);
    r.mean[i] = stats.mean;
    r.rstd[i] = stats.rstd;
    const double rstd = stats.rstd;
    // Backward: g = γ ⊙ dy, dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂)).
    // Long double sums, as in the forward (the same D-term accumulation).
    long double sum_g = 0, sum_gx = 0;
    for (size_t d = 0; d < D; ++d) {
      const long double g = static_cast<long double>(c.gamma[d]) * c.dy[i * D + d];
      sum_g += g;
      sum_gx += g * r.xhat[i * D + d];
    }
    const long double mean_g = sum_g / static_cast<long double>(D),
                      mean_gx = sum_gx / static_cast<long double>(D);
    for (size_t d = 0; d < D; ++d) {
      const long double g = static_cast<long double>(c.gamma[d]) * c.dy[i * D + d];
      r.dx[i * D + d] = static_cast<double>(rstd * (g - mean_g - r.xhat[i * D + d] * mean_gx));
      r.dgamma[d] += c.dy[i * D + d] * r.xhat[i * D + d];
      r.dbeta[d] += c.dy[i * D + d];
    }
  }
  return r;
}

}  // namespace kprop::layernorm
