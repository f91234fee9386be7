// Parsing YAML text that holds one document, with one-line errors.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kprop/errors.h"

namespace kprop {

// The text's one YAML document (null when the text is empty). Throws
// InputError at source:line:col on a parse error, prefixed by `what`
// ("invalid YAML", "corrupt corpus file"), and on a second non-empty
// document (after ---), which a loader taking the first would ignore:
// "a second YAML document; <holder> holds one". With aliases = false, an
// alias (*name) is an error too: "<what>: a YAML alias; <holder> holds none"
// (a file kprop writes, where a few nested aliases would otherwise expand
// into billions of nodes before anything reads them).
YAML::Node load_one_document(const std::string& text, const std::string& source, const std::string& what,
                             const std::string& holder, bool aliases = true);

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

// The items of a node that is one scalar (itself) or a list (its elements);
// nullopt for a map or null.
inline std::optional<std::vector<YAML::Node>> scalar_or_list(const YAML::Node& node) {
  if (node.IsScalar()) return std::vector<YAML::Node>{node};
  if (!node.IsSequence()) return std::nullopt;
  return std::vector<YAML::Node>(node.begin(), node.end());
}

// Distinct names, each one of `valid`: their indices in `valid`, in the
// items' order. Bad input goes to fail(node, message), which throws:
// "<subject> must be a <kind>" (not a scalar), "<subject>: unknown <kind>
// 'x'" with a did-you-mean, "<subject> lists 'x' twice". Used for every
// YAML list of names from a fixed set (choices, dtypes, special values).
template <typename Fail>
std::vector<size_t> distinct_names(const std::vector<YAML::Node>& items,
                                   const std::vector<std::string>& valid, const std::string& subject,
                                   const std::string& kind, Fail&& fail) {
  const auto fail_at = [&](const YAML::Node& at, const std::string& message) {
    fail(at, message);
    throw std::logic_error("distinct_names: fail() returned");  // it must throw
  };
  std::vector<size_t> out;
  for (const auto& item : items) {
    const std::string a_kind =
        (std::string("aeiou").find(kind.at(0)) == std::string::npos ? "a " : "an ") + kind;
    const auto name = scalar_as<std::string>(item, subject, a_kind.c_str(), fail_at);
    const auto found = std::find(valid.begin(), valid.end(), name);
    if (found == valid.end())
      fail_at(item, subject + ": unknown " + kind + " '" + name + "'" + suggestion(name, valid));
    const auto index = static_cast<size_t>(found - valid.begin());
    if (std::find(out.begin(), out.end(), index) != out.end())
      fail_at(item, subject + " lists '" + name + "' twice");
    out.push_back(index);
  }
  return out;
}

}  // namespace kprop
