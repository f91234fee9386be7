#include "kprop/values.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <stdexcept>

namespace kprop {

const char* kind_name(FieldKind kind) {
  switch (kind) {
    case FieldKind::boolean:
      return "bool";
    case FieldKind::integer:
      return "integer";
    case FieldKind::real:
      return "number";
    case FieldKind::string:
      return "string";
    case FieldKind::int_range:
      return "integer range [lo, hi]";
    case FieldKind::real_range:
      return "number range [lo, hi]";
    case FieldKind::choices:
      return "list of choices";
    case FieldKind::map:
      return "map";
  }
  return "?";
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
    std::string operator()(const IntRange& r) const { return fmt::format("[{}, {}]", r.lo, r.hi); }
    std::string operator()(const RealRange& r) const { return fmt::format("[{:g}, {:g}]", r.lo, r.hi); }
    std::string operator()(const Choices& c) const {
      return "[" + fmt::format("{}", fmt::join(c, ", ")) + "]";
    }
  };
  return std::visit(Visitor{}, value);
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
      bounds = fmt::format(" within [{:g}, {:g}]", f.min, f.max);
    out += fmt::format("{}{}: {}{}, default {}  — {}\n", pad, f.key, kind_name(f.kind), bounds,
                       format_value(f.fallback), f.doc);
  }
  return out;
}

}  // namespace kprop
