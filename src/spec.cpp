#include "kprop/spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "kprop/case_yaml.h"
#include "kprop/external.h"
#include "kprop/rng.h"
#include "kprop/yaml_load.h"

namespace kprop {
namespace {

class Loader {
 public:
  explicit Loader(std::string file) : file_(std::move(file)) {}

  Mark mark(const YAML::Node& node) const {
    const YAML::Mark m = node.Mark();
    if (m.is_null()) return {file_, 0, 0};
    return {file_, m.line + 1, m.column + 1};
  }
  [[noreturn]] void fail(const YAML::Node& node, const std::string& message) const {
    throw InputError(mark(node), message);
  }

  // Map keys in order, rejecting duplicates and non-scalar keys.
  std::vector<std::pair<std::string, YAML::Node>> entries(const YAML::Node& map,
                                                          const std::string& what) const {
    const auto fail_at = [&](const YAML::Node& node, const std::string& message) { fail(node, message); };
    std::vector<std::pair<std::string, YAML::Node>> out;
    for (auto& [key, value] : map_entries(map, what, fail_at)) out.emplace_back(key.Scalar(), value);
    return out;
  }

  template <typename T>
  T scalar(const YAML::Node& node, const std::string& key, const char* what) const {
    return scalar_as<T>(node, "'" + key + "'", what,
                        [&](const YAML::Node& at, const std::string& m) { fail(at, m); });
  }

  void check_bounds(const YAML::Node& node, const Field& f, const std::string& key, double v) const {
    if (std::isnan(v) || v < f.min || v > f.max)
      fail(node, fmt::format("'{}' = {} is out of bounds [{}, {}]", key, format_number(f, v),
                             format_number(f, f.min), format_number(f, f.max)));
  }

  // An integer of field f. A number past what an integer holds
  // (99999999999999999999, 1e20) is out of f's bounds, said so with them
  // (it read "must be an integer").
  int64_t integer_of(const YAML::Node& node, const Field& f, const std::string& key) const {
    int64_t v = 0;
    double d = 0;
    if (node.IsScalar() && !YAML::convert<int64_t>::decode(node, v) &&
        YAML::convert<double>::decode(node, d) && (d < f.min || d > f.max))
      fail(node, fmt::format("'{}' = {} is out of bounds [{}, {}]", key, node.Scalar(),
                             format_number(f, f.min), format_number(f, f.max)));
    return scalar<int64_t>(node, key, "an integer");
  }

  template <typename T>
  T number_of(const YAML::Node& node, const Field& f, const std::string& key, const char* what) const {
    if constexpr (std::is_same_v<T, int64_t>)
      return integer_of(node, f, key);
    else
      return scalar<T>(node, key, what);
  }

  template <typename T, typename Range>
  Range range(const YAML::Node& node, const Field& f, const std::string& key, const char* what) const {
    Range r;
    if (node.IsScalar()) {
      r.lo = r.hi = number_of<T>(node, f, key, what);
    } else if (node.IsSequence() && node.size() == 2) {
      r.lo = number_of<T>(node[0], f, key, what);
      r.hi = number_of<T>(node[1], f, key, what);
    } else {
      fail(node, fmt::format("'{}' must be a range [lo, hi] of {}s or a single value", key, what));
    }
    if (r.lo > r.hi)
      fail(node, fmt::format("'{}' is an inverted range [{}, {}]: lo must be <= hi", key,
                             fmt::format("{}", r.lo), fmt::format("{}", r.hi)));
    check_bounds(node, f, key, static_cast<double>(r.lo));
    check_bounds(node, f, key, static_cast<double>(r.hi));
    return r;
  }

  // A list of distinct integers (one_of, offsets), each checked by `check`
  // (and, given `bounds`, a number past an integer said to be out of them).
  std::vector<int64_t> int_list(const YAML::Node& node, const std::string& key,
                                const std::function<void(const YAML::Node&, int64_t)>& check,
                                const Field* bounds = nullptr) const {
    if (!node.IsSequence()) fail(node, fmt::format("'{}' must be a list of integers", key));
    if (node.size() == 0) fail(node, fmt::format("'{}' is empty", key));
    std::vector<int64_t> out;
    for (const auto& item : node) {
      const auto v = bounds ? integer_of(item, *bounds, key) : scalar<int64_t>(item, key, "an integer");
      if (std::find(out.begin(), out.end(), v) != out.end())
        fail(item, fmt::format("'{}' lists {} twice", key, v));
      check(item, v);
      out.push_back(v);
    }
    return out;
  }

  // The map form of an integer range (values.h, IntRange):
  // {one_of: [..]} | {range: [lo, hi], multiple_of: M, offsets: [..]}.
  IntRange constrained_range(const YAML::Node& node, const Field& f, const std::string& key) const {
    const std::vector<std::string> keys = {"range", "one_of", "multiple_of", "offsets"};
    for (const auto& [k, v] : entries(node, "'" + key + "'")) {
      (void)v;
      if (std::find(keys.begin(), keys.end(), k) == keys.end())
        fail(key_of(node, k), fmt::format("unknown key '{}' in '{}'{}", k, key, suggestion(k, keys)));
    }
    IntRange r;
    const YAML::Node range_node = node["range"], one_of = node["one_of"], multiple = node["multiple_of"],
                     offsets = node["offsets"];
    if (range_node) r = range<int64_t, IntRange>(range_node, f, key + ".range", "integer");
    if (one_of) {
      if (multiple || offsets)
        fail(key_of(node, multiple ? "multiple_of" : "offsets"),
             fmt::format("'{}' takes one_of or multiple_of/offsets, not both", key));
      r.one_of = int_list(
          one_of, key + ".one_of",
          [&](const YAML::Node& item, int64_t v) {
            check_bounds(item, f, key + ".one_of", static_cast<double>(v));
            if (range_node && (v < r.lo || v > r.hi))
              fail(item,
                   fmt::format("'{}.one_of' value {} is outside its range [{}, {}]", key, v, r.lo, r.hi));
          },
          &f);
      std::sort(r.one_of.begin(), r.one_of.end());
      r.lo = r.one_of.front();
      r.hi = r.one_of.back();
      return r;
    }
    if (!range_node)
      fail(node, fmt::format("'{}' needs range: [lo, hi] (with multiple_of: M) or one_of: [values]", key));
    if (multiple) {
      r.multiple_of = scalar<int64_t>(multiple, key + ".multiple_of", "an integer");
      if (r.multiple_of < 1)
        fail(multiple, fmt::format("'{}.multiple_of' = {} must be >= 1", key, r.multiple_of));
    }
    if (offsets) {
      if (!multiple) fail(key_of(node, "offsets"), fmt::format("'{}.offsets' needs multiple_of", key));
      const int64_t m = r.multiple_of;
      r.offsets = int_list(offsets, key + ".offsets", [&](const YAML::Node& item, int64_t v) {
        if (v <= -m || v >= m)
          fail(item, fmt::format("'{}.offsets' value {} must be within ({}, {}) (multiple_of {})", key, v, -m,
                                 m, m));
      });
    }
    if (r.count() == 0) fail(node, fmt::format("'{}' = {} holds no allowed value", key, format_value(r)));
    return r;
  }

  // The key node of `key` in map `map` (for an error about the key itself).
  static YAML::Node key_of(const YAML::Node& map, const std::string& key) {
    for (auto it = map.begin(); it != map.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == key) return it->first;
    return map[key];
  }

  // Whether `key` is f's key or one of its old names.
  static bool names_field(const Field& f, const std::string& key) {
    return f.key == key || std::find(f.aliases.begin(), f.aliases.end(), key) != f.aliases.end();
  }
  // The key under which map `node` gives f (its own or an old name; "" if none).
  std::string given_as(const YAML::Node& node, const Field& f) const {
    std::string found;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar() || !names_field(f, it->first.Scalar())) continue;
      if (!found.empty())
        fail(it->first,
             fmt::format("'{}' and '{}' name one key ('{}' is the old name of '{}'); give it once", found,
                         it->first.Scalar(), f.key == found ? it->first.Scalar() : found, f.key));
      found = it->first.Scalar();
    }
    return found;
  }
  // f's value in map `node`, under its key or an old name (undefined, as
  // node[f.key] is, when it gives neither).
  YAML::Node value_of(const YAML::Node& node, const Field& f) const {
    const std::string key = given_as(node, f);
    return node[key.empty() ? f.key : key];
  }

