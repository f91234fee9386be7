// Metamorphic transforms of a layernorm case (Family::transforms()). Both are
// exact on the inputs: the derived case holds exactly the values the relation
// talks about (no rounding of x), so a spec's tolerance only has to cover the
// implementations' own rounding on the two cases (close(k=) sums both
// budgets). Randomness comes from `seed` (a hash of the case); what a
// transform drew is published as "transform.*".
//
// shift_rows: x_r + c_r. Mathematically μ' = μ + c, σ' = σ, so x̂, rstd, y,
//   dx, dγ, dβ are unchanged and mean moves by c. c_r is a multiple of the
//   finest ulp among the row's values, small enough that every x + c stays
//   below 2^p times that ulp (p = 24 or 53): the shifted row is exact.
// scale_rows: x_r · a_r with a_r = 2^j (exact, away from overflow and
//   subnormals). μ' = a μ and σ'² = a² σ² exactly, but ε is not scaled, so
//     rstd' = 1 / sqrt(a² σ² + ε),  x̂' = ρ x̂  with  ρ = a rstd' / rstd
//                                          = sqrt((σ² + ε) / (σ² + ε / a²)),
//   y' - β = ρ (y - β), dβ' = dβ, dγ' = Σ_rows ρ dy x̂. y is unchanged only
//   up to ρ - 1 ≈ ε (1 - 1/a²) / (2 σ²) when σ² ≫ ε (and changes by up to a
//   factor a on a constant row, where x̂ = 0 anyway). With scale_eps, one a
//   for every row and ε' = a² ε: then ρ = 1 exactly, so y, x̂, dγ, dβ are
//   unchanged, μ' = a μ, rstd' = rstd / a, dx' = dx / a; a power-of-two
//   scale commutes with IEEE rounding, so a scale-equivariant kernel gives
//   these bit for bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kprop/rng.h"
#include "properties/layernorm/family.h"

