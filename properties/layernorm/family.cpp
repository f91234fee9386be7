#include "properties/layernorm/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "kprop/case_yaml.h"
#include "kprop/rng.h"

namespace kprop::layernorm {

Schema Traits::domain_schema() {
  return {
      field::choices("dtype", {"f16", "bf16", "f32", "f64"}, {"f16", "bf16", "f32", "f64"},
                     "element types to draw (one per case; f16/bf16 store in half and compute in f32)"),
      field::int_range("rows", {1, 8}, 1, 4096, "rows (independent normalisations)"),
      field::int_range("dim", {1, 64}, 1, 65536, "D, the normalised (last) dimension"),
      field::real("dim_one_rate", 0.1, 0, 1, "chance that D = 1 (x̂ = 0, y = β, dx = 0)"),
      field::real_range("eps_exp", {-12, -2}, -30, 0, "ε = 10^u, u uniform in this range"),
      field::map(
          "x",
          {
              field::real_range("spread_exp", {-12, 12}, -30, 30,
                                "a row's standard deviation is 10^u: tiny and huge magnitudes"),
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

namespace {

// Streams of kprop::rng for the case's values (one seed per case).
enum Stream : uint64_t { kRowMean = 1, kGamma = 2, kBeta = 3, kDy = 4, kX = 1000 };

// f16 rows: a standard deviation in [1e-4, 2e4] (10^u clamped): below, the
// row is made of a few subnormals; above, every value clamps at 65504. Rows
// at the top of the range hold values of a few 1e4, whose squares (and the
// sum of squared deviations) overflow if accumulated in f16.
constexpr double kF16SpreadLo = 1e-4, kF16SpreadHi = 2e4;

// Fits a half case's drawn values into its dtype: x clamped to the finite
// range, then γ, β and dy scaled down (only where needed) so that no output
// can overflow the storage type: |y| <= max|γ| sqrt(D) + max|β| (|x̂| <=
// sqrt(D - 1)); |dx| <= rstd max|γ| max|dy| (2 + sqrt(D)); |dγ| <= rows
// max|dy| sqrt(D); |dβ| <= rows max|dy|. Each bound is kept under a quarter
// of the largest finite value. Values are rounded to the dtype afterwards.
void fit_half(Case& c) {
  const double top = max_finite(c.dtype), D = c.dim;
  for (double& v : c.x) v = round_to(c.dtype, std::clamp(v, -top, top));
  c.eps = round_eps(c.eps, c.dtype);
  auto max_abs = [](const std::vector<double>& v) {
    double m = 0;
    for (double e : v) m = std::max(m, std::fabs(e));
    return m;
  };
  auto scale = [](std::vector<double>& v, double f) {
    for (double& e : v) e *= f;
  };
  const double y_bound = max_abs(c.gamma) * std::sqrt(D) + max_abs(c.beta);
  if (y_bound > top / 4) scale(c.gamma, top / 4 / y_bound), scale(c.beta, top / 4 / y_bound);
  double rstd = 0;
  const Result ref_stats = reference(Case{c.dtype, c.rows, c.dim, c.eps, c.x, c.gamma, c.beta, c.x});
  for (double r : ref_stats.rstd) rstd = std::max(rstd, r);
  const double per_dy = std::max(rstd * max_abs(c.gamma) * (2 + std::sqrt(D)), c.rows * std::sqrt(D));
  const double dx_bound = per_dy * max_abs(c.dy);
  if (dx_bound > top / 4) scale(c.dy, top / 4 / dx_bound);
}

}  // namespace

// One case builder for RapidCheck draws, fuzz bytes and seed corpora: the
// draws pick the shape, the scales and a seed; the values come from kprop::rng.
Case Traits::build(Draw& draw, const Values& domain) {
  Case c;
  parse_dtype(draw.pick(domain.choices("dtype")), c.dtype);  // the schema allows only valid names
  c.rows = static_cast<int>(draw.sized(domain.int_range("rows")));
  // D = 1 only where the dim range allows it (dim: [3, 4] means D in [3, 4]).
  const bool dim_one = draw.chance(domain.real("dim_one_rate")) && domain.int_range("dim").allows(1);
  c.dim = dim_one ? 1 : static_cast<int>(draw.sized(domain.int_range("dim")));
  c.eps = std::pow(10.0, draw.any(domain.real_range("eps_exp")));
  const uint64_t seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
  const double gamma_scale = std::pow(10.0, draw.any(domain.real_range("gamma_exp")));
  const double beta_scale = std::pow(10.0, draw.any(domain.real_range("beta_exp")));
  const double dy_scale = std::pow(10.0, draw.any(domain.real_range("dy_exp")));
  const size_t D = static_cast<size_t>(c.dim);
  for (int r = 0; r < c.rows; ++r) {
    double spread = std::pow(10.0, draw.any(domain.real_range("x.spread_exp")));
    if (c.dtype == DType::f16) spread = std::clamp(spread, kF16SpreadLo, kF16SpreadHi);
    double mean = spread * rng::normal(seed, kRowMean, static_cast<uint64_t>(r));
    if (draw.chance(domain.real("x.offset_rate"))) {
      const double sign = draw.chance(0.5) ? -1.0 : 1.0;
      mean = sign * spread * std::pow(10.0, draw.any(domain.real_range("x.cond_exp")));
    }
    if (is_half(c.dtype)) mean = std::clamp(mean, -max_finite(c.dtype) / 2, max_finite(c.dtype) / 2);
    const bool constant = draw.chance(domain.real("x.constant_rate"));
    for (size_t d = 0; d < D; ++d)
      c.x.push_back(constant ? mean : mean + spread * rng::normal(seed, kX + static_cast<uint64_t>(r), d));
  }
  for (size_t d = 0; d < D; ++d) {
    c.gamma.push_back(gamma_scale * rng::normal(seed, kGamma, d));
    c.beta.push_back(beta_scale * rng::normal(seed, kBeta, d));
  }
  for (size_t i = 0; i < c.x.size(); ++i) c.dy.push_back(dy_scale * rng::normal(seed, kDy, i));
  if (is_half(c.dtype)) fit_half(c);
  round_to_dtype(c);
  return c;
}

namespace {

// ε's text: a half case's ε is an f32 value (layernorm.h, precision contract).
DType eps_dtype(DType dtype) {
  return is_half(dtype) ? DType::f32 : dtype;
}

// v rounded to k significant decimal digits, then to the dtype.
double round_digits(double v, int k, DType dtype) {
  const std::string s = fmt::format("{:.{}e}", v, k - 1);
  return dtype == DType::f32 ? static_cast<double>(std::strtof(s.c_str(), nullptr))
                             : round_to(dtype, std::strtod(s.c_str(), nullptr));
}

// ---- shrinking
enum class Tensor { x, gamma, beta, dy };

template <typename C>  // Case or const Case
auto& tensor(C& c, Tensor t) {
  switch (t) {
    case Tensor::x:
      return c.x;
    case Tensor::gamma:
      return c.gamma;
    case Tensor::beta:
      return c.beta;
    case Tensor::dy:
      return c.dy;
  }
  return c.x;
}

// Simpler values for one element, boldest first: the tensor's canonical
// value (γ = 1, β = 0, dy and x = 0 or 1), then fewer significant digits. Every
// candidate has strictly fewer digits, or is canonical (reached once), so
// shrinking terminates.
std::vector<double> simpler_values(double v, Tensor t, DType dtype) {
  std::vector<double> out;
  auto add = [&](double w) {
    if (w != v && std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  };
  switch (t) {
    case Tensor::gamma:
      if (v != 1) add(1);
      break;
    case Tensor::beta:
      add(0);
      break;
    case Tensor::dy:
    case Tensor::x:
      if (v != 0 && v != 1) add(0), add(1);
      break;
  }
  const int digits = significant_digits(v, dtype);
  for (int k = 1; k < digits; ++k) {
    const double w = round_digits(v, k, dtype);
    if (std::isfinite(w) && significant_digits(w, dtype) < digits) add(w);
  }
  return out;
}

Case keep_rows(const Case& c, const std::vector<int>& keep) {
  Case s = c;
  s.rows = static_cast<int>(keep.size());
  s.x.clear();
  s.dy.clear();
  const size_t D = static_cast<size_t>(c.dim);
  for (int r : keep) {
    s.x.insert(s.x.end(), c.x.begin() + static_cast<long>(r * D),
               c.x.begin() + static_cast<long>((r + 1) * D));
    s.dy.insert(s.dy.end(), c.dy.begin() + static_cast<long>(r * D),
                c.dy.begin() + static_cast<long>((r + 1) * D));
  }
  return s;
}

Case keep_cols(const Case& c, const std::vector<int>& keep) {
  Case s = c;
  s.dim = static_cast<int>(keep.size());
  s.x.clear();
  s.dy.clear();
  s.gamma.clear();
  s.beta.clear();
  const size_t D = static_cast<size_t>(c.dim);
  for (int d : keep)
    s.gamma.push_back(c.gamma[static_cast<size_t>(d)]), s.beta.push_back(c.beta[static_cast<size_t>(d)]);
  for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r)
    for (int d : keep) {
      s.x.push_back(c.x[r * D + static_cast<size_t>(d)]);
      s.dy.push_back(c.dy[r * D + static_cast<size_t>(d)]);
    }
  return s;
}

std::vector<int> iota_except(int n, int lo, int hi) {  // [0, n) without [lo, hi)
  std::vector<int> out;
  for (int i = 0; i < n; ++i)
    if (i < lo || i >= hi) out.push_back(i);
  return out;
}

int digit_sum(const std::vector<double>& v, size_t lo, size_t hi, DType dtype) {
  int s = 0;
  for (size_t i = lo; i < hi; ++i) s += significant_digits(v[i], dtype);
  return s;
}

}  // namespace

int significant_digits(double v, DType dtype) {
  if (!is_half(dtype)) return case_yaml::significant_digits(v, dtype == DType::f32);
  if (v == 0 || !std::isfinite(v)) return 0;
  std::string digits;  // of the shortest text, as case_yaml counts them
  for (char ch : value_text(dtype, v)) {
    if (ch == 'e' || ch == 'E') break;
    if (ch >= '0' && ch <= '9') digits += ch;
  }
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 0;
  return static_cast<int>(digits.find_last_not_of('0') - first + 1);
}

// One shrink step, boldest first: fewer rows, smaller D, canonical γ, β and
// dy everywhere, ε a power of ten, constant rows, then each value with fewer
// significant digits. Lazy: a candidate is built only when reached.
rc::Seq<Case> Traits::shrinks(const Case& c0, const Values&) {
  auto c = std::make_shared<const Case>(c0);
  const int rows = c->rows, dim = c->dim;
  std::vector<std::vector<int>> row_sets, col_sets;
  if (rows > 1) {
    row_sets.push_back(iota_except(rows, (rows + 1) / 2, rows));  // first half
    row_sets.push_back(iota_except(rows, 0, rows / 2));           // second half
    for (int r = 0; r < rows; ++r) row_sets.push_back(iota_except(rows, r, r + 1));
  }
  if (dim > 1) {
    col_sets.push_back(iota_except(dim, (dim + 1) / 2, dim));
    col_sets.push_back(iota_except(dim, 0, dim / 2));
    for (int d = 0; d < dim; ++d) col_sets.push_back(iota_except(dim, d, d + 1));
  }
  auto structure = rc::seq::concat(rc::seq::map(rc::seq::fromContainer(row_sets),
                                                [c](const std::vector<int>& k) { return keep_rows(*c, k); }),
                                   rc::seq::map(rc::seq::fromContainer(col_sets),
                                                [c](const std::vector<int>& k) { return keep_cols(*c, k); }));

  std::vector<Case> global;
  auto all_equal = [](const std::vector<double>& v, double w) {
    return std::all_of(v.begin(), v.end(), [w](double e) { return e == w; });
  };
  if (!all_equal(c->gamma, 1)) {
    Case s = *c;
    std::fill(s.gamma.begin(), s.gamma.end(), 1.0);
    global.push_back(std::move(s));
  }
  if (!all_equal(c->beta, 0)) {
    Case s = *c;
    std::fill(s.beta.begin(), s.beta.end(), 0.0);
    global.push_back(std::move(s));
  }
  if (!all_equal(c->dy, 1) && !all_equal(c->dy, 0)) {
    Case s = *c;
    std::fill(s.dy.begin(), s.dy.end(), 1.0);
    global.push_back(std::move(s));
  }
  {
    Case s = *c;
    s.eps = std::pow(10.0, std::round(std::log10(c->eps)));
    round_to_dtype(s);
    const DType et = eps_dtype(c->dtype);
    if (s.eps != c->eps && significant_digits(s.eps, et) <= significant_digits(c->eps, et))
      global.push_back(std::move(s));
  }
  const size_t D = static_cast<size_t>(dim);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {  // a constant row (zero variance)
    Case s = *c;
    std::fill(s.x.begin() + static_cast<long>(r * D), s.x.begin() + static_cast<long>((r + 1) * D),
              c->x[r * D]);
    if (!(s.x == c->x) &&
        digit_sum(s.x, r * D, (r + 1) * D, c->dtype) <= digit_sum(c->x, r * D, (r + 1) * D, c->dtype))
      global.push_back(std::move(s));
  }

  struct Slot {
    Tensor t;
    size_t i;
  };
  std::vector<Slot> slots;
  for (Tensor t : {Tensor::gamma, Tensor::beta, Tensor::dy, Tensor::x}) {
    const size_t n = t == Tensor::x || t == Tensor::dy ? c->x.size() : D;
    for (size_t i = 0; i < n; ++i) slots.push_back({t, i});
  }
  auto values = rc::seq::mapcat(rc::seq::fromContainer(std::move(slots)), [c](const Slot& slot) {
    const double v = tensor(*c, slot.t)[slot.i];
    return rc::seq::map(rc::seq::fromContainer(simpler_values(v, slot.t, c->dtype)), [c, slot](double w) {
      Case s = *c;
      tensor(s, slot.t)[slot.i] = w;
      return s;
    });
  });
  auto all =
      rc::seq::concat(std::move(structure), rc::seq::fromContainer(std::move(global)), std::move(values));
  return rc::seq::filter(std::move(all), [c](const Case& s) { return !(s == *c) && validate(s).empty(); });
}

std::string Traits::in_domain(const Case& c, const Values& d) {
  // ε is 10^u rounded to the dtype: compare with a relative slack of f32's roundoff.
  const RealRange e = d.real_range("eps_exp");
  const double lo = std::pow(10.0, e.lo) * (1 - 1e-6), hi = std::pow(10.0, e.hi) * (1 + 1e-6);
  if (!(c.eps >= lo && c.eps <= hi))
    return fmt::format("eps = {:g} is outside 10^[{}, {}]", c.eps, e.lo, e.hi);
  return first_problem({outside_choices(d, "dtype", dtype_name(c.dtype)),
                        outside_int_range(d, "rows", c.rows), outside_int_range(d, "dim", c.dim)});
}

namespace {
// Doubles of one trial: x and dy, then three results (target, reference,
// the naive two-pass: y, x̂, dx of R×D, γ-sized dγ, dβ and R of rstd) and γ, β.
double layernorm_bytes(double rows, double dim) {
  return 8 * (2 * rows * dim + 3 * (3 * rows * dim + 2 * dim + rows) + 2 * dim);
}
}  // namespace

double Traits::case_bytes(const Case& c) {
  return layernorm_bytes(c.rows, c.dim);
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const int64_t rows = d.int_range("rows").hi, dim = d.int_range("dim").hi;
  return {layernorm_bytes(double(rows), double(dim)), fmt::format("rows {} x D {}", rows, dim),
          "rows or dim"};
}

// ---- YAML codec
namespace {

YAML::Node number_list(const double* v, size_t n, DType dtype) {
  YAML::Node list(YAML::NodeType::Sequence);
  for (size_t i = 0; i < n; ++i) list.push_back(value_text(dtype, v[i]));
  return list;
}

YAML::Node matrix(const std::vector<double>& v, int rows, int dim, DType dtype) {
  YAML::Node out(YAML::NodeType::Sequence);
  for (int r = 0; r < rows; ++r)
    out.push_back(number_list(v.data() + static_cast<size_t>(r) * static_cast<size_t>(dim),
                              static_cast<size_t>(dim), dtype));
  return out;
}

// A finite number of the dtype, parsed directly in that precision (f32) or
// as a double rounded to nearest even in the dtype (f16, bf16), as the f32
// path rounds a decimal that is not a float.
double read_number(const YAML::Node& n, DType dtype, const std::string& what) {
  if (!n.IsScalar()) case_yaml::fail(n, what + " must be a number");
  const std::string& s = n.Scalar();
  char* end = nullptr;
  errno = 0;
  const double v = dtype == DType::f32 ? static_cast<double>(std::strtof(s.c_str(), &end))
                                       : round_to(dtype, std::strtod(s.c_str(), &end));
  if (s.empty() || end != s.c_str() + s.size()) case_yaml::fail(n, what + " has a non-number '" + s + "'");
  if (!std::isfinite(v) || (errno == ERANGE && std::fabs(v) > 1))
    case_yaml::fail(n, fmt::format("{} = {} is not a finite {} value", what, s, dtype_name(dtype)));
  return v;
}

std::vector<double> read_vector(const YAML::Node& map, const char* key, DType dtype) {
  const YAML::Node n = map[key];
  if (!n || !n.IsSequence())
    case_yaml::fail(n ? n : map, std::string("'") + key + "' must be a list of numbers");
  std::vector<double> out;
  for (const auto& e : n) out.push_back(read_number(e, dtype, std::string("'") + key + "' element"));
  return out;
}

// A list of rows, all of one length; returns the values row-major.
std::vector<double> read_matrix(const YAML::Node& map, const char* key, DType dtype, int& rows, int& dim) {
  const YAML::Node n = map[key];
  if (!n || !n.IsSequence() || n.size() == 0)
    case_yaml::fail(n ? n : map, std::string("'") + key + "' must be a non-empty list of rows");
  std::vector<double> out;
  rows = static_cast<int>(n.size());
  dim = -1;
  for (const auto& row : n) {
    if (!row.IsSequence())
      case_yaml::fail(row, std::string("each row of '") + key + "' must be a list of numbers");
    if (dim >= 0 && static_cast<int>(row.size()) != dim)
      case_yaml::fail(row, fmt::format("rows of '{}' differ in length ({} and {})", key, dim, row.size()));
    dim = static_cast<int>(row.size());
    for (const auto& e : row) out.push_back(read_number(e, dtype, std::string("'") + key + "' element"));
    if (out.size() > (1u << 24))
      case_yaml::fail(n, std::string("'") + key + "' is too large for a test case");
  }
  return out;
}

}  // namespace

YAML::Node Traits::to_yaml(const Case& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["dtype"] = dtype_name(c.dtype);
  n["eps"] = value_text(eps_dtype(c.dtype), c.eps);
  n["x"] = matrix(c.x, c.rows, c.dim, c.dtype);
  n["gamma"] = number_list(c.gamma.data(), c.gamma.size(), c.dtype);
  n["beta"] = number_list(c.beta.data(), c.beta.size(), c.dtype);
  n["dy"] = matrix(c.dy, c.rows, c.dim, c.dtype);
  return n;
}

Case Traits::from_yaml(const YAML::Node& n) {
  case_yaml::expect_keys(n, {"dtype", "eps", "x", "gamma", "beta", "dy"}, "layernorm case");
  Case c;
  const std::string dtype = case_yaml::read<std::string>(n, "dtype");
  if (!parse_dtype(dtype, c.dtype))
    case_yaml::fail(n["dtype"], "dtype '" + dtype + "': valid: f16, bf16, f32, f64");
  if (!n["eps"]) case_yaml::fail(n, "missing 'eps'");
  c.eps = read_number(n["eps"], eps_dtype(c.dtype), "'eps'");
  c.x = read_matrix(n, "x", c.dtype, c.rows, c.dim);
  int dy_rows = 0, dy_dim = 0;
  c.dy = read_matrix(n, "dy", c.dtype, dy_rows, dy_dim);
  if (dy_rows != c.rows || dy_dim != c.dim)
    case_yaml::fail(n["dy"], fmt::format("'dy' is {}x{}, 'x' is {}x{}", dy_rows, dy_dim, c.rows, c.dim));
  c.gamma = read_vector(n, "gamma", c.dtype);
  c.beta = read_vector(n, "beta", c.dtype);
  if (c.gamma.size() != static_cast<size_t>(c.dim) || c.beta.size() != static_cast<size_t>(c.dim))
    case_yaml::fail(
        n, fmt::format("'gamma' and 'beta' must have D = {} values (rows of 'x' have {})", c.dim, c.dim));
  if (const std::string why = validate(c); !why.empty()) case_yaml::fail(n, why);
  return c;
}

CaseStats Traits::stats(const Case& c) {
  const size_t D = static_cast<size_t>(c.dim);
  int constant = 0;
  double worst_cond = 0, min_spread = INFINITY, max_spread = 0;
  for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) {
    double mean = 0, ss = 0;
    for (size_t d = 0; d < D; ++d) mean += c.x[r * D + d];
    mean /= static_cast<double>(D);
    for (size_t d = 0; d < D; ++d) ss += (c.x[r * D + d] - mean) * (c.x[r * D + d] - mean);
    const double sd = std::sqrt(ss / static_cast<double>(D));
    if (sd == 0) {
      ++constant;
      continue;
    }
    worst_cond = std::max(worst_cond, std::fabs(mean) / sd);
    min_spread = std::min(min_spread, sd);
    max_spread = std::max(max_spread, sd);
  }
  std::string rows_text;
  if (max_spread > 0)
    rows_text +=
        fmt::format(", std {:.2g}..{:.2g}, |mean|/std up to {:.2g}", min_spread, max_spread, worst_cond);
  if (constant) rows_text += fmt::format(", {} constant row{}", constant, constant == 1 ? "" : "s");
  return {static_cast<int64_t>(c.rows) * c.dim,
          fmt::format("{}x{} {}, eps {}{}", c.rows, c.dim, dtype_name(c.dtype),
                      value_text(eps_dtype(c.dtype), c.eps), rows_text)};
}

}  // namespace kprop::layernorm