  // `skip` is a key that belongs to the caller (an invariant's `name`).
  void parse_fields(const YAML::Node& node, const Schema& schema, const std::string& prefix,
                    const std::string& what, Values& out, const std::string& skip = "") const {
    if (node && !node.IsNull()) {
      std::vector<std::string> valid;
      for (const auto& f : schema) valid.push_back(f.key);
      for (const auto& [key, value] : entries(node, what)) {
        (void)value;
        bool known = key == skip && !skip.empty();
        for (const auto& f : schema) known = known || names_field(f, key);
        if (!known) {
          // find the key node again for its mark
          for (auto it = node.begin(); it != node.end(); ++it)
            if (it->first.Scalar() == key)
              fail(it->first,
                   "unknown key '" + key + "' in " + what +
                       (valid.empty() ? std::string("; it takes no keys") : suggestion(key, valid)));
        }
      }
    }
    for (const auto& f : schema) {
      const std::string key = prefix.empty() ? f.key : prefix + "." + f.key;
      const bool in_map = node && node.IsMap();
      const YAML::Node value = in_map ? value_of(node, f) : YAML::Node();
      if (f.kind == FieldKind::map) {
        // `x:` with nothing after it (its keys commented out): in a profile
        // it replaced the base's map, every key back to its default.
        if (in_map && value && value.IsNull())
          fail(key_of(node, given_as(node, f)),
               fmt::format("'{}' in {} is empty: give its keys, or remove it", key, what));
        parse_fields(value, f.children, key, key, out);
        continue;
      }
      if (!in_map || !value) {
        out.set(key, f.fallback);
        continue;
      }
      // `trials:` with nothing after it: a value left out, not the default.
      if (value.IsNull())
        fail(key_of(node, given_as(node, f)), "'" + key + "' has no value: give one, or remove the key");
      out.set(key, parse_value(value, f, key));
    }
  }

  Value parse_value(const YAML::Node& node, const Field& f, const std::string& key) const {
    switch (f.kind) {
      case FieldKind::boolean:
        return scalar<bool>(node, key, "true or false");
      case FieldKind::integer: {
        const auto v = integer_of(node, f, key);
        check_bounds(node, f, key, static_cast<double>(v));
        return v;
      }
      case FieldKind::real: {
        const auto v = scalar<double>(node, key, "a number");
        check_bounds(node, f, key, v);
        return v;
      }
      case FieldKind::string: {
        const auto v = scalar<std::string>(node, key, "a string");
        if (!f.allowed.empty() && std::find(f.allowed.begin(), f.allowed.end(), v) == f.allowed.end())
          fail(node, fmt::format("'{}' = '{}' is not allowed{}", key, v, suggestion(v, f.allowed)));
        return v;
      }
      case FieldKind::int_range:
        if (node.IsMap()) return constrained_range(node, f, key);
        return range<int64_t, IntRange>(node, f, key, "integer");
      case FieldKind::real_range:
        return range<double, RealRange>(node, f, key, "number");
      case FieldKind::choices: {
        const auto items = scalar_or_list(node);
        if (!items)
          fail(node, fmt::format("'{}' must be a list of choices from {{{}}}", key, join(f.allowed)));
        // A list that may be empty by default (e.g. run.suppress_health_check) may be given empty.
        if (items->empty() && !std::get<Choices>(f.fallback).empty())
          fail(node, fmt::format("'{}' is empty; pick from {{{}}}", key, join(f.allowed)));
        Choices picked;
        for (size_t i : distinct_names(*items, f.allowed, "'" + key + "'", "choice",
                                       [&](const YAML::Node&at, const std::string&m) { fail(at, m); }))
          picked.push_back(f.allowed[i]);
        return picked;
      }
      case FieldKind::map:
        break;
    }
    fail(node, "internal: unhandled field kind");
  }

  Spec load(const YAML::Node& root, const std::string& profile);
  // The names of root's `profiles:`, each checked for its form.
  std::vector<std::string> profile_names(const YAML::Node& root) const;
  // `base` with the keys of `over` replacing its own; a map field (by
  // `schema`) present in both merges key by key. Nodes keep their marks.
  YAML::Node overlay(const YAML::Node& base, const YAML::Node& over, const Schema& schema) const;
  // Returns, when --domain overrides the declaration, the family as the spec
  // declares it without --domain (null otherwise): the spec's own domain,
  // which the invariants it lists must be able to observe.
  std::shared_ptr<const Family> declared_family(const YAML::Node& root, const YAML::Node& profile_domain,
                                                const std::string& family_name, Spec& spec) const;
  // The spec's `let: {NAME: EXPR}` (docs/SPEC.md "Named subexpressions"),
  // each name checked for its form; check_lets() then compiles each on the
  // family's tensors and the other lets (in any order, no cycle).
  expr::TensorInfos lets_of(const YAML::Node& root) const;
  void check_lets(const YAML::Node& root, const Family& family) const;

  const std::string* text = nullptr;  // the spec's text, for positions inside expressions
  YAML::Node cli_domain;              // prop_runner --domain, over the domain (and the profile's)
  int64_t cli_max_case_mb = 0;        // prop_runner --max-case-mb, over run.max_case_mb (0: none)

 private:
  std::string file_;
};

// ---------------------------------------------------------------- expression invariants
// Where byte `offset` of scalar `node`'s value lies in the file, so an error
// inside an expression points at its column; the scalar's own mark when its
// value is not in the text verbatim (escapes, a folded block scalar).
// Where `offset` of a block scalar's value (`|` or `>`, the indicator at
// `start`) stands in the source: its lines, less the block's indentation,
// joined as YAML joins them (`|`: line breaks; `>`: a space between two lines
// of the block's own indentation, a line break next to a more-indented one).
// nullopt unless that join gives the value back (blank lines, comments,
// escapes: the caller falls back to the node's own position).
// A line ends at '\n' or "\r\n" (the '\r' is no part of its content). The
// block's indentation is its first line's, less the spaces the value starts
// with: an indentation indicator (`|2`) keeps a first line's further ones.
std::optional<std::pair<int, int>> block_position(const std::string& src, size_t start,
                                                  const std::string& value, size_t offset) {
  const bool folded = src[start] == '>';
  size_t line_at = src.find('\n', start);
  if (line_at == std::string::npos) return std::nullopt;
  ++line_at;
  const int first_line =
      static_cast<int>(std::count(src.begin(), src.begin() + static_cast<long>(line_at), '\n')) + 1;
  const size_t kept = std::min(value.find_first_not_of(' '), value.size());  // the first line's own spaces
  size_t indent = std::string::npos;
  std::string joined;
  std::vector<size_t> lines;  // where each line's content starts in `joined`
  bool previous_more = false;
  for (size_t at = line_at; at < src.size();) {
    const size_t next = src.find('\n', at);
    size_t end = next == std::string::npos ? src.size() : next;
    if (end > at && src[end - 1] == '\r') --end;
    const size_t lead = src.find_first_not_of(' ', at);
    if (lead >= end) break;  // a blank line: not mapped
    if (indent == std::string::npos) {
      if (lead - at < kept) return std::nullopt;
      indent = lead - at - kept;
    }
    if (lead - at < indent) break;  // the block ended
    const bool more = lead - at > indent;
    if (!lines.empty()) joined += folded && !more && !previous_more ? " " : "\n";
    lines.push_back(joined.size());
    joined.append(src, at + indent, end - at - indent);
    previous_more = more;
    if (next == std::string::npos) break;
    at = next + 1;
  }
  std::string want = value;
  while (!want.empty() && want.back() == '\n') want.pop_back();
  if (lines.empty() || joined != want || offset > joined.size()) return std::nullopt;
  size_t k = lines.size() - 1;
  while (k > 0 && lines[k] > offset) --k;
  return std::pair{first_line + static_cast<int>(k), static_cast<int>(indent + (offset - lines[k])) + 1};
}

// Byte `p` of the source as file:line:col.
Mark position_of(const Mark& fallback, const std::string& src, size_t p) {
  const size_t line_start = src.rfind('\n', p == 0 ? 0 : p - 1);
  const int line = static_cast<int>(std::count(src.begin(), src.begin() + static_cast<long>(p), '\n')) + 1;
  const size_t col = line_start == std::string::npos || p == 0 ? p : p - line_start - 1;
  return {fallback.file, line, static_cast<int>(col) + 1};
}

