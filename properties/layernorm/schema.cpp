// The layernorm family's domain: its schema, in_domain and the size of a case.
#include <fmt/format.h>

#include <cmath>

#include "properties/layernorm/family.h"

namespace kprop::layernorm {

Schema Traits::domain_schema() {
  return {
      field::renamed(
          field::choices("dtypes", {"f16", "bf16", "f32", "f64"}, {"f16", "bf16", "f32", "f64"},
                         "element types to draw (one per case; f16/bf16 store in half and compute in f32)"),
          "dtype"),
      field::int_range("rows", {1, 8}, 1, 1 << 24, "rows (independent normalisations)"),
      field::int_range("dim", {1, 64}, 1, 1 << 24, "D, the normalised (last) dimension"),
      field::real("dim_one_rate", 0.1, 0, 1, "chance that D = 1 (x̂ = 0, y = β, dx = 0)"),
      field::real_range("eps_exp", {-12, -2}, -30, 0, "ε = 10^u, u uniform in this range"),
      field::map(
          "x",
          {
              field::real_range("spread_exp", {-12, 12}, -30, 30,
                                "a row's standard deviation is 10^u: tiny and huge magnitudes (values past "
                                "the dtype's range saturate)"),
              field::real("offset_rate", 0.4, 0, 1, "chance a row sits at a large offset from zero"),
              field::real_range("cond_exp", {2, 12}, 0, 16,
                                "offset rows: |mean| / std = 10^u (a 1e4 offset with std 1e-2 is u = 6)"),
              field::real("constant_rate", 0.15, 0, 1, "chance a row is constant (zero variance)"),
          },
          "input rows"),
      field::real_range("gamma_exp", {-3, 3}, -30, 30, "γ = 10^u · N(0, 1), u drawn once per case"),
      field::real_range("beta_exp", {-3, 3}, -30, 30, "β = 10^u · N(0, 1), u drawn once per case"),
      field::real_range("dy_exp", {-3, 3}, -30, 30, "dy = 10^u · N(0, 1), u drawn once per case"),
  };
}

std::string Traits::in_domain(const Case& c, const Values& d) {
  // ε is 10^u rounded to the dtype: compare with a relative slack of f32's roundoff.
  const RealRange e = d.real_range("eps_exp");
  const double lo = std::pow(10.0, e.lo) * (1 - 1e-6), hi = std::pow(10.0, e.hi) * (1 + 1e-6);
  if (!(c.eps >= lo && c.eps <= hi))
    return fmt::format("eps = {:g} is outside 10^[{}, {}]", c.eps, e.lo, e.hi);
  return first_problem({outside_choices(d, "dtypes", dtype_name(c.dtype)),
                        outside_int_range(d, "rows", c.rows), outside_int_range(d, "dim", c.dim)});
}

namespace {
// Doubles of one trial: x and dy, then three results (target, reference,
// the naive two-pass: y, x̂, dx of R×D, γ-sized dγ, dβ and R of rstd) and γ, β,
// and the implementation running: its inputs x, dy, γ, β and outputs in its
// dtype (≤ 8 bytes each). bench/case_memory.py measures the peak against
// this: 37 MB of 45 at rows 2 x D 131073, fused.
double layernorm_bytes(double rows, double dim) {
  return 8 * (2 * rows * dim + 3 * (3 * rows * dim + 2 * dim + rows) + 2 * dim) +
         8 * (5 * rows * dim + 4 * dim + 2 * rows);
}
}  // namespace

double Traits::case_bytes(const Case& c) {
  return layernorm_bytes(c.rows, c.dim);
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const int64_t rows = d.int_range("rows").hi, dim = d.int_range("dim").hi;
  CaseSize size{layernorm_bytes(double(rows), double(dim)), fmt::format("rows {} x D {}", rows, dim),
                "rows or dim"};
  size.extents = {{"R", double(rows)}, {"D", double(dim)}};  // the named tensors' dims (tensors.cpp)
  return size;
}

}  // namespace kprop::layernorm
