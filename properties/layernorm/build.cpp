// The layernorm family's one case builder.
#include <algorithm>
#include <cmath>

#include "kprop/rng.h"
#include "properties/layernorm/family.h"

namespace kprop::layernorm {

namespace {

// Streams of kprop::rng for the case's values (one seed per case).
enum Stream : uint64_t { kRowMean = 1, kGamma = 2, kBeta = 3, kDy = 4, kX = 1000 };

// f16 rows: a standard deviation in [1e-4, 2e4] (10^u clamped): below, the
// row is made of a few subnormals; above, every value clamps at 65504. Rows
// at the top of the range hold values of a few 1e4, whose squares (and the
// sum of squared deviations) overflow if accumulated in f16.
constexpr double kF16SpreadLo = 1e-4, kF16SpreadHi = 2e4;

// Fits a half case's drawn values into its dtype: x clamped to the finite
// range, then γ, β and dy scaled down (only where needed) so that no output
// can overflow the storage type: |y| <= max|γ| sqrt(D) + max|β| (|x̂| <=
// sqrt(D - 1)); |dx| <= rstd max|γ| max|dy| (2 + sqrt(D)); |dγ| <= rows
// max|dy| sqrt(D); |dβ| <= rows max|dy|. Each bound is kept under a quarter
// of the largest finite value. Values are rounded to the dtype afterwards.
void fit_half(Case& c) {
  const double top = max_finite(c.dtype), D = c.dim;
  for (double& v : c.x) v = round_to(c.dtype, std::clamp(v, -top, top));
  c.eps = round_eps(c.eps, c.dtype);
  auto max_abs = [](const std::vector<double>& v) {
    double m = 0;
    for (double e : v) m = std::max(m, std::fabs(e));
    return m;
  };
  auto scale = [](std::vector<double>& v, double f) {
    for (double& e : v) e *= f;
  };
  const double y_bound = max_abs(c.gamma) * std::sqrt(D) + max_abs(c.beta);
  if (y_bound > top / 4) scale(c.gamma, top / 4 / y_bound), scale(c.beta, top / 4 / y_bound);
  double rstd = 0;
  const Result ref_stats = reference(Case{c.dtype, c.rows, c.dim, c.eps, c.x, c.gamma, c.beta, c.x});
  for (double r : ref_stats.rstd) rstd = std::max(rstd, r);
  const double per_dy = std::max(rstd * max_abs(c.gamma) * (2 + std::sqrt(D)), c.rows * std::sqrt(D));
  const double dx_bound = per_dy * max_abs(c.dy);
  if (dx_bound > top / 4) scale(c.dy, top / 4 / dx_bound);
}

}  // namespace

// One case builder for RapidCheck draws, fuzz bytes and seed corpora: the
// draws pick the shape, the scales and a seed; the values come from kprop::rng.
Case Traits::build(Draw& draw, const Values& domain) {
  Case c;
  parse_dtype(draw.pick(domain.choices("dtypes")), c.dtype);  // the schema allows only valid names
  c.rows = static_cast<int>(draw.sized(domain.int_range("rows")));
  // D = 1 only where the dim range allows it (dim: [3, 4] means D in [3, 4]).
  const bool dim_one = draw.chance(domain.real("dim_one_rate")) && domain.int_range("dim").allows(1);
  c.dim = dim_one ? 1 : static_cast<int>(draw.sized(domain.int_range("dim")));
  c.eps = std::pow(10.0, draw.any(domain.real_range("eps_exp")));
  const uint64_t seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
  const double gamma_scale = std::pow(10.0, draw.any(domain.real_range("gamma_exp")));
  const double beta_scale = std::pow(10.0, draw.any(domain.real_range("beta_exp")));
  const double dy_scale = std::pow(10.0, draw.any(domain.real_range("dy_exp")));
  const size_t D = static_cast<size_t>(c.dim);
  for (int r = 0; r < c.rows; ++r) {
    double spread = std::pow(10.0, draw.any(domain.real_range("x.spread_exp")));
    if (c.dtype == DType::f16) spread = std::clamp(spread, kF16SpreadLo, kF16SpreadHi);
    double mean = spread * rng::normal(seed, kRowMean, static_cast<uint64_t>(r));
    if (draw.chance(domain.real("x.offset_rate"))) {
      const double sign = draw.chance(0.5) ? -1.0 : 1.0;
      mean = sign * spread * std::pow(10.0, draw.any(domain.real_range("x.cond_exp")));
    }
    if (is_half(c.dtype)) mean = std::clamp(mean, -max_finite(c.dtype) / 2, max_finite(c.dtype) / 2);
    const bool constant = draw.chance(domain.real("x.constant_rate"));
    for (size_t d = 0; d < D; ++d)
      c.x.push_back(constant ? mean : mean + spread * rng::normal(seed, kX + static_cast<uint64_t>(r), d));
  }
  for (size_t d = 0; d < D; ++d) {
    c.gamma.push_back(gamma_scale * rng::normal(seed, kGamma, d));
    c.beta.push_back(beta_scale * rng::normal(seed, kBeta, d));
  }
  for (size_t i = 0; i < c.x.size(); ++i) c.dy.push_back(dy_scale * rng::normal(seed, kDy, i));
  if (is_half(c.dtype)) fit_half(c);
  // Saturated to the dtype's range, as a cast with saturation does (half
  // cases are fitted inside it above): the schema's extremes (spread 1e30
  // times cond 1e16) pass f32's range, which rounded to inf, a case outside
  // the contract (validate: inputs must be finite).
  const double top = max_finite(c.dtype);
  for (auto* v : {&c.x, &c.gamma, &c.beta, &c.dy})
    for (double& e : *v) e = std::clamp(e, -top, top);
  round_to_dtype(c);
  return c;
}

}  // namespace kprop::layernorm