// Where byte `offset` of a plain or quoted scalar continued on later lines
// lies in the source (from `start`, its first byte or quote): YAML folds
// each line break with the blanks around it to a space (or a blank line to a
// line break), so the value is not found in the source as it is. nullopt
// where the value does not follow the source (an escape).
std::optional<size_t> folded_position(const std::string& src, size_t start, const std::string& value,
                                      size_t offset) {
  size_t i = start;
  if (i < src.size() && (src[i] == '"' || src[i] == '\'')) ++i;
  const auto blank = [&](size_t k) { return k < src.size() && std::strchr(" \t\r\n", src[k]); };
  for (size_t j = 0; j < offset;) {
    if (j >= value.size()) return std::nullopt;
    if (i < src.size() && value[j] == src[i]) {
      ++i, ++j;
      continue;
    }
    if (value[j] != ' ' && value[j] != '\n') return std::nullopt;
    // A fold: the source's blanks with a line break in them.
    size_t k = i;
    bool broken = false;
    for (; blank(k); ++k) broken = broken || src[k] == '\n';
    if (!broken) return std::nullopt;
    i = k;
    if (value[j] == ' ')
      ++j;
    else
      while (j < value.size() && value[j] == '\n') ++j;
  }
  return i <= src.size() ? std::optional<size_t>(i) : std::nullopt;
}

Mark expression_mark(const Loader& l, const YAML::Node& node, size_t offset) {
  const Mark fallback = l.mark(node);
  if (!l.text || node.Mark().is_null() || node.Mark().pos < 0) return fallback;
  const std::string& src = *l.text;
  const size_t start = static_cast<size_t>(node.Mark().pos);
  if (start < src.size() && (src[start] == '|' || src[start] == '>')) {
    if (const auto at = block_position(src, start, node.Scalar(), offset))
      return {fallback.file, at->first, at->second};
    return fallback;
  }
  const size_t at = src.find(node.Scalar(), start);
  if (at == std::string::npos) {
    if (const auto p = folded_position(src, start, node.Scalar(), offset))
      return position_of(fallback, src, *p);
    return fallback;
  }
  for (size_t i = start; i < at; ++i)  // only a quote or a block indicator may come first
    if (!std::strchr("\"'|>-+0123456789 \t\r\n", src[i])) return fallback;
  return position_of(fallback, src, std::min(at + offset, src.size()));
}

