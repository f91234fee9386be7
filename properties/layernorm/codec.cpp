// The layernorm family's YAML codec.
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "kprop/case_yaml.h"
#include "properties/layernorm/family.h"

namespace kprop::layernorm {

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

// A finite number of the dtype: the decimal rounded once to it (parse_value).
double read_number(const YAML::Node& n, DType dtype, const std::string& what) {
  if (!n.IsScalar()) case_yaml::fail(n, what + " must be a number");
  const std::string& s = n.Scalar();
  char* end = nullptr;
  errno = 0;
  const double v = parse_value(dtype, s.c_str(), &end);
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
  case_yaml::check_contract(n, validate(c));
  return c;
}

}  // namespace kprop::layernorm
