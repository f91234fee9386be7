// Fused softmax + top-k (docs/FAMILIES.md, specs/softmax_topk.yaml).
//
// Contract. Logits [rows, V] in the case's dtype (f32 or f64), each finite or
// -inf (+inf and NaN are not valid logits); 1 <= K <= V. For every row the
// output is the K largest softmax probabilities and their indices, sorted by
// probability, ties to the lower index. Softmax is strictly increasing in the
// logit, so "sorted by probability" means sorted by the exact probability:
// the order is by logit (descending), equal logits by index (ascending);
// -0.0 and +0.0 are equal logits (not ordered by their sign bits). Two
// probabilities that both round to 0 are not a tie unless their logits are
// equal. A -inf logit has probability 0 and ranks after every finite logit; a
// row of all -inf gives probabilities 0 and indices 0..K-1 (lower index first,
// as for any tie).
//
// Precision contract of the half-precision dtypes (f16, bf16), as GPU kernels
// do it: logits are stored in f16/bf16; the kernel computes in f32 (float):
// the running max and the normaliser are f32 statistics, exp(x - m) and the
// division are f32; the probabilities are rounded to the storage dtype with
// round-to-nearest-even when stored. The ranking is by logit (the contract
// above), so indices do not depend on any rounding; subnormal logits (f16:
// |x| < 2^-14) are read as the values they are, never flushed to zero, and
// rank by them. f32 and f64 cases compute in their own dtype throughout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kprop/float_type.h"
#include "kprop/mutant.h"

namespace kprop::softmax_topk {

// The case's dtype: f32, f64, f16, bf16 (kprop/float_type.h: names, rounding,
// unit_roundoff, ...).
using DType = FloatType;
// Half the storage dtype's smallest subnormal (0 for f32, f64), the absolute
// error of a rounding that lands among the subnormals.
double subnormal_half_step(DType d);
// Machine epsilon of the arithmetic: 2^-52 for f64, 2^-23 otherwise (f16 and
// bf16 compute in f32).
double arithmetic_epsilon(DType d);

struct Case {
  DType dtype = DType::f64;
  int vocab = 1;               // V
  int k = 1;                   // K in [1, V]
  int block = 16;              // elements per step of the fused single pass (tile width)
  std::vector<double> logits;  // rows x V, row-major; exact values of the dtype
  int rows() const { return vocab > 0 ? static_cast<int>(logits.size()) / vocab : 0; }
  bool operator==(const Case&) const = default;
};

struct Result {
  std::vector<double> probs;  // rows x K
  std::vector<int> indices;   // rows x K
};

// Why the case breaks the contract, or "" if it is valid.
std::string validate(const Case& c);

// The exact ranking: does index a (logit xa) come before index b (logit xb)?
inline bool ranks_before(double xa, int a, double xb, int b) {
  return xa > xb || (xa == xb && a < b);
}

// Implementations.
Result reference(const Case& c);  // full softmax in double, stable sort by logit
Result fused(const Case& c);      // one pass: online max/normalizer + running top-k

// The fused kernel's stages, one switch per known bug (the mutants).
struct FusedConfig {
  int cap = 0;                        // most entries the running top-k holds (0: K)
  bool subtract_max = true;           // exp(x - m) rather than exp(x)
  bool ties_to_lower = true;          // equal logits: lower index first
  bool rescale_inverted = false;      // normaliser rescaled by exp(m_new - m_old)
  bool order_by_probability = false;  // rank by the rounded probability, not the logit
  bool sort_output = true;            // final sort of the K winners
  // A half case: every exp(.) rounded to the storage dtype as it is
  // computed (the exp_in_f16_no_max mutant; overflows to inf past 11.09 in
  // f16). With the max subtracted (the exp_in_storage mutant) it is seen
  // only where exp(x - m) is an f16 subnormal, x 9.7 to 17 below the max.
  bool exp_in_storage = false;
  // A half case: the running normaliser z rounded to the storage dtype
  // after every update (the z_in_storage mutant). Its relative error grows
  // with the terms added: small on short rows, and once z passes 2^11 (f16;
  // 2^8 in bf16) an exp(.) below half an ulp of z no longer moves it.
  bool z_in_storage = false;
  // exp(x - m) taken as 0 below x - m = -15, a "negligible term" fast path
  // (the far_logits_zeroed mutant): a finite logit 16 below the max gets
  // probability 0, not 1.1e-7.
  bool drop_far = false;
  // The rank key is the logit rounded to f32 (a radix select, or a packed
  // 64-bit (f32 key, index) word, fed f64 logits; the f32_rank_keys
  // mutant): f64 logits that f32 cannot tell apart rank by index.
  bool f32_rank_keys = false;
  // Logits ranked in their bit patterns' order (IEEE totalOrder; a radix
  // select on float bits, as PyTorch's CUDA top-k; the
  // negative_zero_below_zero mutant): -0.0 ranks below +0.0, though the two
  // are the same logit, so a -0.0 loses its tie to a +0.0 at a higher index.
  bool neg_zero_below_zero = false;
  // An f16 case's logits loaded with flush-to-zero (a half-to-float
  // conversion that maps exponent 0 to zero; the f16_subnormal_ftz mutant):
  // a subnormal logit (|x| < 2^-14) becomes a zero of its sign, so distinct
  // subnormals, and a subnormal and a zero, tie and rank by index.
  bool f16_inputs_ftz = false;
};
Result fused_with(const Case& c, const FusedConfig& config);
// The fused kernel on raw f32 rows (x: rows x vocab; probs, indices: rows x k).
void fused_rows(const float* x, int rows, int vocab, int k, int block, float* probs, int* indices);

// The naive same-precision computation for the tolerance policy: two passes
// (max, then a sequential sum of exp) in the case's dtype, then p_i (a half
// case: in f32, p_i rounded to the storage dtype).
std::vector<double> naive_softmax(const Case& c, int row);
// Full softmax of one row in double (what the reference uses).
std::vector<double> softmax_row(const Case& c, int row);

// The mutants (mutants.cpp): fused_with() with one FusedConfig switch flipped.
using Mutant = kprop::Mutant<Case, Result>;
const std::vector<Mutant>& mutants();

// CUDA (softmax_topk_cuda.cpp; only in a build with CUDA, KPROP_HAVE_CUDA):
// The case on device 0 in its dtype (f32 or f64), probabilities widened
// back to double like the CPU implementations. Requires a device (check
// cuda_raw::device_count() first); throws std::runtime_error on CUDA errors.
Result cuda(const Case& c);

}  // namespace kprop::softmax_topk
