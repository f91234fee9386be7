// Named tensors of layernorm for expression invariants (kprop/expr.h): the
// case's inputs, the target's and reference's outputs (y, x̂, μ, rstd, dx, dγ,
// dβ), the fp64 biased variance σ² of each row, the naive same-precision
// two-pass computation (the tolerance baseline) and the floors of the
// built-in matches_reference, so close(k=) states that policy.
#include <cmath>

#include "properties/layernorm/family.h"

namespace kprop::layernorm {

expr::TensorInfos Traits::tensor_infos() {
  expr::TensorInfos t = expr::tensor_table(R"(
R              []      int   rows (independent normalisations)
D              []      int   the normalised (last) dimension
eps            []      real  the case's ε under the square root: rstd = 1 / sqrt(σ² + ε)
u              []      real  unit roundoff of the case's (storage) dtype (2^-24 for f32, 2^-53 for f64, 2^-11
                             for f16, 2^-8 for bf16)
u_arith        []      real  unit roundoff of the arithmetic: f32's 2^-24 for f16/bf16 cases (they compute in
                             f32), else u
tiny           []      real  half the storage dtype's smallest subnormal (f16/bf16: a store's absolute error
                             there); 0 for f32/f64
dtype_bytes    []      int   bytes per element of the case's dtype (2, 4 or 8)
x              [R, D]  real  input rows
gamma          [D]     real  scale γ
beta           [D]     real  shift β
dy             [R, D]  real  upstream gradient dy
reference.var  [R]     real  biased variance σ² = mean((x - μ)²) of each row in fp64 (two passes, from the
                             case)
)");
  const expr::TensorInfos outputs = expr::tensor_table(R"(
y       [R, D]  real  output y = γ x̂ + β
xhat    [R, D]  real  normalised input x̂ = (x - μ) rstd, as cached for the backward
mean    [R]     real  row mean μ
rstd    [R]     real  1 / sqrt(σ² + ε)
dx      [R, D]  real  dx = rstd (g - mean(g) - x̂ mean(g x̂)), g = γ dy
dgamma  [D]     real  dγ = Σ_rows dy x̂
dbeta   [D]     real  dβ = Σ_rows dy
)");
  expr::add_per_implementation(
      t,
      {{"target", "the target's "},
       {"reference", "the reference's "},
       {"naive", "the naive two-pass computation in the case's dtype (the policy's baseline): "}},
      outputs);
  const expr::TensorInfos floors = expr::tensor_table(R"(
floor.y       [R, 1]  real  matches_reference's floor for a row of y: 64 u max_d(|γ x̂| + |β|) (close(k=))
floor.dx      [R, 1]  real  matches_reference's floor for a row of dx: 64 u rstd (max|g| + mean|g| + max|x̂|
                            mean|g x̂|)
floor.dgamma  []      real  matches_reference's floor for dγ: 64 u max_d Σ_rows |dy x̂|
floor.dbeta   []      real  matches_reference's floor for dβ: 64 u max_d Σ_rows |dy|
floor.mean    [R]     real  saved_statistics' floor for μ: 64 u Σ_d |x| / D
floor.rstd    [R]     real  saved_statistics' floor for rstd: 64 u rstd
)");
  // (For f16/bf16 cases each floor uses f32's roundoff for u and adds the
  // storage terms of invariants.cpp: y_floor, dx_floor, dgamma_floor, dbeta_floor.)
  t.insert(t.end(), floors.begin(), floors.end());
  return t;
}

