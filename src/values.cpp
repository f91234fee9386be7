#include "kprop/values.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kprop/enum_names.h"

namespace kprop {

const char* kind_name(FieldKind kind) {
  static constexpr const char* kNames[] = {"bool",
                                           "integer",
                                           "number",
                                           "string",
                                           "integer range [lo, hi]",
                                           "number range [lo, hi]",
                                           "list of choices",
                                           "map"};
  static_assert(std::size(kNames) == size_t(FieldKind::map) + 1);
  return enum_name(kind, kNames);
}

// ---------------------------------------------------------------- IntRange
namespace {
int64_t floor_div(int64_t a, int64_t m) {
  return a >= 0 ? a / m : -((-a + m - 1) / m);
}
// The residues modulo multiple_of that offsets allow, sorted and distinct.
std::vector<int64_t> residues(const IntRange& r) {
  std::vector<int64_t> out;
  if (r.offsets.empty()) out.push_back(0);
  for (int64_t o : r.offsets) out.push_back(((o % r.multiple_of) + r.multiple_of) % r.multiple_of);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}
// One_of values inside [lo, hi].
std::vector<int64_t> listed(const IntRange& r) {
  std::vector<int64_t> out;
  for (int64_t v : r.one_of)
    if (v >= r.lo && v <= r.hi) out.push_back(v);
  std::sort(out.begin(), out.end());
  return out;
}
// Allowed values (residue form) in [base, x], base = the multiple of m at or below lo.
int64_t count_upto(const IntRange& r, const std::vector<int64_t>& res, int64_t x) {
  const int64_t m = r.multiple_of, base = floor_div(r.lo, m) * m;
  if (x < base) return 0;
  const int64_t d = x - base;
  const int64_t rem = d % m;
  return d / m * static_cast<int64_t>(res.size()) +
         (std::upper_bound(res.begin(), res.end(), rem) - res.begin());
}
}  // namespace

bool IntRange::allows(int64_t v) const {
  if (v < lo || v > hi) return false;
  if (!one_of.empty()) return std::find(one_of.begin(), one_of.end(), v) != one_of.end();
  if (multiple_of <= 1) return true;
  const auto res = residues(*this);
  return std::binary_search(res.begin(), res.end(), ((v % multiple_of) + multiple_of) % multiple_of);
}

int64_t IntRange::count() const {
  if (hi < lo) return 0;
  if (!one_of.empty()) return static_cast<int64_t>(listed(*this).size());
  if (multiple_of <= 1) return hi - lo + 1;
  const auto res = residues(*this);
  return count_upto(*this, res, hi) - count_upto(*this, res, lo - 1);
}

int64_t IntRange::at(int64_t i) const {
  if (i < 0 || i >= count())
    throw std::logic_error(fmt::format("kprop: IntRange::at({}) outside its {} values", i, count()));
  if (!one_of.empty()) return listed(*this)[static_cast<size_t>(i)];
  if (multiple_of <= 1) return lo + i;
  const auto res = residues(*this);
  const int64_t q = static_cast<int64_t>(res.size()), base = floor_div(lo, multiple_of) * multiple_of;
  const int64_t t = i + count_upto(*this, res, lo - 1);
  return base + t / q * multiple_of + res[static_cast<size_t>(t % q)];
}

namespace {
// How many allowed values are <= v.
int64_t allowed_upto(const IntRange& r, int64_t v) {
  const int64_t n = r.count();
  if (n == 0 || v < r.lo) return 0;
  if (!r.one_of.empty()) {
    const auto vals = listed(r);
    return std::upper_bound(vals.begin(), vals.end(), v) - vals.begin();
  }
  if (r.multiple_of <= 1) return std::min(v, r.hi) - r.lo + 1;
  const auto res = residues(r);
  return std::clamp<int64_t>(count_upto(r, res, std::min(v, r.hi)) - count_upto(r, res, r.lo - 1), 0, n);
}
}  // namespace

int64_t IntRange::nearest(int64_t v) const {
  const int64_t n = count();
  if (n == 0) return lo;
  if (!constrained()) return std::clamp(v, lo, hi);
  // Allowed values <= v: the one below is at(k - 1), the one above at(k).
  const int64_t k = allowed_upto(*this, v);
  if (k == 0) return at(0);
  if (k == n) return at(n - 1);
  const int64_t below = at(k - 1), above = at(k);
  return v - below <= above - v ? below : above;
}

std::vector<int64_t> IntRange::shrink_targets(int64_t n) const {
  std::vector<int64_t> out;
  const int64_t below = allowed_upto(*this, n - 1), half = allowed_upto(*this, n / 2);
  if (below == 0) return out;
  for (int64_t v : {at(0), half > 0 ? at(half - 1) : at(0), at(below - 1)})
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  return out;
}

IntRange IntRange::upto(int64_t top) const {
  IntRange r = *this;
  r.hi = std::min(hi, count() > 0 ? std::max(top, at(0)) : top);
  return r;
}

std::string IntRange::constraint() const {
  if (!one_of.empty()) return fmt::format("one_of [{}]", fmt::join(one_of, ", "));
  if (multiple_of <= 1) return "";
  std::string out = fmt::format("multiple_of {}", multiple_of);
  if (!offsets.empty() && offsets != std::vector<int64_t>{0})
    out += fmt::format(" with offsets [{}]", fmt::join(offsets, ", "));
  return out;
}

namespace field {
Field integer(std::string key, int64_t fallback, double min, double max, std::string doc) {
  return {std::move(key), FieldKind::integer, fallback, std::move(doc), min, max, {}, {}};
}
Field real(std::string key, double fallback, double min, double max, std::string doc) {
  return {std::move(key), FieldKind::real, fallback, std::move(doc), min, max, {}, {}};
}
Field boolean(std::string key, bool fallback, std::string doc) {
  Field f{std::move(key), FieldKind::boolean, fallback, std::move(doc)};
  return f;
}
Field string(std::string key, std::string fallback, std::vector<std::string> allowed, std::string doc) {
  Field f{std::move(key), FieldKind::string, std::move(fallback), std::move(doc)};
  f.allowed = std::move(allowed);
  return f;
}
Field int_range(std::string key, IntRange fallback, double min, double max, std::string doc) {
  return {std::move(key), FieldKind::int_range, fallback, std::move(doc), min, max, {}, {}};
}
Field real_range(std::string key, RealRange fallback, double min, double max, std::string doc) {
  return {std::move(key), FieldKind::real_range, fallback, std::move(doc), min, max, {}, {}};
}
Field choices(std::string key, Choices fallback, std::vector<std::string> allowed, std::string doc) {
  Field f{std::move(key), FieldKind::choices, std::move(fallback), std::move(doc)};
  f.allowed = std::move(allowed);
  return f;
}
Field map(std::string key, std::vector<Field> children, std::string doc) {
  Field f{std::move(key), FieldKind::map, false, std::move(doc)};
  f.children = std::move(children);
  return f;
}
Field renamed(Field f, std::string old_key) {
  f.aliases.push_back(std::move(old_key));
  return f;
}
}  // namespace field

template <typename T>
const T& Values::get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw std::logic_error("kprop: undeclared value '" + key + "'");
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  throw std::logic_error("kprop: value '" + key + "' read with the wrong type");
}
template const bool& Values::get<bool>(const std::string&) const;
template const int64_t& Values::get<int64_t>(const std::string&) const;
template const double& Values::get<double>(const std::string&) const;
template const std::string& Values::get<std::string>(const std::string&) const;
template const IntRange& Values::get<IntRange>(const std::string&) const;
template const RealRange& Values::get<RealRange>(const std::string&) const;
template const Choices& Values::get<Choices>(const std::string&) const;

