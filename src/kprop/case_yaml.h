// Helpers for a family's YAML case codec: decoding errors carry the node's
// line and column (the corpus loader adds the file name), and lists of
// numbers round-trip exactly.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
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

// ---- Lists of numbers, packed
// A case's long list of numbers (a tensor's row: a million elements at a
// real model's sizes) is one node, not one yaml-cpp node per element: those
// cost ~500 bytes and ~2 us each to build, emit and parse, and a finding on
// a 6M-element case took 7 GB and two minutes to store. A packed list is a
// scalar tagged kPackedTag whose text is the items joined by ", ", exactly
// what the flow sequence [a, b, ...] holds, so a corpus file is the same
// text either way (emit_yaml writes it as that sequence, and the corpus
// reader packs such sequences back, load_packed). Only items that YAML
// writes plain are packed (numbers, .inf, .nan): text_list falls back to a
// sequence for any other.
inline constexpr const char* kPackedTag = "!kprop/list";
// Lists shorter than this stay sequences (a short list costs little).
inline constexpr size_t kPackMin = 16;

bool is_packed(const YAML::Node& n);
// A sequence or a packed list.
bool is_list(const YAML::Node& n);
// Items of a list (0 for anything else).
size_t list_size(const YAML::Node& n);
// Whether YAML writes this item plain inside a flow sequence, so that a
// packed list round-trips: a number's text, .inf, .nan.
bool packable(std::string_view item);
// A list of `count` scalars, item i's text text(i): packed when long and
// every item packable, else a flow sequence.
YAML::Node text_list(size_t count, const std::function<std::string(size_t)>& text);

// One item of a list as for_each_item gives it: a scalar's text, or (in a
// sequence) a nested node.
struct Item {
  size_t index = 0;
  bool scalar = false;
  std::string_view text;             // the scalar's text ("" for a non-scalar)
  const YAML::Node* node = nullptr;  // the sequence's node (null in a packed list)
  int line = 0, column = 0;          // 1-based; 0 where unknown
  [[noreturn]] void fail(const std::string& message) const;
};
// A node as an Item (a scalar's text and its place), for code that reads a
// single number as it reads a list's.
Item as_item(const YAML::Node& n);
// Calls fn for each item of a list node (a sequence or a packed list), in order.
void for_each_item(const YAML::Node& list, const std::function<void(const Item&)>& fn);
// Calls fn on each node of the tree, a parent before its children and a
// map's key before its value; fn returning false skips the node's children.
void walk_tree(const YAML::Node& tree, const std::function<bool(const YAML::Node&)>& fn);
// A copy of the tree with every packed list a sequence of scalars, a node
// per number (the form packing replaced; bench/layernorm_corpus.cpp weighs
// the two).
YAML::Node unpacked(const YAML::Node& tree);
// A YAML document's text loaded by `load` (YAML::Load, load_one_document)
// with each one-line flow sequence of kPackMin or more packable items a
// packed list, built as one node (the corpus reader). Lists inside quoted,
// block and multi-line plain scalars and comments are left as they are, as
// is one after a tag or an anchor; text this scanner does not follow
// (complex keys, a flow collection opening a line) loads unpacked. Every
// mark stays where it was, and for_each_item gives each item its column.
YAML::Node load_packed(const std::string& text, const std::function<YAML::Node(const std::string&)>& load);
// The text load_packed parses: each such list `[a, b]` written `'a, b'`
// (the same length), the offset of each one's `[` added to `at`.
std::string pack_flow_lists(const std::string& text, std::vector<size_t>* at = nullptr);

// A scalar's text as yaml-cpp's as<double>() / as<int64_t>() read it
// (nullopt where they throw), without building a node for the common case.
std::optional<double> yaml_real(std::string_view text);
std::optional<long long> yaml_integer(std::string_view text);

template <typename T>
std::vector<T> read_list(const YAML::Node& map, const char* key) {
  const YAML::Node n = map[key];
  if (!n || !is_list(n)) fail(n ? n : map, std::string("'") + key + "' must be a list");
  std::vector<T> out;
  for_each_item(n, [&](const Item& x) {
    try {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        const std::optional<long long> v = x.scalar ? yaml_integer(x.text) : std::nullopt;
        if (!v || *v < static_cast<long long>(std::numeric_limits<T>::min()) ||
            (*v > 0 && static_cast<unsigned long long>(*v) > std::numeric_limits<T>::max()))
          throw YAML::TypedBadConversion<T>(YAML::Mark::null_mark());
        out.push_back(static_cast<T>(*v));
      } else if (x.node) {
        out.push_back(x.node->as<T>());
      } else {
        out.push_back(YAML::Node(std::string(x.text)).as<T>());
      }
    } catch (const YAML::Exception&) {
      x.fail(std::string("'") + key + "' has an element of the wrong type");
    }
  });
  return out;
}

template <typename T>
YAML::Node list(const std::vector<T>& values) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    return text_list(values.size(), [&](size_t i) {
      if constexpr (std::is_integral_v<T>)
        return std::to_string(values[i]);  // yaml-cpp's text for an integer
      else
        return YAML::Node(values[i]).Scalar();
    });
  } else {
    YAML::Node n(YAML::NodeType::Sequence);
    for (const auto& v : values) n.push_back(v);
    return n;
  }
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
