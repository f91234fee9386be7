// Parsing YAML text that holds one document, with one-line errors.
#pragma once

#include <yaml-cpp/yaml.h>

#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kprop {

// The text's one YAML document (null when the text is empty). Throws
// InputError at source:line:col on a parse error, prefixed by `what`
// ("invalid YAML", "corrupt corpus file"), and on a second non-empty
// document (after ---), which a loader taking the first would ignore:
// "a second YAML document; <holder> holds one".
YAML::Node load_one_document(const std::string& text, const std::string& source, const std::string& what,
                             const std::string& holder);

// A map's entries in document order, every key a scalar named once. Bad
// input goes to fail(node, message), which throws (the caller's error with
// the node's file:line:col): "<what> must be a map", "keys of <what> must be
// names", "duplicate key 'k' in <what>".
template <typename Fail>
std::vector<std::pair<YAML::Node, YAML::Node>> map_entries(const YAML::Node& map, const std::string& what,
                                                           Fail&& fail) {
  const auto fail_at = [&](const YAML::Node& at, const std::string& message) {
    fail(at, message);
    throw std::logic_error("map_entries: fail() returned");  // it must throw
  };
  if (!map.IsMap()) fail_at(map, what + " must be a map");
  std::vector<std::pair<YAML::Node, YAML::Node>> out;
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) fail_at(it->first, "keys of " + what + " must be names");
    if (!seen.insert(it->first.Scalar()).second)
      fail_at(it->first, "duplicate key '" + it->first.Scalar() + "' in " + what);
    out.emplace_back(it->first, it->second);
  }
  return out;
}

// A scalar node as T, through fail(node, message) (which throws) when it is
// not one: "<subject> must be <kind>" (a map or list), "<subject> must be
// <kind>, got 'text'" (a scalar that does not convert).
template <typename T, typename Fail>
T scalar_as(const YAML::Node& node, const std::string& subject, const char* kind, Fail&& fail) {
  std::string got;
  if (node.IsScalar()) {
    try {
      return node.as<T>();
    } catch (const YAML::Exception&) {
      got = ", got '" + node.Scalar() + "'";
    }
  }
  fail(node, subject + " must be " + kind + got);
  throw std::logic_error("scalar_as: fail() returned");  // it must throw
}

}  // namespace kprop