static void add_defaults(const Schema& schema, const std::string& prefix, Values& out) {
  for (const auto& f : schema) {
    const std::string key = prefix.empty() ? f.key : prefix + "." + f.key;
    if (f.kind == FieldKind::map)
      add_defaults(f.children, key, out);
    else
      out.set(key, f.fallback);
  }
}

Values Values::defaults(const Schema& schema) {
  Values v;
  add_defaults(schema, "", v);
  return v;
}

std::string format_value(const Value& value) {
  struct Visitor {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return fmt::format("{:g}", d); }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const IntRange& r) const {
      if (!r.one_of.empty()) return fmt::format("{{one_of: [{}]}}", fmt::join(r.one_of, ", "));
      if (r.multiple_of <= 1) return fmt::format("[{}, {}]", r.lo, r.hi);
      std::string out = fmt::format("{{range: [{}, {}], multiple_of: {}", r.lo, r.hi, r.multiple_of);
      if (!r.offsets.empty()) out += fmt::format(", offsets: [{}]", fmt::join(r.offsets, ", "));
      return out + "}";
    }
    std::string operator()(const RealRange& r) const { return fmt::format("[{:g}, {:g}]", r.lo, r.hi); }
    std::string operator()(const Choices& c) const {
      return "[" + fmt::format("{}", fmt::join(c, ", ")) + "]";
    }
  };
  return std::visit(Visitor{}, value);
}

std::string format_number(const Field& f, double v) {
  const bool whole = f.kind == FieldKind::integer || f.kind == FieldKind::int_range;
  if (whole && std::isfinite(v) && std::fabs(v) < 9.3e18) return std::to_string(static_cast<int64_t>(v));
  return fmt::format("{:g}", v);
}

std::string describe_schema(const Schema& schema, int indent) {
  std::string out;
  const std::string pad(static_cast<size_t>(indent), ' ');
  for (const auto& f : schema) {
    if (f.kind == FieldKind::map) {
      out += fmt::format("{}{}:  {}\n", pad, f.key, f.doc);
      out += describe_schema(f.children, indent + 2);
      continue;
    }
    std::string bounds;
    if (!f.allowed.empty())
      bounds = " of {" + fmt::format("{}", fmt::join(f.allowed, ", ")) + "}";
    else if (f.kind != FieldKind::boolean && f.kind != FieldKind::string &&
             (std::isfinite(f.min) || std::isfinite(f.max)))
      bounds = fmt::format(" within [{}, {}]", format_number(f, f.min), format_number(f, f.max));
    std::string old;
    if (!f.aliases.empty()) old = fmt::format(" (formerly {})", fmt::join(f.aliases, ", "));
    out += fmt::format("{}{}: {}{}, default {}  — {}{}\n", pad, f.key, kind_name(f.kind), bounds,
                       format_value(f.fallback), f.doc, old);
  }
  return out;
}

}  // namespace kprop