// Names a folder (corpus/<spec>/): at most 100 characters, well inside a
// file name's 255 bytes.
bool safe_name(const std::string& s) {
  if (s.empty() || s[0] == '.' || s.size() > 100) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

// `{name: N, expect: EXPR, when: EXPR, description: TEXT}`, checked against
// the family's named tensors.
InvariantUse expression_invariant(const Loader& l, const YAML::Node& item, const YAML::Node& name_node,
                                  const std::string& name, const Family& family,
                                  const expr::TensorInfos& lets) {
  const std::vector<std::string> keys = {"name", "expect", "when", "description", "transform"};
  // Its name is a report row, a corpus file's `invariant:`, an --invariant
  // value and a pytest item id: a name as the spec's own.
  if (!safe_name(name))
    l.fail(name_node,
           "invariant name '" + name +
               "' must use letters, digits, '_', '-', '.', at most 100 of them (not starting with '.')");
  l.entries(item, "expression invariant " + name);  // keys are names, each once
  for (auto it = item.begin(); it != item.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      l.fail(it->first,
             fmt::format("unknown key '{}' in expression invariant {}{}", key, name, suggestion(key, keys)));
  }
  if (family.find_invariant(name) >= 0) {
    // A built-in's entry with `when:` (and no `expect:`) came here: it is
    // no expression, and built-ins take no precondition.
    if (!item["expect"] && item["when"])
      l.fail(item["when"],
             fmt::format("'when' is for expression invariants: the built-in invariant '{}' of {} "
                         "takes none (its own conditions decide which cases it checks)",
                         name, family.name()));
    l.fail(name_node, fmt::format("'{}' names a built-in invariant of {}; give the expression its own name",
                                  name, family.name()));
  }
  if (!item["expect"]) l.fail(item, fmt::format("expression invariant '{}' needs 'expect: EXPR'", name));
  if (family.tensor_infos().empty())
    l.fail(item["expect"],
           fmt::format("family {} publishes no named tensors: it takes no expression invariants",
                       family.name()));
  // `transform: NAME` or `transform: {NAME: {params}}`: a metamorphic
  // relation; its expressions may also read "transformed.*" (every tensor of
  // the family, on the derived case) and the transform's "transform.*".
  std::optional<ExpressionInvariant::Transform> transform;
  expr::TensorInfos infos = family.tensor_infos();
  for (const auto& let : lets)  // (a declared family's own infos hold them already)
    if (std::none_of(infos.begin(), infos.end(),
                     [&](const expr::TensorInfo& t) { return t.name == let.name; }))
      infos.push_back(let);
  if (const YAML::Node t = item["transform"]) {
    std::vector<std::string> valid;
    for (const auto& info : family.transforms()) valid.push_back(info.name);
    if (valid.empty())
      l.fail(t, fmt::format("family {} exports no transforms (metamorphic relations)", family.name()));
    YAML::Node name_at = t, params_at;
    if (t.IsMap()) {
      const auto items = l.entries(t, "transform of invariant " + name);
      if (items.size() != 1)
        l.fail(t, "transform must name one transform: NAME or {NAME: {params}}; valid: " + join(valid));
      auto it = t.begin();
      name_at.reset(it->first);  // rebinds (operator= would write into the node)
      params_at.reset(it->second);
    }
    const auto tname = l.scalar<std::string>(name_at, "transform", "a transform name");
    const auto found = std::find(valid.begin(), valid.end(), tname);
    if (found == valid.end())
      l.fail(name_at, fmt::format("unknown transform '{}' for family {}{}", tname, family.name(),
                                  suggestion(tname, valid)));
    const auto index = static_cast<size_t>(found - valid.begin());
    const TransformInfo& info = family.transforms()[index];
    transform = ExpressionInvariant::Transform{index, tname, {}};
    l.parse_fields(params_at, info.params, "", "transform " + tname, transform->params);
    // Every parameter exactly (format_value prints reals to 6 digits).
    transform->key = tname;
    for (const auto& [param, value] : transform->params.all()) {
      const double* real = std::get_if<double>(&value);
      const RealRange* range = std::get_if<RealRange>(&value);
      transform->key += " " + param + "=" +
                        (real    ? fmt::format("{}", *real)
                         : range ? fmt::format("[{}, {}]", range->lo, range->hi)
                                 : format_value(value));
    }
    // The dims the transform changes (TransformInfo::changes_dims: a
    // declared op's slice_DIM keeps a run of DIM's indices) are the derived
    // case's own, transformed.DIM, so `close(transformed.target.y,
    // target.y)` is refused as [transformed.T, D] vs [T, D] (it loaded, and
    // broadcast a one-row slice against every row). So is the transform's
    // index along DIM (transform.index: [transformed.DIM], what
    // target.y[transform.index] then has).
    const expr::TensorInfos own = infos;
    for (const auto& tensor : own) {
      if (!tensor.definition.empty()) continue;  // a let is over the case itself (no transformed.NAME)
      expr::TensorInfo derived = tensor;
      derived.name = "transformed." + tensor.name;
      derived.shape = info.derived_shape(tensor.shape);
      derived.meaning = tensor.meaning + " (on the transformed case)";
      infos.push_back(std::move(derived));
    }
    for (expr::TensorInfo tensor : info.published()) infos.push_back(std::move(tensor));
  }
  auto compile = [&](const char* key) {
    const YAML::Node n = item[key];
    const auto text = l.scalar<std::string>(n, key, "an expression");
    try {
      expr::Expression e = expr::Expression::compile(text, infos);
      if (e.dtype() != expr::DType::boolean)
        throw expr::ExprError(0, fmt::format("must be boolean (a comparison, close(), all(...)); `{}` is {}",
                                             text, expr::dtype_name(e.dtype())));
      return e;
    } catch (const expr::ExprError& err) {
      throw InputError(expression_mark(l, n, err.offset),
                       fmt::format("invariant '{}', {}: {}", name, key, err.what()));
    }
  };
  auto inv = std::make_shared<ExpressionInvariant>(
      ExpressionInvariant{compile("expect"), std::nullopt, "", l.mark(item), {}, std::move(transform)});
  if (item["when"]) inv->when = compile("when");
  // An expectation that reads no output of the target holds or breaks
  // whatever the kernel does: it would count among the invariants held
  // without checking the kernel (a failure of it is the spec's own error).
  if (const auto& read = inv->expect.names();
      std::none_of(read.begin(), read.end(), [](const std::string& n) { return expr::is_target_name(n); }))
    l.fail(item["expect"],
           fmt::format("invariant '{}', expect: `{}` reads no output of the target (target.*), "
                       "so no kernel can fail it; compare a target tensor",
                       name, inv->expect.shown()));
  if (item["description"])
    inv->description = l.scalar<std::string>(item["description"], "description", "a string");
  std::set<std::string> names(inv->expect.names().begin(), inv->expect.names().end());
  if (inv->when) names.insert(inv->when->names().begin(), inv->when->names().end());
  inv->names.assign(names.begin(), names.end());
  InvariantUse use;
  use.name = name;
  use.expression = std::move(inv);
  return use;
}

std::string required_string(const Loader& l, const YAML::Node& root, const std::string& key) {
  const YAML::Node n = root[key];
  if (!n || n.IsNull()) l.fail(root, "missing required key '" + key + "'");
  return l.scalar<std::string>(n, key, "a name");
}

// The key node of `key` in map `root` (its position: where an error about
// the whole section points).
YAML::Node key_node(const YAML::Node& root, const std::string& key) {
  for (auto it = root.begin(); it != root.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->first;
  return root[key];
}

// `family: F` where F is declared by the spec (DeclaredFamily): builds the
// spec's own Family from its section; other declared sections are refused.
std::shared_ptr<const Family> Loader::declared_family(const YAML::Node& root,
                                                      const YAML::Node& profile_domain,
                                                      const std::string& family_name, Spec& spec) const {
  std::shared_ptr<const Family> own;
  for (const auto& d : declared_families()) {
    if (d.family != family_name) {
      if (root[d.key])
        fail(key_node(root, d.key), fmt::format("'{}:' belongs to family: {}", d.key, d.family));
      continue;
    }
    if (root["domain"])  // a profile's domain: and --domain override the declaration
      fail(key_node(root, "domain"),
           fmt::format("family {} declares its domain under '{}:' (its dims, dtypes, attrs); a top-level "
                       "'domain:' is not read (a profile's domain: or --domain overrides the declaration)",
                       d.family, d.key));
    const YAML::Node section = root[d.key];
    if (!section || section.IsNull())
      fail(root["family"],
           fmt::format("family {} needs its '{}:' section declaring the kernel", d.family, d.key));
    DeclaredFamilyContext context{spec.name, [this](const YAML::Node& n, size_t offset) {
                                    return offset == 0 || !n.IsScalar() ? mark(n)
                                                                        : expression_mark(*this, n, offset);
                                  }};
    context.lets = lets_of(root);
    if (const YAML::Node lets = root["let"]) context.let_section.reset(lets);
    if (profile_domain && !profile_domain.IsNull()) context.profile_domain = profile_domain;
    if (cli_domain.IsMap() && cli_domain.size() > 0) {
      own = d.build(section, context);
      context.domain = cli_domain;
      context.domain_mark = [](const YAML::Node& n, size_t) { return Loader("--domain").mark(n); };
    }
    spec.declared_family = d.build(section, context);
    spec.family = spec.declared_family.get();
  }
  return own;
}

expr::TensorInfos Loader::lets_of(const YAML::Node& root) const {
  expr::TensorInfos lets;
  const YAML::Node section = root["let"];
  if (!section) return lets;
  if (section.IsNull()) fail(key_of(root, "let"), "'let' is empty: give NAME: EXPR entries, or remove it");
  if (!section.IsMap()) fail(section, "let must be a map {NAME: EXPR}");
  static const std::set<std::string> reserved = {
      "target", "reference", "naive", "floor",         "transformed",   "transform", "and",
      "or",     "not",       "true",  "false",         "True",          "False",     "None",
      "inf",    "nan",       "close", "unit_roundoff", "store_roundoff"};
  (void)entries(section, "let");  // keys are names, each once
  for (auto it = section.begin(); it != section.end(); ++it) {
    const YAML::Node key = it->first, value = it->second;
    const std::string& name = key.Scalar();
    bool ok = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
    for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) fail(key, fmt::format("let '{}' must be a name (letters, digits, '_'; no dots)", name));
    if (reserved.count(name))
      fail(key, fmt::format("'{}' is reserved in expressions; pick another name", name));
    const auto text = scalar<std::string>(value, "let " + name, "an expression");
    if (text.find_first_not_of(" \t\r\n") == std::string::npos)
      fail(value, fmt::format("let {} is empty", name));
    lets.push_back({name, {}, expr::DType::real, "let: " + text, {}, text});
  }
  return lets;
}

void Loader::check_lets(const YAML::Node& root, const Family& family) const {
  expr::TensorInfos infos;
  for (const auto& t : family.tensor_infos())
    if (t.definition.empty()) infos.push_back(t);
  const expr::TensorInfos lets = lets_of(root);
  for (const auto& let : lets)
    for (const auto& t : infos)
      if (t.name == let.name)
        fail(Loader::key_of(root["let"], let.name),
             fmt::format("let '{}' is already a tensor of family {} ({}); pick another name", let.name,
                         family.name(), t.meaning));
  infos.insert(infos.end(), lets.begin(), lets.end());  // in any order; a cycle is an error
  for (const auto& let : lets) {
    const YAML::Node value = root["let"][let.name];
    try {
      (void)expr::Expression::compile(let.definition, infos);
    } catch (const expr::ExprError& err) {
      throw InputError(expression_mark(*this, value, err.offset),
                       fmt::format("let {}: {}", let.name, err.what()));
    }
  }
}

std::vector<std::string> Loader::profile_names(const YAML::Node& root) const {
  std::vector<std::string> names;
  const YAML::Node profiles = root["profiles"];
  if (!profiles || profiles.IsNull()) return names;
  const std::vector<std::string> keys = {"description", "domain", "run", "mutants", "skip_invariants"};
  for (const auto& [name, body] : entries(profiles, "profiles")) {
    if (!safe_name(name))
      fail(key_of(profiles, name),
           "profile name '" + name + "' must use letters, digits, '_', '-', '.' (at most 100 of them)");
    if (!body.IsMap())
      fail(body, fmt::format("profile '{}' must be a map with domain: and/or run: overrides", name));
    for (const auto& [key, value] : entries(body, "profile " + name)) {
      (void)value;
      if (std::find(keys.begin(), keys.end(), key) == keys.end())
        fail(key_of(body, key),
             fmt::format("unknown key '{}' in profile {}{}", key, name, suggestion(key, keys)));
    }
    if (body["description"]) scalar<std::string>(body["description"], "description", "a string");
    names.push_back(name);
  }
  return names;
}

YAML::Node Loader::overlay(const YAML::Node& base, const YAML::Node& over, const Schema& schema) const {
  if (!base || base.IsNull() || !base.IsMap() || !over.IsMap()) return over;
  // The field a key names (by its key or an old name), or none.
  auto field_of = [&](const YAML::Node& key) -> const Field* {
    if (!key.IsScalar()) return nullptr;
    for (const auto& f : schema)
      if (names_field(f, key.Scalar())) return &f;
    return nullptr;
  };
  // The key in `map` that gives the same field as `key` (under either name).
  auto same_key = [&](const YAML::Node& map, const YAML::Node& key) -> std::string {
    if (!key.IsScalar()) return "";
    const Field* f = field_of(key);
    return f ? given_as(map, *f) : map[key.Scalar()] ? key.Scalar() : "";
  };
  YAML::Node merged(YAML::NodeType::Map);
  for (auto it = base.begin(); it != base.end(); ++it) {
    const std::string key = same_key(over, it->first);
    if (key.empty()) {
      merged.force_insert(it->first, it->second);
      continue;
    }
    const YAML::Node replaced = over[key];
    const Field* field = field_of(it->first);
    if (field && field->kind == FieldKind::map && it->second.IsMap() && replaced.IsMap())
      merged.force_insert(it->first, overlay(it->second, replaced, field->children));
    else
      merged.force_insert(key_of(over, key), replaced);
  }
  for (auto it = over.begin(); it != over.end(); ++it)
    if (same_key(base, it->first).empty()) merged.force_insert(it->first, it->second);
  return merged;
}

Spec Loader::load(const YAML::Node& root, const std::string& profile) {
  if (!root || root.IsNull()) throw InputError({file_, 0, 0}, "spec is empty");
  if (!root.IsMap()) fail(root, "a spec must be a map with keys spec, family, domain, invariants");
  // A program that links kprop::testing without kprop::families registers
  // none: say that, not "unknown family 'x'; valid: " (an empty list) or
  // "unknown top-level key 'op'".
  if (Registry::instance().names().empty() && declared_families().empty())
    fail(root["family"] ? root["family"] : root,
         "no kprop family is linked into this program: link kprop::families (CMake) or the family's library");
  std::vector<std::string> top = {"spec", "description", "family",     "target",   "reference",
                                  "run",  "domain",      "invariants", "profiles", "let"};
  for (const auto& d : declared_families()) top.push_back(d.key);
  for (const auto& [key, value] : entries(root, "the spec")) {
    (void)value;
    if (std::find(top.begin(), top.end(), key) == top.end())
      for (auto it = root.begin(); it != root.end(); ++it)
        if (it->first.Scalar() == key)
          fail(it->first, "unknown top-level key '" + key + "'" + suggestion(key, top));
  }
  Spec spec;
  spec.path = file_;
  spec.name = required_string(*this, root, "spec");
  if (!safe_name(spec.name))
    fail(root["spec"],
         "spec name '" + spec.name +
             "' must use letters, digits, '_', '-', '.', at most 100 of them (it names corpus/<spec>/)");
  if (root["description"]) scalar<std::string>(root["description"], "description", "a string");
  spec.profiles = profile_names(root);
  YAML::Node chosen;  // the selected profile's overrides
  if (!profile.empty()) {
    if (spec.profiles.empty())
      throw InputError({file_, 0, 0},
                       fmt::format("unknown profile '{}': spec {} declares no profiles", profile, spec.name));
    if (std::find(spec.profiles.begin(), spec.profiles.end(), profile) == spec.profiles.end())
      fail(key_of(root, "profiles"), fmt::format("unknown profile '{}' for spec {}{}", profile, spec.name,
                                                 suggestion(profile, spec.profiles)));
    chosen = root["profiles"][profile];
    spec.profile = profile;
  }
  // `run:` or `domain:` with nothing after it (its keys commented out) is
  // no section: in a profile it replaced the base's, every key back to the
  // family's default (a fresh seed, 100 trials, every dtype).
  for (const char* key : {"run", "domain"}) {
    if (root[key] && root[key].IsNull())
      fail(key_of(root, key), fmt::format("'{}' is empty: give its keys, or remove it", key));
    if (chosen && chosen[key] && chosen[key].IsNull())
      fail(key_of(chosen, key),
           fmt::format("'{}' in profile {} is empty: give its keys, or remove it", key, profile));
  }
  // The section `key` of the spec, with the profile's overrides of it.
  const std::string in_profile = profile.empty() ? "" : " (profile " + profile + ")";
  auto section = [&](const char* key, const Schema& schema, bool with_cli = true) -> YAML::Node {
    // A family the spec declares takes the profile's domain and --domain as it is built.
    const bool declared_domain = spec.declared_family && std::string_view(key) == "domain";
    const YAML::Node n =
        chosen && chosen[key] && !declared_domain ? overlay(root[key], chosen[key], schema) : root[key];
    // (A new node: assigning to root[key] of a spec without the key throws.)
    if (with_cli && cli_domain.IsMap() && std::string_view(key) == "domain" && !declared_domain)
      return overlay(n ? n : YAML::Node(), cli_domain, schema);
    return n;
  };

  const std::string family_name = required_string(*this, root, "family");
  std::shared_ptr<const Family> own_declared;  // a declared family without --domain (when given)
  spec.family = Registry::instance().find(family_name);
  if (!spec.family) {
    // A name no family answers to is that error, before any section it names.
    std::vector<std::string> names = Registry::instance().names();
    for (const auto& d : declared_families()) names.push_back(d.family);
    if (std::find(names.begin(), names.end(), family_name) == names.end())
      fail(root["family"], "unknown family '" + family_name + "'" + suggestion(family_name, names));
    own_declared = declared_family(root, chosen ? chosen["domain"] : YAML::Node(), family_name, spec);
  } else {
    for (const auto& d : declared_families())
      if (root[d.key])
        fail(key_node(root, d.key),
             fmt::format("'{}:' belongs to family: {}, not {}", d.key, d.family, family_name));
  }
  if (!spec.family)
    fail(root["family"],
         "unknown family '" + family_name + "'" + suggestion(family_name, Registry::instance().names()));
  check_lets(root, *spec.family);

  const auto impl_names = spec.family->implementation_names();
  auto impl = [&](const char* key, bool external_ok) {
    const YAML::Node n = root[key];
    const std::string name = n ? scalar<std::string>(n, key, "an implementation name") : "reference";
    // plugin:/exec: targets are opened when the run starts (their errors name the target).
    if (external_ok && external::is_external_target(name)) {
      try {
        external::check_target_form(name);
      } catch (const InputError& e) {
        fail(n, e.bare_message());
      }
      return name;
    }
    if (spec.family->find_implementation(name) < 0)
      fail(n ? n : root, fmt::format("unknown implementation '{}' for family {}{}", name, family_name,
                                     suggestion(name, impl_names)));
    return name;
  };
  spec.target = impl("target", true);
  spec.reference = impl("reference", false);
  if (const int r = spec.family->find_implementation(spec.reference);
      r >= 0 && spec.family->registered(static_cast<size_t>(r)).info.kind == ImplKind::mutant)
    fail(root["reference"],
         fmt::format("reference '{}' is a mutant of family {} (a planted bug), not an oracle", spec.reference,
                     family_name));

  Values run;
  parse_fields(section("run", run_schema()), run_schema(), "", "run" + in_profile, run);
  spec.run.trials = run.integer("trials");
  spec.run.max_size = run.integer("max_size");
  spec.run.seed = static_cast<uint64_t>(run.integer("seed"));
  spec.run.time_budget_s = run.real("time_budget_s");
  spec.run.shrink_budget_s = run.real("shrink_budget_s");
  spec.run.shrink_budget_checks = run.integer("shrink_budget_checks");
  spec.run.max_discard_ratio = run.integer("max_discard_ratio");
  spec.run.case_timeout_s = run.real("case_timeout_s");
  spec.run.suppress_health_check = run.choices("suppress_health_check");
  spec.run.max_case_mb = cli_max_case_mb > 0 ? cli_max_case_mb : run.integer("max_case_mb");
  spec.run.search = run.boolean("search.enabled");
  spec.run.search_trials = run.integer("search.trials");
  spec.run.search_time_budget_s = run.real("search.time_budget_s");
  spec.run.padded_tensors = run.boolean("padded_tensors");

  parse_fields(section("domain", spec.family->domain_schema()), spec.family->domain_schema(), "",
               "domain" + in_profile, spec.domain);
  // The spec's own domain (and profile's), without --domain: a gap in it is
  // the spec's error whatever --domain says (an unrelated --domain turned it
  // into an n/a and a pass).
  Values own_domain = spec.domain;
  const bool overridden = cli_domain.IsMap() && cli_domain.size() > 0 && !spec.declared_family;
  if (overridden)
    parse_fields(section("domain", spec.family->domain_schema(), false), spec.family->domain_schema(), "",
                 "domain" + in_profile, own_domain);
  const YAML::Node domain_node = chosen && chosen["domain"] ? chosen["domain"]
                                 : root["domain"]           ? root["domain"]
                                                            : root;
  if (const std::string why = spec.family->check_domain(spec.domain); !why.empty()) {
    // A gap --domain made (the spec's own domain has none) is the option's.
    if (overridden && spec.family->check_domain(own_domain).empty())
      throw InputError({"--domain", cli_domain.Mark().line + 1, cli_domain.Mark().column + 1}, why);
    fail(domain_node, why);
  }
  // The memory budget: the family's largest case here (fails fast, before
  // the invariants), and again with the invariants' expressions (kprop::largest_case).
  const auto check_budget = [&](const CaseSize& largest) {
    const double mb = largest.bytes / (1024.0 * 1024.0);
    if (mb > double(spec.run.max_case_mb)) {
      const std::string why = fmt::format(
          "the largest case of this domain{} needs ~{:.0f} MB ({}), over run.max_case_mb = {}; "
          "narrow {} or raise run.max_case_mb (--max-case-mb)",
          in_profile, std::ceil(mb), largest.dims, spec.run.max_case_mb, largest.keys);
      // Where the size comes from: --domain when it overrides the domain,
      // else the domain's keys (a declared op's `op.dims`).
      if (cli_domain.IsMap() && cli_domain.size() > 0)
        throw InputError({"--domain", cli_domain.Mark().line + 1, cli_domain.Mark().column + 1}, why);
      YAML::Node at = domain_node;
      if (!(chosen && chosen["domain"]) && !root["domain"] && largest.keys.find(' ') == std::string::npos) {
        YAML::Node walk = root;  // along the dotted key, e.g. op then dims
        for (size_t from = 0; walk && from <= largest.keys.size();) {
          const size_t dot = std::min(largest.keys.find('.', from), largest.keys.size());
          const YAML::Node here = walk;
          walk.reset(here.IsMap() ? here[largest.keys.substr(from, dot - from)]
                                  : YAML::Node(YAML::NodeType::Undefined));
          from = dot + 1;
        }
        if (walk) at.reset(walk);
      }
      fail(at, why);
    }
  };
  check_budget(spec.family->max_case_bytes(spec.domain));

  const auto& invariants = spec.family->invariants();
  const auto invariant_names = spec.family->invariant_names();
  const YAML::Node list = root["invariants"];
  // A profile's skip_invariants: invariants of the base list its sizes
  // cannot observe (an exhaustive enumeration, finite differences of every
  // element); each must be in the base list (or the family's defaults).
  std::vector<std::string> skip;
  if (const YAML::Node s = chosen ? chosen["skip_invariants"] : YAML::Node(); s) {
    // (With nothing after it, as `mutants:`: an error, not a list that skips nothing.)
    if (s.IsNull())
      fail(key_of(chosen, "skip_invariants"),
           fmt::format("'skip_invariants' in profile {} is empty: give invariant names, or remove it",
                       profile));
    if (!s.IsSequence()) fail(s, "skip_invariants must be a list of invariant names");
    for (const auto& item : s) {
      const auto name = scalar<std::string>(item, "skip_invariants", "an invariant name");
      if (std::find(skip.begin(), skip.end(), name) != skip.end())
        fail(item, fmt::format("skip_invariants lists '{}' twice", name));
      // An invariant of the family, or an expression of the spec: a typo is an error.
      bool known = spec.family->find_invariant(name) >= 0;
      if (list && list.IsSequence())
        for (const auto& entry : list) {
          const YAML::Node n = entry.IsMap() ? entry["name"] : entry;
          known = known || (n && n.IsScalar() && n.Scalar() == name);
        }
      if (!known)
        fail(item, fmt::format("skip_invariants: '{}' is no invariant of family {}{}", name, family_name,
                               suggestion(name, invariant_names)));
      skip.push_back(name);
    }
  }
  const auto skipped = [&](const std::string& name) {
    return std::find(skip.begin(), skip.end(), name) != skip.end();
  };
  if (!list || list.IsNull()) {
    // Every invariant that the domain lets observe something (InvariantInfo::needs).
    for (size_t i = 0; i < invariants.size(); ++i) {
      if (skipped(invariants[i].name)) continue;
      Values params = Values::defaults(invariants[i].params);
      if (invariants[i].needs && !invariants[i].needs(spec.domain, params).empty()) continue;
      spec.invariants.push_back({i, invariants[i].name, std::move(params)});
    }
    if (spec.invariants.empty() && skip.empty())
      fail(root, "no invariant of family " + family_name + " can observe this domain");
  } else {
    if (!list.IsSequence()) fail(list, "'invariants' must be a list of names or {name: ..., params}");
    if (list.size() == 0) fail(list, "'invariants' is empty; valid: " + join(invariant_names));
    for (const auto& item : list) {
      YAML::Node name_node = item.IsMap() ? item["name"] : item;
      if (!name_node) fail(item, "invariant entry needs a 'name'");
      const auto name = scalar<std::string>(name_node, "name", "an invariant name");
      if (skipped(name)) continue;
      if (item.IsMap() && (item["expect"] || item["when"])) {  // an expression invariant
        for (const auto& used : spec.invariants)
          if (used.name == name) fail(name_node, "invariant '" + name + "' is listed twice");
        InvariantUse use = expression_invariant(*this, item, name_node, name, *spec.family, lets_of(root));
        // A relation over a transform that can never apply: the spec's
        // error in its own domain, not applicable where --domain starved
        // it (as a built-in invariant's needs, below).
        if (use.expression && use.expression->transform) {
          const size_t t = use.expression->transform->index;
          const Family& own = own_declared ? *own_declared : *spec.family;
          const std::string& tname = use.expression->transform->name;
          if (const auto& needs = own.transforms()[t].needs; needs)
            if (const std::string why = needs(own_domain); !why.empty())
              fail(item["transform"],
                   fmt::format("invariant {}: transform {} needs {}{}", name, tname, why, in_profile));
          if (const auto& needs = spec.family->transforms()[t].needs; needs && (overridden || own_declared))
            if (const std::string why = needs(spec.domain); !why.empty())
              use.unobservable =
                  fmt::format("--domain leaves it nothing to observe: transform {} needs {}", tname, why);
        }
        spec.invariants.push_back(std::move(use));
        continue;
      }
      const int index = spec.family->find_invariant(name);
      if (index < 0 && item.IsMap()) {
        // Not a built-in: maybe an expression invariant whose key is misspelled.
        static const std::vector<std::string> expression_keys = {"expect", "when", "transform",
                                                                 "description"};
        for (auto it = item.begin(); it != item.end(); ++it) {
          const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
          if (key == "name" || std::ranges::find(expression_keys, key) != expression_keys.end()) continue;
          if (const std::string close = closest_match(key, expression_keys); !close.empty())
            fail(it->first,
                 fmt::format("unknown key '{}' in invariant '{}' (did you mean '{}'? an expression "
                             "invariant needs 'expect')",
                             key, name, close));
        }
      }
      // A map with a name and no built-in of that name is most likely an
      // expression invariant whose `expect:` is missing.
      if (index < 0)
        fail(name_node, fmt::format("unknown invariant '{}' for family {}{}{}", name, family_name,
                                    suggestion(name, invariant_names),
                                    item.IsMap() ? " (or an expression invariant: it needs 'expect:')" : ""));
      for (const auto& used : spec.invariants)
        if (used.name == name) fail(name_node, "invariant '" + name + "' is listed twice");
      InvariantUse use{static_cast<size_t>(index), name, {}};
      parse_fields(item.IsMap() ? YAML::Node(item) : YAML::Node(),
                   invariants[static_cast<size_t>(index)].params, "", "invariant " + name, use.params,
                   "name");
      // An invariant the spec lists for a domain that cannot feed it is the
      // spec's error; one that --domain starved is not applicable to the run.
      if (const auto& needs = invariants[static_cast<size_t>(index)].needs) {
        // A declared family (an op) keeps its domain in its declaration:
        // the spec's own is the family built without --domain.
        const auto& own_needs =
            own_declared ? own_declared->invariants()[static_cast<size_t>(index)].needs : needs;
        if (const std::string why = own_needs ? own_needs(own_domain, use.params) : ""; !why.empty())
          fail(name_node, fmt::format("invariant {} needs {}{}", name, why, in_profile));
        if (const std::string why = overridden || own_declared ? needs(spec.domain, use.params) : "";
            !why.empty())
          use.unobservable = fmt::format("--domain leaves it nothing to observe: it needs {}", why);
      }
      spec.invariants.push_back(std::move(use));
    }
  }
  if (spec.invariants.empty())  // every one skipped (a list is never empty): a run would check nothing
    fail(chosen["skip_invariants"],
         fmt::format("skip_invariants skips every invariant this spec would check{}: the run would check "
                     "nothing",
                     in_profile));
  check_budget(largest_case(spec));
  return spec;
}

}  // namespace

