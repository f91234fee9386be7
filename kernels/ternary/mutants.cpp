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
  };
  return table;
}

}  // namespace kprop::ternary
