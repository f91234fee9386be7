// The fp64 reference: two passes per row, written for clarity.
#include <fmt/format.h>

#include <cmath>

#include "kernels/layernorm/layernorm.h"
#include "kprop/half.h"

namespace kprop::layernorm {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
  }
  return "f64";
}
bool parse_dtype(const std::string& name, DType& out) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16})
    if (name == dtype_name(t)) {
      out = t;
      return true;
    }
  return false;
}
bool is_half(DType t) {
  return t == DType::f16 || t == DType::bf16;
}
double unit_roundoff(DType t) {
  switch (t) {
    case DType::f32:
      return 0x1.0p-24;
    case DType::f64:
      return 0x1.0p-53;
    case DType::f16:
      return 0x1.0p-11;
    case DType::bf16:
      return 0x1.0p-8;
  }
  return 0x1.0p-53;
}
double accumulation_roundoff(DType t) {
  return t == DType::f64 ? 0x1.0p-53 : 0x1.0p-24;
}
double subnormal_half_step(DType t) {
  if (t == DType::f16) return half::f16_min_subnormal / 2;
  if (t == DType::bf16) return half::bf16_min_subnormal / 2;
  return 0;
}
double max_finite(DType t) {
  switch (t) {
    case DType::f32:
      return 3.4028234663852886e38;
    case DType::f64:
      return 1.7976931348623157e308;
    case DType::f16:
      return half::f16_max;
    case DType::bf16:
      return half::bf16_max;
  }
  return 1.7976931348623157e308;
}
double round_value(double v, DType t) {
  switch (t) {
    case DType::f32:
      return static_cast<double>(static_cast<float>(v));
    case DType::f64:
      return v;
    case DType::f16:
      return half::round_to_f16(v);
    case DType::bf16:
      return half::round_to_bf16(v);
  }
  return v;
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
    for (double& e : *v) e = round_value(e, c.dtype);
  c.eps = round_eps(c.eps, c.dtype);
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
    const double* x = &c.x[i * D];
    // Pass 1: the mean. The row is first shifted by its first element; the
    // shift changes nothing mathematically, and x - x[0] is exact for f32
    // inputs (and for any row at a large offset), so a 1e4 offset does not
    // cost the reference u·|μ|/σ of accuracy, which at σ = 1e-4 would be
    // larger than the error of the fp64 implementations it judges.
    const double shift = x[0];
    double sum = 0;
    for (size_t d = 0; d < D; ++d) sum += x[d] - shift;
    const double centre = sum / static_cast<double>(D);
    // Pass 2: the biased variance.
    double ss = 0;
    for (size_t d = 0; d < D; ++d) {
      const double dev = (x[d] - shift) - centre;
      ss += dev * dev;
    }
    const double var = ss / static_cast<double>(D);
    const double rstd = 1.0 / std::sqrt(var + c.eps);
    r.mean[i] = shift + centre;
    r.rstd[i] = rstd;
    for (size_t d = 0; d < D; ++d) {
      const double xhat = ((x[d] - shift) - centre) * rstd;
      r.xhat[i * D + d] = xhat;
      r.y[i * D + d] = c.gamma[d] * xhat + c.beta[d];
    }
    // Backward: g = γ ⊙ dy, dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂)).
    double sum_g = 0, sum_gx = 0;
    for (size_t d = 0; d < D; ++d) {
      const double g = c.gamma[d] * c.dy[i * D + d];
      sum_g += g;
      sum_gx += g * r.xhat[i * D + d];
    }
    const double mean_g = sum_g / static_cast<double>(D), mean_gx = sum_gx / static_cast<double>(D);
    for (size_t d = 0; d < D; ++d) {
      const double g = c.gamma[d] * c.dy[i * D + d];
      r.dx[i * D + d] = rstd * (g - mean_g - r.xhat[i * D + d] * mean_gx);
      r.dgamma[d] += c.dy[i * D + d] * r.xhat[i * D + d];
      r.dbeta[d] += c.dy[i * D + d];
    }
  }
  return r;
}

}  // namespace kprop::layernorm
