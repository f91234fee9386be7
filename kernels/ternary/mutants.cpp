// Mutants: each reproduces one real quantization-aware-training bug by
// changing exactly one stage of the reference pipeline.
#include <cmath>

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
    for (int n = 0; n < N; ++n) {
      const size_t at = static_cast<size_t>(t) * N + n;
      for (int k = kept; k < K; ++k)
        r.acc[at] -= r.x_q[static_cast<size_t>(t) * K + k] * r.w_q[static_cast<size_t>(n) * K + k];
      r.y[at] =
          static_cast<float>(r.acc[at]) * static_cast<float>(r.w_scale / r.x_scale[static_cast<size_t>(t)]);
    }
  return r;
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
      {"k_tail_dropped_past_4096",
       "packed kernel written for K <= 4096: past it, the last K mod 4096 columns never reach acc "
       "(specs/ternary.yaml profile large)",
       k_tail_dropped},
      {"packed_row_read_late",
       "unpack reads each packed row one byte late: shifted weights, and one byte past the buffer on the "
       "last "
       "row (an out-of-bounds read AddressSanitizer reports: scripts/dev.sh san-run)",
       [](const Case& c) { return packed_reading_late(c, 1); }, /*out_of_bounds=*/true},
  };
  return table;
}

}  // namespace kprop::ternary