namespace {
// YAML is Unicode: a byte that is not UTF-8 (a Latin-1 name, a binary file)
// would reach names, reports and JSON as it is.
void require_utf8(const std::string& text, const std::string& path) {
  const std::optional<size_t> at = invalid_utf8_at(text);
  if (!at) return;
  const size_t newline = text.rfind('\n', *at);
  const size_t start = newline == std::string::npos ? 0 : newline + 1;
  const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(start), '\n');
  // Columns count from after a byte-order mark (as yaml-cpp's marks do).
  const size_t bom = start == 0 && text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  throw InputError({path, static_cast<int>(line), static_cast<int>(*at - start - bom) + 1},
                   fmt::format("byte 0x{:02X} is not UTF-8; the text must be UTF-8",
                               static_cast<unsigned>(static_cast<unsigned char>(text[*at]))));
}

// --domain's text as a map of domain keys, each checked against the
// family's schema on its own (errors point into the option's text; a family
// declared by the spec itself is checked with the rest of the spec).
YAML::Node cli_domain(const std::string& text, const YAML::Node& root, const std::string& path) {
  require_utf8(text, "--domain");
  YAML::Node node = load_one_document(text, "--domain", "invalid YAML", "--domain");
  Loader cli("--domain");
  if (!node.IsMap())
    cli.fail(node, "expected a map of domain keys, e.g. --domain '{dtypes: [f32], dim: [64, 128]}'");
  if (node.size() == 0) return node;  // '{}': nothing to override (as no --domain)
  // (A spec that is no map fails its own check when it loads.)
  const std::string family =
      root.IsMap() && root["family"] && root["family"].IsScalar() ? root["family"].Scalar() : "";
  if (const Family* f = Registry::instance().find(family)) {
    Values unused;
    cli.parse_fields(node, f->domain_schema(), "", "the domain of " + path, unused);
  }
  // A family the spec declares checks its keys when it is built (DeclaredFamilyContext::domain).
  return node;
}
}  // namespace