namespace {

using XT = expr::DType;
using expr::Tensor;
using expr::TensorMap;

// matches_reference's floor_ulps as specs/layernorm.yaml sets it (64, also
// the invariant's default): floor.X = 64 × unit roundoff × the magnitude an
// element of X is built from (y_scale ... dbeta_scale, invariants.cpp); a
// half case: f32's roundoff there, plus the storage terms (y_floor ...).
constexpr double kFloorUlps = 64;

// σ² of each row in fp64, two passes, straight from the contract.
std::vector<double> variances(const Case& c) {
  const size_t D = static_cast<size_t>(c.dim);
  std::vector<double> v;
  for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) {
    const double* x = &c.x[r * D];
    double sum = 0;
    for (size_t d = 0; d < D; ++d) sum += x[d] - x[0];  // shifted: exact-ish at large offsets
    const double centre = sum / static_cast<double>(D);
    double ss = 0;
    for (size_t d = 0; d < D; ++d) ss += ((x[d] - x[0]) - centre) * ((x[d] - x[0]) - centre);
    v.push_back(ss / static_cast<double>(D));
  }
  return v;
}

void put_outputs(const Case& c, const std::string& who, const Result& r, TensorMap& out) {
  const int64_t R = c.rows, D = c.dim;
  auto put = [&](const char* name, std::vector<int64_t> shape, const std::vector<double>& data) {
    out.put_output(who + "." + name, std::move(shape), data);
  };
  put("y", {R, D}, r.y);
  put("xhat", {R, D}, r.xhat);
  put("mean", {R}, r.mean);
  put("rstd", {R}, r.rstd);
  put("dx", {R, D}, r.dx);
  put("dgamma", {D}, r.dgamma);
  put("dbeta", {D}, r.dbeta);
}

}  // namespace

void Traits::tensors(const Case& c, const Result* target, const Result* reference_result, TensorMap& out) {
  const int64_t R = c.rows, D = c.dim;
  out.put("R", Tensor::scalar(static_cast<double>(R), XT::integer));
  out.put("D", Tensor::scalar(static_cast<double>(D), XT::integer));
  out.put("eps", Tensor::scalar(c.eps));
  out.put("u", Tensor::scalar(unit_roundoff(c.dtype)));
  out.put("u_arith", Tensor::scalar(accumulation_roundoff(c.dtype)));
  out.put("tiny", Tensor::scalar(subnormal_half_step(c.dtype)));
  out.put("dtype_bytes", Tensor::scalar(storage_bytes(c.dtype), XT::integer));
  if (out.wanted("x")) out.put("x", Tensor::of({R, D}, c.x));
  if (out.wanted("gamma")) out.put("gamma", Tensor::of({D}, c.gamma));
  if (out.wanted("beta")) out.put("beta", Tensor::of({D}, c.beta));
  if (out.wanted("dy")) out.put("dy", Tensor::of({R, D}, c.dy));
  if (out.wanted("reference.var")) out.put("reference.var", Tensor::of({R}, variances(c)));
  if (out.wants_prefix("naive.")) put_outputs(c, "naive", two_pass(c), out);
  if (out.wants_prefix("floor.")) {
    // The floors from the fp64 reference, as matches_reference takes them.
    const Result ref = reference(c);
    std::vector<double> fy, fdx, fmean, frstd;
    for (size_t r = 0; r < static_cast<size_t>(R); ++r) {
      fy.push_back(y_floor(c, ref, r, kFloorUlps));
      fdx.push_back(dx_floor(c, ref, r, kFloorUlps));
      fmean.push_back(mean_floor(c, r, kFloorUlps));
      frstd.push_back(rstd_floor(c, ref, r, kFloorUlps));
    }
    out.put("floor.mean", Tensor::of({R}, std::move(fmean)));
    out.put("floor.rstd", Tensor::of({R}, std::move(frstd)));
    out.put("floor.y", Tensor::of({R, 1}, std::move(fy)));
    out.put("floor.dx", Tensor::of({R, 1}, std::move(fdx)));
    out.put("floor.dgamma", Tensor::scalar(dgamma_floor(c, ref, kFloorUlps)));
    out.put("floor.dbeta", Tensor::scalar(dbeta_floor(c, kFloorUlps)));
  }
  if (target) put_outputs(c, "target", *target, out);
  if (reference_result) put_outputs(c, "reference", *reference_result, out);
}

}  // namespace kprop::layernorm
