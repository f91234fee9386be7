// Helpers for a family's YAML case codec: decoding errors carry the node's
// line and column (the corpus loader adds the file name), and lists of
// numbers round-trip exactly.
#pragma once

#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "kprop/errors.h"
#include "kprop/float_type.h"

namespace kprop::case_yaml {

[[noreturn]] void fail(const YAML::Node& node, const std::string& message);
// A case that breaks its family's contract (`why`, the family's validate();
// "" if none) fails at the key the reason begins with ("k must be in [1,
// vocab]" at k:), else at the case map.
void check_contract(const YAML::Node& map, const std::string& why);

// The map has only these keys (and is a map).
void expect_keys(const YAML::Node& map, std::initializer_list<const char*> keys, const std::string& what);

template <typename T>
T read(const YAML::Node& map, const char* key) {
  const YAML::Node n = map[key];
  if (!n) fail(map, std::string("missing '") + key + "'");
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail(n, std::string("'") + key + "' has the wrong type");
  }
}

template <typename T>
T read_or(const YAML::Node& map, const char* key, T fallback) {
  return map[key] ? read<T>(map, key) : fallback;
}

template <typename T>
std::vector<T> read_list(const YAML::Node& map, const char* key) {
  const YAML::Node n = map[key];
  if (!n || !n.IsSequence()) fail(n ? n : map, std::string("'") + key + "' must be a list");
  std::vector<T> out;
  for (const auto& x : n) {
    try {
      out.push_back(x.as<T>());
    } catch (const YAML::Exception&) {
      fail(x, std::string("'") + key + "' has an element of the wrong type");
    }
  }
  return out;
}

template <typename T>
YAML::Node list(const std::vector<T>& values) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (const auto& v : values) n.push_back(v);
  return n;
}

// A double as the shortest text that reads back bit-exactly (inf/nan as YAML's .inf/.nan).
YAML::Node real(double v);
// A list of them.
YAML::Node real_list(const std::vector<double>& values);
std::vector<double> read_reals(const YAML::Node& map, const char* key);
// The same for a list node itself; `what` names it in errors.
std::vector<double> read_real_list(const YAML::Node& list, const std::string& what);

// Significant decimal digits of v's shortest text that reads back in the
// float type (value_text: f64, f32, f16, bf16): 0 for 0 and non-finite
// values. Shrinkers that simplify numbers step toward fewer digits
// (layernorm, op).
int significant_digits(double v, FloatType t);

}  // namespace kprop::case_yaml