Spec parse_spec(const std::string& text, const std::string& path, const std::string& profile,
                const std::string& domain_overrides, int64_t max_case_mb) {
  require_utf8(text, path);
  YAML::Node root = load_one_document(text, path, "invalid YAML", "a spec file");
  Loader loader(path);
  // Positions inside expressions index the text as YAML reads it: after a
  // byte order mark, which yaml-cpp's marks do not count.
  const bool bom = text.rfind("\xEF\xBB\xBF", 0) == 0;
  const std::string unmarked = bom ? text.substr(3) : std::string();
  loader.text = bom ? &unmarked : &text;
  if (!domain_overrides.empty()) loader.cli_domain = cli_domain(domain_overrides, root, path);
  loader.cli_max_case_mb = max_case_mb;
  // The base spec, then every profile: each is validated whichever is
  // selected, so a broken profile fails the spec's own checks. --domain is
  // the selected one's: another (the base under --profile, a profile whose
  // mutants --mutants runs) takes it where it fits and is kept as written
  // where it does not (a memory budget of its own), an error only when it is
  // broken as written.
  // So is --max-case-mb (a lower budget than another profile's needs).
  auto load = [&](const std::string& name) {
    if (name == profile || (loader.cli_domain.IsNull() && loader.cli_max_case_mb == 0)) {
      Spec own = loader.load(root, name);
      own.max_case_mb_override = max_case_mb;
      return own;
    }
    try {
      Spec with = loader.load(root, name);
      with.domain_overrides = domain_overrides;
      with.max_case_mb_override = max_case_mb;
      return with;
    } catch (const InputError& e) {
      // (reset() rebinds the handle: assigning a node would write through
      // it into the option's own node, dropping it for every later load.)
      YAML::Node option;
      option.reset(loader.cli_domain);
      const int64_t budget = loader.cli_max_case_mb;
      loader.cli_domain.reset(YAML::Node());
      loader.cli_max_case_mb = 0;
      auto restore = [&] {
        loader.cli_domain.reset(option);
        loader.cli_max_case_mb = budget;
      };
      try {
        Spec as_written = loader.load(root, name);
        if (!option.IsNull()) as_written.domain_dropped = e.what();
        restore();
        return as_written;
      } catch (...) {
        restore();
        throw;
      }
    }
  };
  Spec spec = load("");
  std::optional<Spec> selected;
  for (const std::string& name : spec.profiles) {
    Spec p = load(name);
    spec.profile_case_mb[name] = p.run.max_case_mb;
    if (const YAML::Node list = root["profiles"][name]["mutants"]) {
      if (list.IsNull())  // (at its key: the null's own mark is the next line's start)
        loader.fail(Loader::key_of(root["profiles"][name], "mutants"),
                    fmt::format("'mutants' in profile {} is empty: give mutant names, or remove it", name));
      if (!list.IsSequence())
        loader.fail(list, "profile " + name + ": mutants must be a list of mutant names");
      std::vector<std::string> mutants;
      for (const auto& impl : p.family->implementations())
        if (impl.kind == ImplKind::mutant) mutants.push_back(impl.name);
      auto shared = std::make_shared<const Spec>(p);
      for (const auto& item : list) {
        const std::string m = loader.scalar<std::string>(item, "mutants", "a mutant name");
        if (mutants.empty())
          loader.fail(item, fmt::format("profile {}: family {} has no mutants", name, p.family->name()));
        if (std::find(mutants.begin(), mutants.end(), m) == mutants.end())
          loader.fail(item, fmt::format("profile {}: '{}' is no mutant of family {}{}", name, m,
                                        p.family->name(), suggestion(m, mutants)));
        if (const auto seen = spec.mutant_profiles.find(m); seen != spec.mutant_profiles.end())
          loader.fail(item, seen->second == shared
                                ? fmt::format("profile {}: mutant '{}' is listed twice", name, m)
                                : fmt::format("profile {}: mutant '{}' is listed by profile {} too", name, m,
                                              seen->second->profile));
        spec.mutant_profiles[m] = shared;
      }
    }
    if (name == profile) selected = std::move(p);
  }
  if (!profile.empty() && !selected) loader.load(root, profile);  // throws: an unknown profile
  spec.domain_overrides = domain_overrides;
  if (!selected) return spec;
  selected->domain_overrides = domain_overrides;
  selected->profile_case_mb = spec.profile_case_mb;
  selected->mutant_profiles = spec.mutant_profiles;
  return std::move(*selected);
}

