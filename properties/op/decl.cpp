// Parsing and checking the `op:` section of a spec (docs/SPEC.md, "Ops
// declared in the spec"). Every error is one line at file:line:col.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "properties/op/family.h"

namespace kprop::op {
namespace {

class Parser {
 public:
  explicit Parser(const DeclaredFamilyContext& ctx) : ctx_(ctx) {}

  [[noreturn]] void fail(const YAML::Node& n, const std::string& message, size_t offset = 0) const {
    throw InputError(ctx_.mark(n.IsDefined() ? n : section_, n.IsDefined() ? offset : 0), message);
  }
  YAML::Node section_;

  std::vector<std::pair<YAML::Node, YAML::Node>> entries(const YAML::Node& map,
                                                         const std::string& what) const {
    if (!map.IsMap()) fail(map, what + " must be a map");
    std::vector<std::pair<YAML::Node, YAML::Node>> out;
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it->first.IsScalar()) fail(it->first, "keys of " + what + " must be names");
      if (!seen.insert(it->first.Scalar()).second)
        fail(it->first, "duplicate key '" + it->first.Scalar() + "' in " + what);
      out.emplace_back(it->first, it->second);
    }
    return out;
  }

  void only_keys(const YAML::Node& map, const std::vector<std::string>& keys, const std::string& what) const {
    for (const auto& [k, v] : entries(map, what)) {
      (void)v;
      if (std::find(keys.begin(), keys.end(), k.Scalar()) == keys.end())
        fail(k, fmt::format("unknown key '{}' in {}{}", k.Scalar(), what, suggestion(k.Scalar(), keys)));
    }
  }

  static std::string suggestion(const std::string& word, const std::vector<std::string>& valid) {
    const std::string close = closest_match(word, valid);
    std::string out = "; valid: " + join(valid);
    if (!close.empty()) out = " (did you mean '" + close + "'?)" + out;
    return out;
  }

