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
// A case carries its dtype: f32 cases hold values that are exactly
// representable in float (the decoder rounds them), so every implementation
// and the fp64 reference see the same inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kprop::layernorm {

enum class DType { f32, f64 };
const char* dtype_name(DType t);
// Unit roundoff of the dtype: 2^-24 or 2^-53.
double unit_roundoff(DType t);

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
Result fused(const Case& c);      // one-pass Welford forward, fused backward, in the case's dtype
// The naive two-pass algorithm in the case's dtype: the tolerance baseline
// (not registered as an implementation).
Result two_pass(const Case& c);

struct Mutant {
  const char* name;
  const char* description;
  Result (*run)(const Case&);
};
const std::vector<Mutant>& mutants();

}  // namespace kprop::layernorm
