// Ternary: the BitNet b1.58 linear layer (docs/FAMILIES.md, specs/ternary.yaml).
//
// Contract. Input x [M tokens, K], latent weights W [N, K], upstream
// gradient dy [M, N], all finite doubles. With eps = 1e-5 (BitNet's clamp):
//   weight scale   s    = max(Σ|W| / (N·K), eps)               (absmean, one per tensor)
//   weights        wq   = clamp(round(W · (1/s)), -1, 1)        in {-1, 0, +1}; W̃ = s · wq
//   act. scale     a_t  = 127 / max(max_k |x_tk|, eps)         (absmax, one per token)
//   activations    xq   = clamp(round(x_tk · a_t), -128, 127)  int8;          x̃ = xq / a_t
//   integer part   acc  = xq · wqᵀ                               (exact integers)
//   forward        y    = acc · s / a_t                          (= x̃ · W̃ᵀ)
//   backward (STE) dx   = dy · W̃,  dW = dyᵀ · x̃              (the dense gradients at the
//                  quantized point, passed straight through both quantizers)
// round() is round half to even (torch.round, which BitNet's reference code
// uses; std::nearbyint in the default rounding mode). Every quantity up to
// acc is defined in double with exactly these operations in this order, so
// every implementation must reproduce wq, xq and acc bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kprop/mutant.h"

namespace kprop::ternary {

inline constexpr double kEps = 1e-5;
// Inputs beyond this magnitude are outside the contract: the packed kernel
// scales in f32, and s · max|x| must stay far from f32 overflow.
inline constexpr double kMaxMagnitude = 1e12;

struct Case {
  int tokens = 1, in_features = 1, out_features = 1;  // M, K, N
  std::vector<double> x;                              // M x K, row-major
  std::vector<double> w;                              // N x K, row-major
  std::vector<double> dy;                             // M x N, row-major
  bool operator==(const Case&) const = default;
};

// Everything an implementation computes, so each stage can be checked. The
// quantized values are kept as doubles (as in BitNet's fake-quant code) so a
// bad scale shows up as NaN rather than as an undefined integer conversion.
struct Result {
  double w_scale = 0;           // s
  std::vector<double> w_q;      // N x K, in {-1, 0, 1}
  std::vector<double> x_scale;  // per token: a_t
  std::vector<double> x_q;      // M x K, integers in [-128, 127]
  std::vector<double> acc;      // M x N, the integer matmul
  std::vector<double> y;        // M x N
  std::vector<double> dx;       // M x K
  std::vector<double> dw;       // N x K
  // A flaw of the packed weights an external kernel returned that w_q
  // cannot show (a code past K in a row's last byte that is not 00); "" when none.
  std::string packing_problem;
};

// Why the case breaks the contract, or "" if it is valid.
std::string validate(const Case& c);

// Round half to even, written out so it does not depend on the FP
// environment; NaN stays NaN.
double round_half_even(double v);

// The reference pipeline, one switch per stage that a known bug changes.
struct Pipeline {
  bool absmean = true;  // weight scale mean|W| (false: max|W|)
  double (*round)(double) = round_half_even;
  bool eps_guard = true;         // clamp both scales' denominators at eps
  bool straight_through = true;  // false: dW = 0 (the gradient of round())
  bool float_sum = false;        // the absmean's sum of |W| accumulated in float, not double
  bool float_product = false;    // x_tk · a_t formed in float before the rounding, not double
  bool w_divide = false;         // wq = round(W / s), not round(W · (1/s))
  bool act_mul_then_div = false; // xq = round(x · 127 / max|x|), not round(x · (127 / max|x|))
};
Result run_pipeline(const Case& c, const Pipeline& p);

// Implementations.
Result reference(const Case& c);     // run_pipeline with the correct stages, in double
Result packed(const Case& c);        // 2 bits per weight, 4 per byte
Result packed_base3(const Case& c);  // 5 weights per byte (3^5 = 243)
// Mutants: `packed` with every row's bytes read `bytes` late (PackedWeights::read_offset).
Result packed_reading_late(const Case& c, int bytes);

using Mutant = kprop::Mutant<Case, Result>;
const std::vector<Mutant>& mutants();

}  // namespace kprop::ternary
