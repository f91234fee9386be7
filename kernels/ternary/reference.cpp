// The reference: BitNet b1.58's fake-quant linear layer in double, one
// stage per line of the contract (ternary.h), plus the case validator.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kernels/ternary/ternary.h"

namespace kprop::ternary {

double round_half_even(double v) {
  const double f = std::floor(v), d = v - f;  // exact for |v| < 2^52
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;  // a tie (or NaN, which stays NaN)
}

Result run_pipeline(const Case& c, const Pipeline& p) {
  const int M = c.tokens, K = c.in_features, N = c.out_features;
  Result r;

  // Weights: one scale for the tensor, ternary values.
  double s = 0;
  for (double v : c.w) s = p.absmean ? s + std::fabs(v) : std::max(s, std::fabs(v));
  if (p.float_sum && p.absmean) {  // the mutant: rounded to float after every addition
    float f = 0;
    for (double v : c.w) f += static_cast<float>(std::fabs(v));
    s = f;
  }
  if (p.absmean) s /= static_cast<double>(c.w.size());
  if (p.eps_guard) s = std::max(s, kEps);
  r.w_scale = s;
  const double inv = 1.0 / s;
  for (double v : c.w) r.w_q.push_back(std::clamp(p.round(p.w_divide ? v / s : v * inv), -1.0, 1.0));

  // Activations: one absmax scale per token, int8 values.
  for (int t = 0; t < M; ++t) {
    double amax = 0;
    for (int k = 0; k < K; ++k) amax = std::max(amax, std::fabs(c.x[static_cast<size_t>(t) * K + k]));
    const double denom = p.eps_guard ? std::max(amax, kEps) : amax;
    const double a = 127.0 / denom;
    r.x_scale.push_back(a);
    for (int k = 0; k < K; ++k) {
      const double x = c.x[static_cast<size_t>(t) * K + k];
      const double xa = p.float_product      ? static_cast<double>(static_cast<float>(x) * static_cast<float>(a))
                        : p.act_mul_then_div ? x * 127.0 / denom
                                             : x * a;
      r.x_q.push_back(std::clamp(p.round(xa), -128.0, 127.0));
    }
  }

  // Integer matmul (exact in double: |acc| <= 128 K), then dequantize.
  for (int t = 0; t < M; ++t)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k)
        acc += r.x_q[static_cast<size_t>(t) * K + k] * r.w_q[static_cast<size_t>(n) * K + k];
      r.acc.push_back(acc);
      r.y.push_back(acc * s / r.x_scale[static_cast<size_t>(t)]);
    }

  // Straight-through backward: the dense gradients at the quantized point.
  r.dx.assign(static_cast<size_t>(M) * K, 0.0);
  r.dw.assign(static_cast<size_t>(N) * K, 0.0);
  for (int t = 0; t < M; ++t)
    for (int n = 0; n < N; ++n) {
      const double g = c.dy[static_cast<size_t>(t) * N + n];
      for (int k = 0; k < K; ++k) {
        r.dx[static_cast<size_t>(t) * K + k] += g * (s * r.w_q[static_cast<size_t>(n) * K + k]);
        if (p.straight_through)
          r.dw[static_cast<size_t>(n) * K + k] +=
              g * (r.x_q[static_cast<size_t>(t) * K + k] / r.x_scale[static_cast<size_t>(t)]);
      }
    }
  return r;
}

Result reference(const Case& c) {
  return run_pipeline(c, Pipeline{});
}

std::string validate(const Case& c) {
  if (c.tokens < 1 || c.in_features < 1 || c.out_features < 1)
    return fmt::format("shape {}x{}x{}: every dimension must be at least 1", c.tokens, c.in_features,
                       c.out_features);
  // No cap below real models (K = 16384 and more): what bounds a case is the
  // spec's memory budget (run.max_case_mb); this only keeps M·K, N·K and
  // M·N inside size_t arithmetic.
  if (c.tokens > (1 << 24) || c.in_features > (1 << 24) || c.out_features > (1 << 24))
    return "a dimension exceeds 2^24";
  const auto M = static_cast<size_t>(c.tokens), K = static_cast<size_t>(c.in_features),
             N = static_cast<size_t>(c.out_features);
  if (c.x.size() != M * K)
    return fmt::format("x has {} values, expected tokens x in_features = {}", c.x.size(), M * K);
  if (c.w.size() != N * K)
    return fmt::format("w has {} values, expected out_features x in_features = {}", c.w.size(), N * K);
  if (c.dy.size() != M * N)
    return fmt::format("dy has {} values, expected tokens x out_features = {}", c.dy.size(), M * N);
  for (const auto* v : {&c.x, &c.w, &c.dy})
    for (double e : *v)
      if (!(std::fabs(e) <= kMaxMagnitude))
        return fmt::format("value {} is not finite or exceeds {:g} in magnitude", e, kMaxMagnitude);
  return "";
}

}  // namespace kprop::ternary