const std::vector<std::pair<std::string, std::string>>& renamed_specs() {
  static const std::vector<std::pair<std::string, std::string>> renamed = {{"flash_fwd", "attention_fwd"},
                                                                           {"flash_bwd", "attention_bwd"}};
  return renamed;
}

std::string renamed_spec_file(const std::string& path) {
  const std::filesystem::path p(path);
  if (std::filesystem::exists(p)) return "";
  for (const auto& [old_stem, new_stem] : renamed_specs()) {
    const auto renamed = std::filesystem::path(p).replace_filename(new_stem + p.extension().string());
    if (p.stem() == old_stem && std::filesystem::is_regular_file(renamed)) return renamed.string();
  }
  return "";
}

Spec load_spec(const std::string& path, const std::string& profile, const std::string& domain_overrides,
               int64_t max_case_mb) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (const std::string renamed = renamed_spec_file(path); !renamed.empty()) {
      fmt::print(stderr, "kprop: note: spec {} is now {}; loading that\n", path, renamed);
      return load_spec(renamed, profile, domain_overrides, max_case_mb);
    }
    throw InputError({path, 0, 0}, "cannot read spec file");
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_spec(text.str(), path, profile, domain_overrides, max_case_mb);
}

namespace {
std::vector<DeclaredFamily>& declared_list() {
  static std::vector<DeclaredFamily> list;
  return list;
}
}  // namespace

bool register_declared_family(DeclaredFamily declared) {
  declared_list().push_back(std::move(declared));
  return true;
}

const std::vector<DeclaredFamily>& declared_families() {
  return declared_list();
}

