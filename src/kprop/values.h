// Typed values read from a spec (a family's domain, an invariant's
// parameters) and the schema that declares them. One schema type serves both,
// so validation, defaults and documentation (`prop_runner --list`) come from
// a single declaration per key.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace kprop {

// An integer range [lo, hi], optionally constrained (the YAML map form,
// docs/SPEC.md "Dim constraints"):
//   {one_of: [64, 128]}                                  only these values
//   {range: [64, 1024], multiple_of: 64}                 64, 128, ..., 1024
//   {range: [1, 1024], multiple_of: 64, offsets: [-1, 0, 1]}
//                                      v = k*64 + o for o in offsets: 1, 63, 64, 65, 127, ...
// Without a constraint (`IntRange{lo, hi}`, the list form) every value in
// [lo, hi] is allowed. With one_of, lo/hi are the least and largest value.
// Draws (kprop/draw.h) give only allowed values, smallest first by index;
// outside_int_range (kprop/family.h) rejects the others.
struct IntRange {
  int64_t lo = 0, hi = 0;          // inclusive
  int64_t multiple_of = 1;         // >= 1; with offsets: the period
  std::vector<int64_t> offsets{};  // empty: {0}; each in (-multiple_of, multiple_of)
  std::vector<int64_t> one_of{};   // non-empty: the allowed values, sorted, distinct
  bool operator==(const IntRange&) const = default;

  bool constrained() const { return !one_of.empty() || multiple_of > 1; }
  bool allows(int64_t v) const;
  // Allowed values in [lo, hi], and the i-th smallest (0 <= i < count()).
  int64_t count() const;
  int64_t at(int64_t i) const;
  // The allowed value nearest v (the smaller on a tie); lo when none is allowed.
  int64_t nearest(int64_t v) const;
  // The same constraint over [lo, min(hi, top)], with top raised to the least
  // allowed value so the result is never empty (when this one is not).
  IntRange upto(int64_t top) const;
  // Allowed sizes below n that a shrinker should try for a dimension of
  // size n, boldest first and distinct: the least, the largest at most n/2,
  // the largest below n. Empty when none is allowed below n. A one_of
  // domain ({one_of: [4097, 8191]}) admits neither n/2 nor n - 1, so
  // halving and dropping one element never leave it; these do.
  std::vector<int64_t> shrink_targets(int64_t n) const;
  // "multiple_of 64 with offsets [-1, 0, 1]", "one_of [64, 128]", "" when unconstrained.
  std::string constraint() const;
};
struct RealRange {
  double lo = 0, hi = 0;  // inclusive
  bool operator==(const RealRange&) const = default;
};
using Choices = std::vector<std::string>;  // non-empty subset of Field::allowed
using Value = std::variant<bool, int64_t, double, std::string, IntRange, RealRange, Choices>;

enum class FieldKind { boolean, integer, real, string, int_range, real_range, choices, map };
const char* kind_name(FieldKind kind);

// One key of a schema. `min`/`max` bound numbers and ranges; `allowed` lists
// the valid strings for `string` and `choices`; `children` for `map`.
struct Field {
  std::string key;
  FieldKind kind = FieldKind::integer;
  Value fallback;  // default when the key is absent (ignored for map)
  std::string doc;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> allowed;
  std::vector<Field> children;
  // Old names of the key, still read (specs written before a rename); a map
  // that gives both the key and an old name is an error.
  std::vector<std::string> aliases;
};
using Schema = std::vector<Field>;

// Builders that keep schema declarations one line per key.
namespace field {
Field integer(std::string key, int64_t fallback, double min, double max, std::string doc);
Field real(std::string key, double fallback, double min, double max, std::string doc);
Field boolean(std::string key, bool fallback, std::string doc);
Field string(std::string key, std::string fallback, std::vector<std::string> allowed, std::string doc);
Field int_range(std::string key, IntRange fallback, double min, double max, std::string doc);
Field real_range(std::string key, RealRange fallback, double min, double max, std::string doc);
Field choices(std::string key, Choices fallback, std::vector<std::string> allowed, std::string doc);
Field map(std::string key, std::vector<Field> children, std::string doc);
// `f`, also read under its old name `old_key`.
Field renamed(Field f, std::string old_key);
}  // namespace field

// Values by dotted path ("tree.nodes"). Accessors throw std::logic_error on a
// key the schema did not declare: that is a bug in the family, not user input.
class Values {
 public:
  void set(const std::string& key, Value value) { values_[key] = std::move(value); }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  int64_t integer(const std::string& key) const { return get<int64_t>(key); }
  double real(const std::string& key) const { return get<double>(key); }
  bool boolean(const std::string& key) const { return get<bool>(key); }
  const std::string& string(const std::string& key) const { return get<std::string>(key); }
  IntRange int_range(const std::string& key) const { return get<IntRange>(key); }
  RealRange real_range(const std::string& key) const { return get<RealRange>(key); }
  const Choices& choices(const std::string& key) const { return get<Choices>(key); }
  const std::map<std::string, Value>& all() const { return values_; }

  // Defaults of every leaf of `schema`, under `prefix`.
  static Values defaults(const Schema& schema);

 private:
  template <typename T>
  const T& get(const std::string& key) const;
  std::map<std::string, Value> values_;
};

std::string format_value(const Value& value);
// A bound or value of field f as text: whole numbers for integer fields
// (16777216, not 1.67772e+07), %g for real ones.
std::string format_number(const Field& f, double v);
// One line per leaf: "  key  kind  default  doc", indented by depth.
std::string describe_schema(const Schema& schema, int indent);

}  // namespace kprop
