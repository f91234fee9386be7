// LayerNorm forward and backward (docs/FAMILIES.md, `layernorm`).
//
// Contract. x is [rows, D] row-major, γ and β are [D]; per row
//   μ = mean(x),  σ² = mean((x − μ)²)  (biased),  rstd = 1 / sqrt(σ² + ε)
//   x̂ = (x − μ) · rstd,  y = γ ⊙ x̂ + β
// and for an upstream gradient dy [rows, D], with g = γ ⊙ dy,
//   dx = rstd · (g − mean_D(g) − x̂ ⊙ mean_D(g ⊙ x̂))
//   dγ = Σ_rows dy ⊙ x̂,  dβ = Σ_rows dy.
// ε > 0, D ≥ 1; a constant row (σ² = 0) gives x̂ = 0, y = β and
// dx = (g − mean(g)) / sqrt(ε); D = 1 gives y = β and dx = 0.
//
// A case carries its dtype: its values are exactly representable in it (the
// decoder and the generator round them), so every implementation and the
// fp64 reference see the same inputs.
//
// Precision contract of the half-precision dtypes (f16, bf16), as GPU
// kernels do it: x, γ, β, dy are stored in f16/bf16; ε is an f32 attribute
// (kernels take it as float: 1e-12 is not an f16 value); all arithmetic and
// every accumulation is in f32 (float); the statistics μ and rstd stay f32
// (not rounded to the storage type); the outputs y, x̂ (the cache the
// backward reads), dx, dγ and dβ are rounded to the storage dtype with
// round-to-nearest-even when stored, dγ and dβ after their f32 sums over
// the rows. f32 and f64 cases compute in their own dtype throughout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kprop/float_type.h"
#include "kprop/mutant.h"

namespace kprop::layernorm {

// The case's dtype: f32, f64, f16, bf16 (kprop/float_type.h: names, rounding,
// unit_roundoff, max_finite, ...).
using DType = FloatType;
// Unit roundoff of the arithmetic: the dtype's own, f32's (2^-24) for halves.
double accumulation_roundoff(DType t);
// Half the smallest positive subnormal of the storage dtype: the largest
// absolute error of rounding a result that lands among the subnormals (where
// the relative bound u·|v| does not hold). 0 for f32 and f64, whose
// arithmetic is the storage and whose floors never reach there.
double subnormal_half_step(DType t);
// ε rounded to the case's dtype; ε of a half case is rounded to f32 (see the
// precision contract above).
double round_eps(double eps, DType t);
// ε's dtype: a half case's ε is an f32 value (the precision contract).
inline DType eps_dtype(DType dtype) {
  return is_half(dtype) ? DType::f32 : dtype;
}

struct Case {
  DType dtype = DType::f64;
  int rows = 1;
  int dim = 1;
  double eps = 1e-5;
  std::vector<double> x;      // rows × dim
  std::vector<double> gamma;  // dim
  std::vector<double> beta;   // dim
  std::vector<double> dy;     // rows × dim
  bool operator==(const Case&) const = default;
};

// Everything an implementation reports, widened to double.
struct Result {
  std::vector<double> y, xhat;        // rows × dim (x̂ as cached for the backward)
  std::vector<double> mean, rstd;     // rows
  std::vector<double> dx;             // rows × dim
  std::vector<double> dgamma, dbeta;  // dim
};

// Why the case breaks the contract, or "" if it is valid.
std::string validate(const Case& c);
// Rounds every value (and ε) to the case's dtype.
void round_to_dtype(Case& c);

// Implementations.
Result reference(const Case& c);  // fp64, two-pass, written for clarity
// The reference's forward of one row of D values (xhat and y written into
// D-element buffers): what reference() runs per row, and what the
// finite-difference check differentiates without building a Result.
struct RowStats {
  double mean, rstd;
};
RowStats reference_forward_row(const double* x, const double* gamma, const double* beta, size_t D, double eps,
                               double* xhat, double* y);
Result fused(const Case& c);  // one-pass Welford forward, fused backward, in the case's dtype
// The naive two-pass algorithm in the case's dtype (a half case: half
// storage of inputs and outputs, f32 arithmetic, μ and rstd f32): the
// tolerance baseline (not registered as an implementation).
Result two_pass(const Case& c);

namespace kernel {
enum class Bug;  // kernels.h
}
// The fused implementation with one of the fused kernel's bug switches
// flipped (kernel::Bug; none: as fused); `store`, when set, replaces a half
// case's rounding of the stored outputs. What the mutants run.
Result fused_with(const Case& c, kernel::Bug bug, float (*store)(float) = nullptr);

// The mutants (mutants.cpp): fused_with() with one switch flipped.
using Mutant = kprop::Mutant<Case, Result>;
const std::vector<Mutant>& mutants();

// CUDA (layernorm_cuda.cpp; only in a build with CUDA, KPROP_HAVE_CUDA):
// The case on device 0 in its dtype (f32 or f64), widened back to double
// like the CPU implementations. Requires a device (check
// cuda_raw::device_count() first); throws std::runtime_error on CUDA errors.
Result cuda(const Case& c);

}  // namespace kprop::layernorm