CaseSize largest_case(const Spec& spec) {
  CaseSize size = spec.family->max_case_bytes(spec.domain);
  if (size.extents.empty()) return size;  // the family does not say its tensors' extents
  const auto extent = [&](const std::string& dim) {
    // A transformed case's own dim (a slice's, transformed.T) is at most the dim's largest.
    const auto it = size.extents.find(dim.starts_with("transformed.") ? dim.substr(12) : dim);
    return it == size.extents.end() ? 1.0 : it->second;
  };
  // An expression's intermediates, doubles; an invariant at a time (each
  // evaluation's values are freed when it ends, the trial's tensors kept).
  // The named tensors they read, which the trial's map keeps once made:
  // each counted once, however many invariants read it. A metamorphic
  // relation's derived case lives while its invariant is checked, and the
  // relations after it that share it (AnyTrial::release_derived), its
  // "transformed.*" tensors with it: those they have made so far count with
  // each one's evaluation. (The derived case's own inputs and results are in
  // the family's estimate, which holds one derived case for its own
  // relations.)
  double most = 0;
  const InvariantUse* widest = nullptr;
  std::map<std::string, double> named, derived;
  std::string held;  // the key of the derived case alive ("": none)
  for (const InvariantUse& use : spec.invariants) {
    const auto& e = use.expression;
    if (const std::string key = e && e->transform ? e->transform->key : ""; key != held)
      derived.clear(), held = key;
    if (!e) continue;
    std::map<std::string, double> names = e->expect.name_elements(extent);
    double all = e->expect.peak_elements(extent);
    if (e->when) {
      all = std::max(all, e->when->peak_elements(extent));
      names.merge(e->when->name_elements(extent));
    }
    for (const auto& [name, elements] : names)
      (name.starts_with("transformed.") ? derived : named)[name] = elements;
    for (const auto& [name, elements] : derived) all += elements;
    if (all > most) most = all, widest = &use;
  }
  double kept = 0;
  for (const auto& [name, elements] : named) kept += elements;
  // Named where it is most of the case.
  if (widest && 8 * most > size.bytes)
    size.dims += fmt::format("; invariant {} holds {:.3g} elements while evaluated", widest->name, most);
  if (8 * kept > size.bytes)
    size.dims += fmt::format("; the invariants' named tensors hold {:.3g} elements", kept);
  size.bytes += 8 * (most + kept);
  return size;
}

std::string check_case_budget(const Spec& spec, const AnyCase& c, const std::string& found_in_profile) {
  const double mb = spec.family->case_bytes(c) / (1024.0 * 1024.0);
  // A case found under a profile may be as large as that profile allowed.
  int64_t budget = spec.run.max_case_mb;
  if (const auto it = spec.profile_case_mb.find(found_in_profile); it != spec.profile_case_mb.end())
    budget = std::max(budget, it->second);
  if (mb <= double(budget)) return "";
  return fmt::format(
      "case needs ~{:.0f} MB ({}), over run.max_case_mb = {} of {}; raise run.max_case_mb (--max-case-mb)",
      std::ceil(mb), spec.family->stats(c).summary, budget, spec.path);
}

std::string needs_choice(const Values& domain, const std::string& key, const std::string& choice,
                         const std::string& what) {
  const Choices& listed = domain.choices(key);
  if (std::find(listed.begin(), listed.end(), choice) != listed.end()) return "";
  return fmt::format("{} but domain.{} is [{}]; add {} or drop the invariant", what, key, join(listed),
                     choice);
}

std::string outside_int_range(const Values& domain, const std::string& key, int64_t v) {
  const IntRange r = domain.int_range(key);
  if (r.allows(v)) return "";
  if (!r.one_of.empty()) return fmt::format("{} = {} is not one_of [{}]", key, v, fmt::join(r.one_of, ", "));
  if (v >= r.lo && v <= r.hi)
    return fmt::format("{} = {} breaks {} of [{}, {}]", key, v, r.constraint(), r.lo, r.hi);
  return fmt::format("{} = {} is outside [{}, {}]", key, v, r.lo, r.hi);
}

std::string outside_real_range(const Values& domain, const std::string& key, double v) {
  const RealRange r = domain.real_range(key);
  if (v >= r.lo && v <= r.hi) return "";
  return fmt::format("{} = {} is outside [{}, {}]", key, v, r.lo, r.hi);
}

std::string outside_choices(const Values& domain, const std::string& key, const std::string& v) {
  const Choices& listed = domain.choices(key);
  if (std::find(listed.begin(), listed.end(), v) != listed.end()) return "";
  return fmt::format("{} = {} is not in [{}]", key, v, join(listed));
}

std::string first_problem(std::initializer_list<std::string> problems) {
  for (const std::string& p : problems)
    if (!p.empty()) return p;
  return "";
}

uint64_t tree_hash(const YAML::Node& tree) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto bytes = [&h](std::string_view s) {
    for (const char ch : s) h = (h ^ uint8_t(ch)) * 0x100000001b3ULL;
    h = (h ^ 0xffu) * 0x100000001b3ULL;
  };
  case_yaml::walk_tree(tree, [&](const YAML::Node& n) {
    if (case_yaml::is_packed(n)) {  // as the sequence it stands for
      bytes("[");
      case_yaml::for_each_item(n, [&](const case_yaml::Item& x) { bytes(x.text); });
      return false;
    }
    if (n.IsScalar()) {
      bytes(n.Scalar());
      return false;
    }
    bytes(n.IsMap() ? "{" : "[");
    return true;
  });
  return rng::mix(h);
}

// The `run:` keys; their defaults are RunConfig's (spec.h), the one copy.
const Schema& run_schema() {
  static const RunConfig d;
  static const Schema schema = {
      field::integer(
          "trials", d.trials, 1, 1e9,
          "checked cases each invariant needs (a run draws up to trials x (1 + max_discard_ratio))"),
      field::integer("max_size", d.max_size, 0, 10000,
                     "RapidCheck size reached by the last trial (100 = full domain)"),
      field::integer("seed", static_cast<int64_t>(d.seed), 0, 9.2e18,
                     "0 draws a fresh seed, printed so the run can be repeated"),
      field::real("time_budget_s", d.time_budget_s, 0, 1e7,
                  "stop drawing cases after this many seconds (0: no limit)"),
      field::real("shrink_budget_s", d.shrink_budget_s, 0, 1e7,
                  "time allowed to shrink one counterexample (0: no shrinking, the case is kept as found)"),
      field::integer("shrink_budget_checks", d.shrink_budget_checks, 0, 1e12,
                     "candidate cases the shrink of one counterexample may check (0: no limit); unlike "
                     "shrink_budget_s, a shrink it stops keeps the same case on any machine"),
      field::integer("max_discard_ratio", d.max_discard_ratio, 0, 1e6,
                     "give up when an invariant discards more than ratio x trials"),
      field::real("case_timeout_s", d.case_timeout_s, 0.001, 1e7,
                  "a single target call longer than this is reported as a hang (exit 3)"),
      field::choices("suppress_health_check", d.suppress_health_check, {"declined", "discarded", "too_slow"},
                     "health checks not to fail the run on (prop_runner --list explains each)"),
      field::integer("max_case_mb", d.max_case_mb, 1, 1 << 30,
                     "peak memory one case may need (inputs, outputs, reference, intermediates); a spec "
                     "whose domain allows more is rejected, a corpus case over it is bad input"),
      field::boolean("padded_tensors", d.padded_tensors,
                     "a plugin: target receives each tensor of two or more dimensions with its rows padded "
                     "(strides[ndim-2] = shape[ndim-1] + 3): a kernel that ignores its strides fails "
                     "(exec: targets are refused; built-in targets take no tensors)"),
      field::map("search",
                 {field::boolean("enabled", d.search,
                                 "after the random phase, hill-climb from the cases with the highest "
                                 "error/allowed ratio toward a failure (prop_runner --search)"),
                  field::integer("trials", d.search_trials, 1, 1e9,
                                 "cases the search may run (a budget: only enabled or --search runs it)"),
                  field::real("time_budget_s", d.search_time_budget_s, 0, 1e7,
                              "stop the search after this many seconds (0: no limit; a budget: only enabled "
                              "or --search runs it)")},
                 "targeted search (docs/SPEC.md \"Targeted search\")"),
  };
  return schema;
}

std::string describe_spec_keys() {
  return "spec: NAME          name; counterexamples go to corpus/NAME/\n"
         "description: TEXT   optional, free text\n"
         "family: NAME        kernel family (prop_runner --list)\n"
         "target: NAME        implementation under test (default reference; --target overrides)\n"
         "reference: NAME     oracle for comparative invariants (default reference)\n"
         "run:\n" +
         describe_schema(run_schema(), 2) +
         "domain:             family-specific keys (prop_runner --list); an integer range is [lo, hi],\n"
         "                    a value, {one_of: [v, ...]} or {range: [lo, hi], multiple_of: M,\n"
         "                    offsets: [o, ...]} (values k*M + o)\n"
         "invariants:         list of NAME or {name: NAME, PARAM: VALUE...}; default: all that the\n"
         "                    domain lets observe a case (an invariant listed whose needs the domain\n"
         "                    does not meet, e.g. f64 cases, is an error)\n"
         "profiles:           optional, {NAME: {domain: {...}, run: {...}}}: overrides of domain/run\n"
         "                    keys selected with --profile NAME (a nested map merges key by key)\n";
}

}  // namespace kprop
