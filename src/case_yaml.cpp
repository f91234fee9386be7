#include "kprop/case_yaml.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <limits>

namespace kprop::case_yaml {

void fail(const YAML::Node& node, const std::string& message) {
  const YAML::Mark m = node.Mark();
  throw CaseFormatError(m.is_null() ? 0 : m.line + 1, m.is_null() ? 0 : m.column + 1, message);
}

void check_contract(const YAML::Node& map, const std::string& why) {
  if (why.empty()) return;
  size_t n = 0;
  while (n < why.size() && (std::isalnum(static_cast<unsigned char>(why[n])) || why[n] == '_')) ++n;
  if (n > 0 && map.IsMap())
    if (const YAML::Node at = map[why.substr(0, n)]) fail(at, why);
  fail(map, why);
}

void expect_keys(const YAML::Node& map, std::initializer_list<const char*> keys, const std::string& what) {
  if (!map.IsMap()) fail(map, what + " must be a map");
  for (auto it = map.begin(); it != map.end(); ++it) {
    bool ok = false;
    for (const char* k : keys) ok = ok || it->first.Scalar() == k;
    if (!ok) fail(it->first, "unknown key '" + it->first.Scalar() + "' in " + what);
  }
}

YAML::Node real(double v) {
  if (std::isnan(v)) return YAML::Node(".nan");
  if (std::isinf(v)) return YAML::Node(v > 0 ? ".inf" : "-.inf");
  return YAML::Node(fmt::format("{}", v));
}

YAML::Node real_list(const std::vector<double>& values) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (double v : values) n.push_back(real(v));
  return n;
}

std::vector<double> read_reals(const YAML::Node& map, const char* key) {
  const YAML::Node n = map[key];
  if (!n || !n.IsSequence()) fail(n ? n : map, std::string("'") + key + "' must be a list of numbers");
  return read_real_list(n, std::string("'") + key + "'");
}

std::vector<double> read_real_list(const YAML::Node& n, const std::string& what) {
  if (!n.IsSequence()) fail(n, what + " must be a list of numbers");
  std::vector<double> out;
  for (const auto& x : n) {
    if (!x.IsScalar()) fail(x, what + " must be a list of numbers");
    const std::string& s = x.Scalar();
    if (s == ".nan" || s == ".NaN" || s == "nan")
      out.push_back(std::numeric_limits<double>::quiet_NaN());
    else if (s == ".inf" || s == "inf" || s == "+.inf")
      out.push_back(std::numeric_limits<double>::infinity());
    else if (s == "-.inf" || s == "-inf")
      out.push_back(-std::numeric_limits<double>::infinity());
    else {
      try {
        out.push_back(x.as<double>());
      } catch (const YAML::Exception&) {
        fail(x, what + " has a non-number '" + s + "'");
      }
    }
  }
  return out;
}

int significant_digits(double v, FloatType t) {
  if (v == 0 || !std::isfinite(v)) return 0;
  std::string digits;
  for (char ch : value_text(t, v)) {
    if (ch == 'e' || ch == 'E') break;
    if (ch >= '0' && ch <= '9') digits += ch;
  }
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 0;
  return static_cast<int>(digits.find_last_not_of('0') - first + 1);
}

}  // namespace kprop::case_yaml
