// The layernorm family's YAML codec.
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "kprop/case_yaml.h"
#include "kprop/rng.h"
#include "properties/layernorm/family.h"

namespace kprop::layernorm {

// ---- YAML codec
namespace {

YAML::Node number_list(const double* v, size_t n, DType dtype) {
  return case_yaml::text_list(n, [&](size_t i) { return value_text(dtype, v[i]); });
}

YAML::Node matrix(const std::vector<double>& v, int rows, int dim, DType dtype) {
  YAML::Node out(YAML::NodeType::Sequence);
  for (int r = 0; r < rows; ++r)
    out.push_back(number_list(v.data() + static_cast<size_t>(r) * static_cast<size_t>(dim),
                              static_cast<size_t>(dim), dtype));
  return out;
}

// A finite number of the dtype: the decimal rounded once to it (parse_value).
double read_number(const case_yaml::Item& x, DType dtype, const std::string& what) {
  if (!x.scalar) x.fail(what + " must be a number");
  const std::string s(x.text);
  char* end = nullptr;
  errno = 0;
  const double v = parse_value(dtype, s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) x.fail(what + " has a non-number '" + s + "'");
  if (!std::isfinite(v) || (errno == ERANGE && std::fabs(v) > 1))
    x.fail(fmt::format("{} = {} is not a finite {} value", what, s, dtype_name(dtype)));
  return v;
}

void read_numbers(const YAML::Node& list, DType dtype, const std::string& what, std::vector<double>& out) {
  case_yaml::for_each_item(list,
                           [&](const case_yaml::Item& x) { out.push_back(read_number(x, dtype, what)); });
}

std::vector<double> read_vector(const YAML::Node& map, const char* key, DType dtype) {
  const YAML::Node n = map[key];
  if (!n || !case_yaml::is_list(n))
    case_yaml::fail(n ? n : map, std::string("'") + key + "' must be a list of numbers");
  std::vector<double> out;
  read_numbers(n, dtype, std::string("'") + key + "' element", out);
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
    if (!case_yaml::is_list(row))
      case_yaml::fail(row, std::string("each row of '") + key + "' must be a list of numbers");
    const size_t size = case_yaml::list_size(row);
    if (dim >= 0 && static_cast<int>(size) != dim)
      case_yaml::fail(row, fmt::format("rows of '{}' differ in length ({} and {})", key, dim, size));
    dim = static_cast<int>(size);
    read_numbers(row, dtype, std::string("'") + key + "' element", out);
    if (out.size() > (1u << 24))
      case_yaml::fail(n, std::string("'") + key + "' is too large for a test case");
  }
  return out;
}

}  // namespace

// What to_yaml keeps, hashed value by value (rng::ContentHash): a
// transform's randomness, without building the YAML tree (its number texts
// were most of a run of the expression relations on small cases).
uint64_t Traits::content_hash(const Case& c) {
  const auto kept = [&c](double v) { return round_to(c.dtype, v); };  // as value_text writes it
  rng::ContentHash h(0x6c6eu);                                        // "ln"
  h.word(static_cast<uint64_t>(c.dtype)).real(round_to(eps_dtype(c.dtype), c.eps));
  h.word(static_cast<uint64_t>(c.rows)).word(static_cast<uint64_t>(c.dim));
  h.reals(c.x, kept).reals(c.gamma, kept).reals(c.beta, kept).reals(c.dy, kept);
  return h.value();
}

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
  c.eps = read_number(case_yaml::as_item(n["eps"]), eps_dtype(c.dtype), "'eps'");
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
  case_yaml::check_contract(n, validate(c));
  return c;
}

}  // namespace kprop::layernorm