  template <typename T>
  T scalar(const YAML::Node& n, const std::string& what, const char* kind) const {
    if (!n.IsScalar()) fail(n, fmt::format("{} must be {}", what, kind));
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      fail(n, fmt::format("{} must be {}, got '{}'", what, kind, n.Scalar()));
    }
  }

  double number(const YAML::Node& n, const std::string& what) const {
    const double v = scalar<double>(n, what, "a number");
    if (!std::isfinite(v)) fail(n, what + " must be finite");
    return v;
  }

  static bool identifier(const std::string& s) {
    if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
    for (char c : s)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
    return true;
  }

  void name(const YAML::Node& key, std::set<std::string>& taken) const {
    const std::string& s = key.Scalar();
    if (!identifier(s)) fail(key, fmt::format("'{}' must be a name (letters, digits, '_')", s));
    static const std::set<std::string> reserved = {"target",    "reference", "naive", "floor", "transformed",
                                                   "transform", "and",       "or",    "not",   "true",
                                                   "false",     "inf",       "nan",   "close"};
    if (reserved.count(s)) fail(key, fmt::format("'{}' is reserved in expressions; pick another name", s));
    if (!taken.insert(s).second)
      fail(key, fmt::format("'{}' is declared twice (dims, attrs and tensors share one namespace)", s));
  }

  // [lo, hi] of integers, or a single integer
  std::pair<int64_t, int64_t> int_range(const YAML::Node& n, const std::string& what) const {
    int64_t lo, hi;
    if (n.IsScalar()) {
      lo = hi = scalar<int64_t>(n, what, "an integer");
    } else if (n.IsSequence() && n.size() == 2) {
      lo = scalar<int64_t>(n[0], what, "an integer");
      hi = scalar<int64_t>(n[1], what, "an integer");
    } else {
      fail(n, what + " must be [lo, hi] or one integer");
    }
    if (lo > hi) fail(n, fmt::format("{} is an inverted range [{}, {}]: lo must be <= hi", what, lo, hi));
    return {lo, hi};
  }

  DimDecl dim(const YAML::Node& key, const YAML::Node& v) const {
    DimDecl d;
    d.name = key.Scalar();
    const std::string what = "dim " + d.name;
    YAML::Node range = v;
    bool has_range = true;
    if (v.IsMap()) {
      only_keys(v, {"range", "multiple_of", "one_of"}, what);
      if (v["multiple_of"]) {
        d.multiple_of = scalar<int64_t>(v["multiple_of"], what + ".multiple_of", "an integer");
        if (d.multiple_of < 1) fail(v["multiple_of"], what + ".multiple_of must be >= 1");
      }
      if (v["one_of"]) {
        const YAML::Node list = v["one_of"];
        if (!list.IsSequence() || list.size() == 0) fail(list, what + ".one_of must be a non-empty list");
        for (const auto& e : list) d.one_of.push_back(scalar<int64_t>(e, what + ".one_of", "an integer"));
      }
      has_range = static_cast<bool>(v["range"]);
      if (has_range) {
        range.reset(v["range"]);
      } else {
        if (d.one_of.empty()) fail(v, what + " needs range: [lo, hi] or one_of: [...]");
        d.lo = *std::min_element(d.one_of.begin(), d.one_of.end());
        d.hi = *std::max_element(d.one_of.begin(), d.one_of.end());
      }
    }
    if (has_range) std::tie(d.lo, d.hi) = int_range(range, what);
    if (d.lo < 1) fail(range, fmt::format("{}: extents start at 1 (got {})", what, d.lo));
    if (d.hi > (1 << 24))
      fail(range ? range : v, fmt::format("{}: {} is too large for a test case", what, d.hi));
    for (int64_t o : d.one_of)
      if (!d.valid(o))
        fail(v["one_of"], fmt::format("{}: one_of value {} is outside [{}, {}] or not a multiple of {}", what,
                                      o, d.lo, d.hi, d.multiple_of));
    if (d.values_below(d.hi + 1).empty())
      fail(v, fmt::format("{}: no value in [{}, {}] is a multiple of {}", what, d.lo, d.hi, d.multiple_of));
    return d;
  }

  AttrDecl attr(const YAML::Node& key, const YAML::Node& v) const {
    AttrDecl a;
    a.name = key.Scalar();
    const std::string what = "attr " + a.name;
    YAML::Node one_of, range;
    bool has_one_of = false, has_range = false;
    if (v.IsScalar()) {
      a.one_of.push_back(number(v, what));
    } else if (v.IsSequence()) {
      range.reset(v);
      has_range = true;
    } else if (v.IsMap()) {
      only_keys(v, {"one_of", "range", "int"}, what);
      if (v["int"]) a.integer = scalar<bool>(v["int"], what + ".int", "true or false");
      has_one_of = static_cast<bool>(v["one_of"]);
      has_range = static_cast<bool>(v["range"]);
      if (has_one_of) one_of.reset(v["one_of"]);
      if (has_range) range.reset(v["range"]);
      if (has_one_of == has_range) fail(v, what + " needs exactly one of one_of: [...] or range: [lo, hi]");
    } else {
      fail(v, what + " must be a number, [lo, hi], {one_of: [...]} or {range: [lo, hi]}");
    }
    if (has_one_of) {
      if (!one_of.IsSequence() || one_of.size() == 0) fail(one_of, what + ".one_of must be a non-empty list");
      for (const auto& e : one_of) a.one_of.push_back(number(e, what + ".one_of"));
    }
    if (has_range) {
      if (!range.IsSequence() || range.size() != 2) fail(range, what + " range must be [lo, hi]");
      a.lo = number(range[0], what);
      a.hi = number(range[1], what);
      if (a.lo > a.hi)
        fail(range, fmt::format("{} is an inverted range [{}, {}]: lo must be <= hi", what, a.lo, a.hi));
    }
    if (a.integer)
      for (double o : a.one_of.empty() ? std::vector<double>{a.lo, a.hi} : a.one_of)
        if (o != std::floor(o)) fail(v, fmt::format("{} is an integer attr; {} is not an integer", what, o));
    return a;
  }

  std::vector<std::string> shape(const YAML::Node& n, const std::string& what, const Decl& d) const {
    if (!n) fail(n, what + " needs shape: [dims]");
    if (!n.IsSequence()) fail(n, what + ".shape must be a list of dim names or integers");
    std::vector<std::string> out;
    std::vector<std::string> names;
    for (const auto& dd : d.dims) names.push_back(dd.name);
    for (const auto& e : n) {
      const std::string s = scalar<std::string>(e, what + ".shape", "a dim name or an integer");
      if (d.dim_index(s) < 0) {
        int64_t v = 0;
        try {
          size_t used = 0;
          v = std::stoll(s, &used);
          if (used != s.size()) throw std::invalid_argument(s);
        } catch (const std::exception&) {
          fail(e, fmt::format("{}: shape names undeclared dim '{}'{}", what, s, suggestion(s, names)));
        }
        if (v < 1) fail(e, fmt::format("{}: a fixed extent must be >= 1 (got {})", what, v));
      }
      out.push_back(s);
    }
    return out;
  }

  std::vector<DType> dtypes(const YAML::Node& n, const std::string& what) const {
    std::vector<YAML::Node> items;
    if (n.IsScalar())
      items.push_back(n);
    else if (n.IsSequence())
      for (const auto& e : n) items.push_back(e);
    else
      fail(n, what + ".dtype must be f32, f64 or a list of them");
    if (items.empty()) fail(n, what + ".dtype is empty; valid: f32, f64");
    std::vector<DType> out;
    for (const auto& e : items) {
      const auto s = scalar<std::string>(e, what + ".dtype", "f32 or f64");
      if (s != "f32" && s != "f64") fail(e, fmt::format("{}: unknown dtype '{}'; valid: f32, f64", what, s));
      const DType t = s == "f32" ? DType::f32 : DType::f64;
      if (std::find(out.begin(), out.end(), t) != out.end()) fail(e, what + ".dtype lists " + s + " twice");
      out.push_back(t);
    }
    return out;
  }

  ValueSpec value_kind(const YAML::Node& key, const YAML::Node& params, const std::string& what) const {
    static const std::vector<std::string> kinds = {"normal", "uniform", "integer",
                                                   "large",  "small",   "constant_rows"};
    const auto k = scalar<std::string>(key, what + ".values", "a value kind");
    const auto found = std::find(kinds.begin(), kinds.end(), k);
    if (found == kinds.end())
      fail(key, fmt::format("{}: unknown value kind '{}'{}", what, k, suggestion(k, kinds)));
    ValueSpec v;
    v.kind = static_cast<ValueKind>(found - kinds.begin());
    const std::string w = what + ".values." + k;
    auto pair = [&](const char* a, const char* b, double da, double db) {
      v.a = da, v.b = db;
      if (!params || params.IsNull()) return;
      only_keys(params, {a, b}, w);
      if (params[a]) v.a = number(params[a], w + "." + a);
      if (params[b]) v.b = number(params[b], w + "." + b);
    };
    switch (v.kind) {
      case ValueKind::normal:
        pair("mean", "std", 0, 1);
        if (v.b < 0) fail(params, w + ".std must be >= 0");
        break;
      case ValueKind::uniform:
        pair("lo", "hi", -1, 1);
        break;
      case ValueKind::integer:
        pair("lo", "hi", -4, 4);
        if (v.a != std::floor(v.a) || v.b != std::floor(v.b))
          fail(params, w + ": lo and hi must be integers");
        break;
      case ValueKind::large:
        pair("lo", "hi", 2, 12);  // decimal exponents
        break;
      case ValueKind::small:
        pair("lo", "hi", 2, 12);  // 10^-u
        break;
      case ValueKind::constant_rows:
        pair("mean", "std", 0, 1);
        break;
    }
    if (v.kind != ValueKind::normal && v.kind != ValueKind::constant_rows && v.a > v.b)
      fail(params, fmt::format("{}: lo must be <= hi (got {} > {})", w, v.a, v.b));
    return v;
  }

  std::vector<ValueSpec> values(const YAML::Node& n, const std::string& what) const {
    std::vector<ValueSpec> out;
    if (!n) return {ValueSpec{}};
    if (n.IsScalar()) {
      out.push_back(value_kind(n, YAML::Node(), what));
    } else if (n.IsSequence()) {
      for (const auto& e : n) {
        if (e.IsMap()) {
          if (e.size() != 1) fail(e, what + ".values: each entry is KIND or {KIND: {params}}");
          auto it = e.begin();
          out.push_back(value_kind(it->first, it->second, what));
        } else {
          out.push_back(value_kind(e, YAML::Node(), what));
        }
      }
    } else if (n.IsMap()) {
      for (const auto& [k, v] : entries(n, what + ".values")) out.push_back(value_kind(k, v, what));
    } else {
      fail(n, what + ".values must be a kind, a list of kinds or {KIND: {params}}");
    }
    if (out.empty()) fail(n, what + ".values is empty");
    return out;
  }

  std::shared_ptr<const Decl> parse(const YAML::Node& s) {
    section_.reset(s);
    only_keys(s, {"name", "dims", "attrs", "inputs", "outputs", "reference"}, "op");
    auto d = std::make_shared<Decl>();
    d->name = s["name"] ? scalar<std::string>(s["name"], "op.name", "a name") : ctx_.spec_name;
    // kprop_op_device is the ABI's device query (include/kprop/abi.h).
    if (plugin_symbol(d->name) == "kprop_op_device")
      fail(s["name"] ? s["name"] : s,
           "op.name 'device' would export kprop_op_device, the ABI's device query; "
           "pick another name");
    std::set<std::string> taken;
    if (s["dims"] && !s["dims"].IsNull())
      for (const auto& [k, v] : entries(s["dims"], "op.dims")) {
        name(k, taken);
        d->dims.push_back(dim(k, v));
      }
    if (d->dims.size() > kMaxDims)
      fail(s["dims"], fmt::format("op.dims declares {} dims; at most {}", d->dims.size(), kMaxDims));
    if (s["attrs"] && !s["attrs"].IsNull())
      for (const auto& [k, v] : entries(s["attrs"], "op.attrs")) {
        name(k, taken);
        d->attrs.push_back(attr(k, v));
      }
    if (!s["inputs"] || s["inputs"].IsNull()) fail(s, "op needs inputs: {NAME: {shape: [...]}}");
    for (const auto& [k, v] : entries(s["inputs"], "op.inputs")) {
      name(k, taken);
      const std::string what = "input " + k.Scalar();
      only_keys(v, {"shape", "dtype", "values"}, what);
      InputDecl in;
      in.name = k.Scalar();
      in.shape = shape(v["shape"] ? v["shape"] : v, what, *d);
      if (v["dtype"]) in.dtypes = dtypes(v["dtype"], what);
      in.values = values(v["values"], what);
      d->inputs.push_back(std::move(in));
    }
    for (const auto& in : d->inputs)
      if (!in.dtypes.empty()) {
        d->case_dtypes = in.dtypes;
        break;
      }
    if (d->case_dtypes.empty()) d->case_dtypes = {DType::f32, DType::f64};
    if (!s["outputs"] || s["outputs"].IsNull()) fail(s, "op needs outputs: {NAME: {shape: [...]}}");
    for (const auto& [k, v] : entries(s["outputs"], "op.outputs")) {
      name(k, taken);
      const std::string what = "output " + k.Scalar();
      only_keys(v, {"shape", "dtype"}, what);
      OutputDecl out;
      out.name = k.Scalar();
      out.shape = shape(v["shape"] ? v["shape"] : v, what, *d);
      if (v["dtype"]) {
        const auto t = dtypes(v["dtype"], what);
        if (t.size() != 1) fail(v["dtype"], what + ".dtype must be one dtype (default: the case's)");
        out.dtype = t[0];
      }
      d->outputs.push_back(std::move(out));
    }
    // What reference expressions read: inputs, dims and attrs (as scalars).
    for (const auto& in : d->inputs)
      d->reference_infos.push_back({in.name, in.shape, expr::DType::real, "input " + in.name});
    for (const auto& dd : d->dims)
      d->reference_infos.push_back({dd.name, {}, expr::DType::integer, "dim " + dd.name});
    for (const auto& a : d->attrs)
      d->reference_infos.push_back(
          {a.name, {}, a.integer ? expr::DType::integer : expr::DType::real, "attr " + a.name});
    const YAML::Node ref = s["reference"];
    if (!ref || ref.IsNull())
      fail(s,
           "op needs reference: {OUTPUT: EXPR} for every output, or reference: exec:COMMAND | plugin:PATH");
    if (ref.IsScalar()) {
      const std::string target = ref.Scalar();
      if (target.rfind("exec:", 0) != 0 && target.rfind("plugin:", 0) != 0)
        fail(ref, fmt::format("reference '{}' is neither {{OUTPUT: EXPR}} nor exec:COMMAND / plugin:PATH",
                              target));
      if (target.find_first_not_of(" \t", target.find(':') + 1) == std::string::npos)
        fail(ref, fmt::format("reference '{}' names no command or path", target));
      // Started from the spec's folder: paths in it are relative to the spec.
      const std::string file = ctx_.mark(ref, 0).file;
      const auto slash = file.rfind('/');
      d->external_reference =
          external_reference(target, slash == std::string::npos ? "." : file.substr(0, slash), d->name);
      return d;
    }
    std::vector<std::string> outs;
    for (const auto& o : d->outputs) outs.push_back(o.name);
    for (const auto& [k, v] : entries(ref, "op.reference")) {
      auto it = std::find(outs.begin(), outs.end(), k.Scalar());
      if (it == outs.end())
        fail(k, fmt::format("reference for '{}', which is not a declared output{}", k.Scalar(),
                            suggestion(k.Scalar(), outs)));
      OutputDecl& o = d->outputs[static_cast<size_t>(it - outs.begin())];
      const auto text = scalar<std::string>(v, "reference." + o.name, "an expression");
      try {
        auto e = std::make_shared<expr::Expression>(expr::Expression::compile(text, d->reference_infos));
        if (e->dtype() == expr::DType::boolean)
          throw expr::ExprError(0, "is boolean; a reference computes the output's values");
        if (e->shape() != expr::shape_text(o.shape))
          throw expr::ExprError(0, fmt::format("has shape {}, but output {} is declared {}", e->shape(),
                                               o.name, expr::shape_text(o.shape)));
        o.reference = std::move(e);
      } catch (const expr::ExprError& err) {
        fail(v, fmt::format("reference.{}: {}", o.name, err.what()), err.offset);
      }
    }
    for (const auto& o : d->outputs)
      if (!o.reference) fail(ref, fmt::format("output '{}' has no reference expression", o.name));
    return d;
  }

 private:
  const DeclaredFamilyContext& ctx_;
};

}  // namespace

std::shared_ptr<const Decl> parse_decl(const YAML::Node& section, const DeclaredFamilyContext& context) {
  return Parser(context).parse(section);
}

}  // namespace kprop::op