namespace kprop::layernorm {
namespace {

using XT = expr::DType;
using expr::Tensor;

bool representable(DType t, double v) {
  return std::isfinite(v) && round_to(t, v) == v;
}

// An exact shift for row `r` of about `want` (sign included): a multiple of
// the row's finest ulp 2^g with |x + c| <= 2^(g + p) for every x of the row.
double exact_shift(const Case& c, size_t r, double want) {
  const size_t D = static_cast<size_t>(c.dim);
  int g = std::numeric_limits<int>::max();
  double m = 0;
  for (size_t d = 0; d < D; ++d) {
    const double x = c.x[r * D + d];
    if (x == 0) continue;
    g = std::min(g, lowest_bit(x));
    m = std::max(m, std::fabs(x));
  }
  const double rounded = round_to(c.dtype, want);
  if (g == std::numeric_limits<int>::max()) return rounded;  // a zero row: x + c = c
  const double unit = std::ldexp(1.0, g);
  // |c| <= 2^(g+p) - m keeps every x + c on the grid of 2^g below 2^(g+p); cap at 2^100.
  // A row spanning more than p bits of its finest ulp (common at bf16's 8)
  // has no room: shift 0 rather than an inexact shift.
  // A half case also keeps x + c under a quarter of the largest finite value.
  const double top = is_half(c.dtype) ? max_finite(c.dtype) / 4 - m : std::ldexp(1.0, 100);
  const double room =
      std::max(0.0, std::min({std::ldexp(1.0, g + precision_bits(c.dtype)) - m, std::ldexp(1.0, 100), top}));
  const double steps = std::floor(std::min(std::fabs(want), room) / unit);
  return std::copysign(steps * unit, want);
}

// Powers of two j such that row r times 2^j stays a normal, finite number far
// from overflow in the dtype (and its squared deviations too): [lo, hi].
std::pair<int, int> scale_range(const Case& c, size_t r) {
  const size_t D = static_cast<size_t>(c.dim);
  double most = 0, least = std::numeric_limits<double>::infinity(), spread = 0;
  for (size_t d = 0; d < D; ++d) {
    const double x = c.x[r * D + d];
    most = std::max(most, std::fabs(x));
    if (x != 0) least = std::min(least, std::fabs(x));
    spread = std::max(spread, std::fabs(x - c.x[r * D]));
  }
  // 2^±100 keeps f32 values normal (2^-126) and far from FLT_MAX (2^128);
  // deviations within 2^±50 keep their squares (σ², summed over D <= 2^16)
  // normal and finite in f32 as well.
  int lo = -1000, hi = 1000;
  if (most > 0) hi = std::min(hi, 100 - std::ilogb(most) - 1);
  if (least < std::numeric_limits<double>::infinity()) lo = std::max(lo, -100 - std::ilogb(least) + 1);
  if (spread > 0) {
    hi = std::min(hi, 50 - std::ilogb(spread) - 1);
    lo = std::max(lo, -50 - std::ilogb(spread) + 1);
  }
  // f16 holds normal values in [2^-14, 2^16): stay a power of two inside,
  // under a quarter of 65504 (its squares are computed in f32).
  if (c.dtype == DType::f16) {
    if (most > 0) hi = std::min(hi, 13 - std::ilogb(most));
    if (least < std::numeric_limits<double>::infinity()) lo = std::max(lo, -14 - std::ilogb(least));
  }
  return {lo, hi};
}

}  // namespace

const std::vector<TransformInfo>& Traits::transforms() {
  static const std::vector<TransformInfo> infos = {
      {"shift_rows",
       "adds an exact constant c_r to every x of row r (on the row's ulp grid, so x + c is exact): y, x̂, "
       "rstd, dx, dγ, dβ unchanged; mean grows by c_r",
       {field::real("magnitude", 1, 0, 1e12,
                    "|c_r| is about magnitude × U(0.5, 1) × max|x_r| (1 for a zero row), then snapped to "
                    "an exact shift")},
       {{"transform.shift", {"R"}, XT::real, "the constant c_r added to row r"}}},
      {"scale_rows",
       "multiplies row r by a_r = 2^j (exact): mean × a_r; ε not scaled, so x̂ × ρ_r and y - β × ρ_r with "
       "ρ_r = a_r rstd' / rstd = sqrt((σ² + ε) / (σ² + ε / a_r²)); with scale_eps one a for all rows and "
       "ε × a², so y, x̂, dγ, dβ unchanged, rstd and dx ÷ a",
       {field::integer("max_log2", 8, 0, 60,
                       "j uniform in [-max_log2, max_log2], narrowed so the row stays normal and far from "
                       "overflow in the dtype"),
        field::boolean("scale_eps", false,
                       "one factor for every row and ε multiplied by a² (y, x̂ then unchanged exactly)")},
       {{"transform.factor", {"R"}, XT::real, "the power of two a_r that row r was multiplied by"},
        {"transform.eps_factor", {}, XT::real, "what ε was multiplied by (a² with scale_eps, else 1)"}}},
  };
  return infos;
}

Case Traits::transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                       expr::TensorMap& out) {
  const size_t R = static_cast<size_t>(c.rows), D = static_cast<size_t>(c.dim);
  Case t = c;
  if (name == "shift_rows") {
    const double magnitude = params.real("magnitude");
    std::vector<double> shift(R);
    for (size_t r = 0; r < R; ++r) {
      double m = 0;
      for (size_t d = 0; d < D; ++d) m = std::max(m, std::fabs(c.x[r * D + d]));
      const double sign = rng::hash(seed, 1, r) % 2 ? 1.0 : -1.0;
      const double want = sign * magnitude * (0.5 + 0.5 * rng::uniform(seed, 2, r)) * (m > 0 ? m : 1.0);
      double s = exact_shift(c, r, want);
      for (size_t d = 0; d < D; ++d)
        if (!representable(c.dtype, c.x[r * D + d] + s)) s = 0;  // never: exact_shift keeps the grid
      for (size_t d = 0; d < D; ++d) t.x[r * D + d] = c.x[r * D + d] + s;
      shift[r] = s;
    }
    if (out.wanted("transform.shift")) out.put("transform.shift", Tensor::of({c.rows}, std::move(shift)));
  } else if (name == "scale_rows") {
    const auto most = static_cast<int>(params.integer("max_log2"));
    const bool scale_eps = params.boolean("scale_eps");
    auto draw = [&](uint64_t i, int lo, int hi) {
      lo = std::max(lo, -most), hi = std::min(hi, most);
      if (lo > hi) return 0;
      return lo + static_cast<int>(rng::hash(seed, 3, i) % static_cast<uint64_t>(hi - lo + 1));
    };
    std::vector<int> j(R);
    if (scale_eps) {
      int lo = -1000, hi = 1000;
      for (size_t r = 0; r < R; ++r) {
        const auto [l, h] = scale_range(c, r);
        lo = std::max(lo, l), hi = std::min(hi, h);
      }
      // ε' = a² ε stays within [2^-100, 2^50] (ε is in [1e-30, 1] by the schema).
      const int e = std::ilogb(c.eps);
      lo = std::max(lo, (-100 - e + 2) / 2), hi = std::min(hi, (50 - e - 1) / 2);
      std::fill(j.begin(), j.end(), draw(0, lo, hi));
      t.eps = std::ldexp(c.eps, 2 * j[0]);
    } else {
      for (size_t r = 0; r < R; ++r) {
        const auto [lo, hi] = scale_range(c, r);
        j[r] = draw(r, lo, hi);
      }
    }
    std::vector<double> factor(R);
    for (size_t r = 0; r < R; ++r) {
      factor[r] = std::ldexp(1.0, j[r]);
      for (size_t d = 0; d < D; ++d) t.x[r * D + d] = std::ldexp(c.x[r * D + d], j[r]);
    }
    if (out.wanted("transform.factor")) out.put("transform.factor", Tensor::of({c.rows}, std::move(factor)));
    if (out.wanted("transform.eps_factor"))
      out.put("transform.eps_factor", Tensor::scalar(scale_eps ? std::ldexp(1.0, 2 * j[0]) : 1.0));
  }
  if (const std::string why = validate(t); !why.empty())
    throw std::logic_error("layernorm transform " + name + " made an invalid case: " + why);
  return t;
}

}  // namespace kprop::layernorm
