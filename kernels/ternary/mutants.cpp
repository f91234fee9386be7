// Mutants: each reproduces one real quantization-aware-training bug by
// changing exactly one stage of the reference pipeline.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/ternary/ternary.h"

namespace kprop::ternary {
namespace {

Result with(const Case& c, void (*change)(Pipeline&)) {
  Pipeline p;
  change(p);
  return run_pipeline(c, p);
}

double trunc_round(double v) {
  return std::trunc(v);
}
double away_round(double v) {
  return std::round(v);
}

// y = acc s / a_t again, as the packed kernel dequantizes (f32), after a
// mutant changed acc.
Result dequantized_again(const Case& c, Result r) {
  for (int t = 0; t < c.tokens; ++t)
    for (int n = 0; n < c.out_features; ++n) {
      const size_t at = static_cast<size_t>(t) * c.out_features + n;
      r.y[at] =
          static_cast<float>(r.acc[at]) * static_cast<float>(r.w_scale / r.x_scale[static_cast<size_t>(t)]);
    }
  return r;
}

// A packed kernel written for K <= 4096 (the old cap of the spec): the dot
// product walks K in chunks of 4096 and handles a tail only when K < 4096,
// so past the cap the last K mod 4096 columns never reach acc (and y). As
// the packed kernel's output with those products taken out again.
Result k_tail_dropped(const Case& c) {
  Result r = packed(c);
  const int K = c.in_features, N = c.out_features, chunk = 4096;
  if (K <= chunk || K % chunk == 0) return r;
  const int kept = K / chunk * chunk;
  for (int t = 0; t < c.tokens; ++t)
    for (int n = 0; n < N; ++n)
      for (int k = kept; k < K; ++k)
        r.acc[static_cast<size_t>(t) * N + n] -=
            r.x_q[static_cast<size_t>(t) * K + k] * r.w_q[static_cast<size_t>(n) * K + k];
  return dequantized_again(c, r);
}

// An int8 x ternary kernel that accumulates in 16-bit lanes (as a SIMD
// kernel built on 16-bit multiply-adds does): the sum wraps modulo 2^16 once
// |acc| passes 32767, which needs K >= 259 with products of one sign. Two's
// complement addition is modular, so wrapping the packed kernel's exact sum
// once equals wrapping at every step.
Result int16_accumulator(const Case& c) {
  Result r = packed(c);
  for (double& a : r.acc) {
    const auto wide = static_cast<int64_t>(a);
    a = static_cast<double>(((wide + 32768) % 65536 + 65536) % 65536 - 32768);
  }
  return dequantized_again(c, r);
}

// The packed kernel's 16 int16 lanes (2 products of each 32-wide block per
// lane) flushed to int32 every 8192 elements, not every 2048: a bound worked
// out for one product per block (32767 / 128 = 255 blocks, rounded up to
// 8192 elements). A lane then holds up to 512 products and wraps once they
// average 64; the chunk of 2048 holds 128 x 127 = 16256.
Result int16_chunk_8192(const Case& c) {
  Result r = packed(c);
  const int K = c.in_features, N = c.out_features, chunk = 8192, padded = (K + 31) / 32 * 32;
  for (int t = 0; t < c.tokens; ++t)
    for (int n = 0; n < N; ++n) {
      auto product = [&](int k) {
        return k < K ? int(r.x_q[static_cast<size_t>(t) * K + k]) * int(r.w_q[static_cast<size_t>(n) * K + k])
                     : 0;
      };
      int64_t total = 0;
      for (int i0 = 0; i0 < padded; i0 += chunk) {
        int16_t lane[16] = {};
        for (int i = i0; i < std::min(padded, i0 + chunk); i += 32)
          for (int j = 0; j < 16; ++j)
            lane[j] = static_cast<int16_t>(lane[j] + product(i + j) + product(i + 16 + j));
        for (const int16_t v : lane) total += v;
      }
      r.acc[static_cast<size_t>(t) * N + n] = static_cast<double>(total);
    }
  return dequantized_again(c, r);
}

}  // namespace

const std::vector<Mutant>& mutants() {
  static const std::vector<Mutant> table = {
      {"scale_absmax", "weight scale max|W| instead of the absmean mean|W|",
       [](const Case& c) { return with(c, [](Pipeline& p) { p.absmean = false; }); }},
      {"round_toward_zero", "quantizers truncate toward zero instead of rounding to nearest",
       [](const Case& c) { return with(c, [](Pipeline& p) { p.round = trunc_round; }); }},
      {"ste_zero_grad", "no straight-through estimator: dW is the zero gradient of round()",
       [](const Case& c) { return with(c, [](Pipeline& p) { p.straight_through = false; }); }},
      {"no_eps", "scales divide by mean|W| and max|x| without the eps clamp (0/0 on zero inputs)",
       [](const Case& c) { return with(c, [](Pipeline& p) { p.eps_guard = false; }); }},
      {"round_half_away", "ties rounded half away from zero (std::round) instead of half to even",
       [](const Case& c) { return with(c, [](Pipeline& p) { p.round = away_round; }); }},
      // Small effect: the scale is off by about sqrt(count) float roundings
      // (1e-6 relative at 10^4 weights), which moves a ternary value only
      // when |w| / scale lies that close to a rounding boundary (0.5).
      {"absmean_float_sum", "weight scale mean|W| summed in float instead of double",
       [](const Case& c) { return with(c, [](Pipeline& p) { p.float_sum = true; }); }},
      {"activation_product_f32",
       "activations quantized as round(f32(x) * f32(a_t)), the usual GPU path, instead of the contract's "
       "double product: x a_t a hair off a tie rounds onto it",
       [](const Case& c) { return with(c, [](Pipeline& p) { p.float_product = true; }); }},
      // Reassociations of the two scalings, each an ulp away from the
      // contract: they differ only when W (1/s) or x a_t lies within an ulp
      // of a rounding boundary and the scale is no power of two (the
      // `threshold` weights and `ties` activations with a general scale).
      {"w_divided_by_scale",
       "weights quantized as round(W / s) instead of the contract's round(W * (1/s)): BitNet's weight_quant "
       "multiplies by the reciprocal scale 1/mean|W|, a port or fused kernel that divides by the stored s "
       "rounds a weight within an ulp of s/2 the other way",
       [](const Case& c) { return with(c, [](Pipeline& p) { p.w_divide = true; }); }},
      {"act_scale_mul_then_div",
       "activations quantized as round(x * 127 / max|x|) (multiply, then divide: the absmax formula written "
       "inline, as many int8 quantizers do) instead of round(x * (127 / max|x|)) with the token's scale a_t: "
       "x a_t within an ulp of a .5 tie rounds the other way",
       [](const Case& c) { return with(c, [](Pipeline& p) { p.act_mul_then_div = true; }); }},
      {"k_tail_dropped_past_4096",
       "packed kernel written for K <= 4096: past it, the last K mod 4096 columns never reach acc "
       "(specs/ternary.yaml profile large)",
       k_tail_dropped},
      {"int16_accumulator",
       "packed kernel accumulating x_q . w_q in 16 bits: wraps past 32767, from K = 259 when the products "
       "share a sign (specs/ternary.yaml profile large)",
       int16_accumulator},
      {"int16_chunk_8192",
       "packed kernel flushing its 16-bit lanes every 8192 elements instead of 2048: a lane of 512 products "
       "wraps once they average 64 (saturated activations against weights of one sign and magnitude; "
       "specs/ternary.yaml profile large)",
       int16_chunk_8192},
      {"packed_row_read_late",
       "unpack reads each packed row one byte late: shifted weights, and one byte past the buffer on the "
       "last "
       "row (an out-of-bounds read AddressSanitizer reports: scripts/dev.sh san-run)",
       [](const Case& c) { return packed_reading_late(c, 1); }, /*out_of_bounds=*/true},
  };
  return table;
}

}  // namespace kprop::ternary
