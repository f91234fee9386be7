// The ternary family's domain: its schema, in_domain and the size of a case.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "properties/ternary/family.h"

namespace kprop::ternary {

namespace {
// Functions, not globals: the families register (and read their schema)
// during static initialization, before a later file's globals exist (in a
// unity batch, register.cpp comes before this file).
const std::vector<std::string>& weight_kinds() {
  static const std::vector<std::string> kinds = {"normal",    "uniform", "zero",  "outlier",
                                                 "threshold", "tiny",    "sparse"};
  return kinds;
}
const std::vector<std::string>& activation_kinds() {
  static const std::vector<std::string> kinds = {"normal", "outlier", "zero_rows", "ties"};
  return kinds;
}
}  // namespace

Schema Traits::domain_schema() {
  return {
      field::int_range("tokens", {1, 6}, 1, 1 << 24,
                       "M: tokens (rows of x), each with its own activation scale"),
      field::int_range("in_features", {1, 70}, 1, 1 << 24,
                       "K: input features (not a multiple of 4 or 5 most of the time)"),
      field::int_range("out_features", {1, 12}, 1, 1 << 24, "N: output features (rows of W)"),
      field::map(
          "weights",
          {
              field::choices(
                  "kinds", weight_kinds(), weight_kinds(),
                  "latent weight distributions: normal, uniform, zero (all zero), outlier (one huge entry), "
                  "threshold (W (1/s) on the 1/2 rounding threshold, exact ties or 2^-40 off them with s a power "
                  "of two; on the contract's rounding boundary, a tie or one ulp off it, with s no power of two), "
                  "tiny (mean|W| around eps), sparse (most entries exactly zero)"),
              field::real_range("log10_scale", {-3, 3}, -9, 9, "log10 of the weights' magnitude"),
              field::real_range("log10_outlier", {3, 8}, 0, 11,
                                "log10 of the outlier's factor over the rest"),
          },
          "latent weights W"),
      field::map(
          "activations",
          {
              field::choices(
                  "kinds", activation_kinds(), activation_kinds(),
                  "activation distributions: normal (per-token magnitudes spread over two decades), "
                  "outlier (one huge channel, as in LLM activations), zero_rows (all-zero tokens), "
                  "ties (x a_t exactly halfway between integers, or 2^-40 off it, with a_t a power of two; "
                  "on the contract's rounding boundary, a tie or one ulp off it, with a_t no power of two)"),
              field::real_range("log10_scale", {-3, 3}, -9, 9, "log10 of the activations' magnitude"),
              field::real_range("log10_outlier", {2, 6}, 0, 11, "log10 of the outlier channel's factor"),
          },
          "activations x"),
      field::real(
          "same_sign_rate", 0, 0, 1,
          "probability a case's activations are all >= 0 (post-ReLU) and its weights all of one sign: "
          "then the integer product grows with K (up to 127 K: past an int16 accumulator from K = 259; "
          "profile large); 0 draws nothing for it, so the default cases stay what they were"),
      field::real(
          "saturated_rate", 0, 0, 1,
          "probability a same-sign case is an int16 accumulator's worst case: every |x| within [1/2, 1] "
          "of its token's largest (x_q >= 64) and the weights of one magnitude (w_q = ±1), so a "
          "16-bit lane of 2 products per 32-wide block wraps within 8192 elements; 0 draws nothing"),
  };
}

std::string Traits::in_domain(const Case& c, const Values& d) {
  return first_problem({outside_int_range(d, "tokens", c.tokens),
                        outside_int_range(d, "in_features", c.in_features),
                        outside_int_range(d, "out_features", c.out_features)});
}

namespace {
// Doubles of one trial: x, W, dy; three results (target, reference, the
// dense gradients: w_q, dW of N×K, x_q, dx of M×K, acc, y of M×N) and the
// dequantized x~, W~ of the STE check.
double ternary_bytes(double m, double k, double n) {
  return 8 * ((m * k + n * k + m * n) + 3 * (2 * n * k + 2 * m * k + 2 * m * n + m) + m * k + n * k);
}
}  // namespace

double Traits::case_bytes(const Case& c) {
  return ternary_bytes(c.tokens, c.in_features, c.out_features);
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const int64_t m = d.int_range("tokens").hi, k = d.int_range("in_features").hi,
                n = d.int_range("out_features").hi;
  CaseSize size{ternary_bytes(double(m), double(k), double(n)),
                fmt::format("tokens {} x in {} x out {}", m, k, n), "tokens, in_features or out_features"};
  size.extents = {
      {"M", double(m)}, {"K", double(k)}, {"N", double(n)}};  // the named tensors' dims (tensors.cpp)
  return size;
}

// The largest |value| a case of `d` can hold, against the contract's
// kMaxMagnitude (a larger one is outside it: validate() refuses it, and a
// target given it is judged on an input no kernel is promised to take).
// From build.cpp: |normal| < 8.66 (Box-Muller with u1 >= 2^-54:
// sqrt(108 ln 2)); weights of every kind are at most 8.66 x 10^log10_scale
// (uniform 1x, threshold m s / 4 with m <= 12 and s < 1.42 x the scale, or
// s the scale itself with the last entry a few ulps off m s / 4, tiny
// < 1e-4, saturated their mean |W|), the outlier kind one entry times the
// outlier factor; a token's scale is at most 10 x 10^log10_scale, its values
// at most 8.66 x that (times the outlier factor, outlier kind) or, ties
// kind, 127 u with u < 1.42 x that or u that itself (< 180 x).
std::string Traits::check_domain(const Values& d) {
  auto has = [&](const std::string& key, const std::string& kind) {
    const Choices& kinds = d.choices(key);
    return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
  };
  auto factor = [&](const std::string& map) {
    return has(map + ".kinds", "outlier") ? std::pow(10.0, d.real_range(map + ".log10_outlier").hi) : 1.0;
  };
  const double w = 8.66 * std::pow(10.0, d.real_range("weights.log10_scale").hi) * factor("weights");
  const double x = 10 * std::pow(10.0, d.real_range("activations.log10_scale").hi) *
                   std::max(8.66 * factor("activations"), has("activations.kinds", "ties") ? 180.0 : 0.0);
  for (const auto& [name, most] : {std::pair{"weights", w}, std::pair{"activations", x}})
    if (most > kMaxMagnitude)
      return fmt::format(
          "this domain's {} reach about {:.2g} in magnitude, past the {:g} the contract allows "
          "(kernels/ternary/ternary.h); lower {}.log10_scale or {}.log10_outlier",
          name, most, kMaxMagnitude, name, name);
  return "";
}

}  // namespace kprop::ternary
