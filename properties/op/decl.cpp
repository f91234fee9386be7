// Parsing and checking the `op:` section of a spec (docs/SPEC.md, "Ops
// declared in the spec"). Every error is one line at file:line:col.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <regex>
#include <set>

#include "kprop/abi.h"
#include "kprop/yaml_load.h"
#include "properties/op/family.h"

namespace kprop::op {
namespace {

// A reference's symbolic shape ("[N, ?]") against an output's declared one:
// the same rank, each axis the same dim or number, or "?" (a slice's extent,
// `x[:, C - 1:]` or `[:, -1:]`, unknown until a case fixes it: each case's
// evaluation checks the actual extents, op::reference).
bool shape_fits(const std::string& symbolic, const std::vector<std::string>& declared) {
  std::vector<std::string> axes;
  const std::string inner = symbolic.size() >= 2 ? symbolic.substr(1, symbolic.size() - 2) : "";
  for (size_t at = 0; !inner.empty();) {
    const size_t comma = inner.find(", ", at);
    axes.push_back(inner.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 2;
  }
  if (axes.size() != declared.size()) return false;
  for (size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != "?" && axes[k] != declared[k]) return false;
  return true;
}

class Parser {
 public:
  explicit Parser(const DeclaredFamilyContext& ctx) : ctx_(ctx) {}

  [[noreturn]] void fail(const YAML::Node& n, const std::string& message, size_t offset = 0) const {
    throw InputError(ctx_.mark(n.IsDefined() ? n : section_, n.IsDefined() ? offset : 0), message);
  }
  YAML::Node section_;

  std::vector<std::pair<YAML::Node, YAML::Node>> entries(const YAML::Node& map,
                                                         const std::string& what) const {
    return map_entries(map, what, [&](const YAML::Node& n, const std::string& m) { fail(n, m); });
  }

  void only_keys(const YAML::Node& map, const std::vector<std::string>& keys, const std::string& what) const {
    for (const auto& [k, v] : entries(map, what)) {
      (void)v;
      if (std::find(keys.begin(), keys.end(), k.Scalar()) == keys.end())
        fail(k, fmt::format("unknown key '{}' in {}{}", k.Scalar(), what, suggestion(k.Scalar(), keys)));
    }
  }

  template <typename T>
  T scalar(const YAML::Node& n, const std::string& what, const char* kind) const {
    return scalar_as<T>(n, what, kind, [&](const YAML::Node& at, const std::string& m) { fail(at, m); });
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
    static const std::set<std::string> reserved = {
        "target", "reference", "naive", "floor",         "transformed",   "transform", "and",
        "or",     "not",       "true",  "false",         "True",          "False",     "None",
        "inf",    "nan",       "close", "unit_roundoff", "store_roundoff"};
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
        // At most 2^24 (the largest extent): no sum with it overflows.
        if (d.multiple_of > (1 << 24))
          fail(v["multiple_of"],
               fmt::format("{}.multiple_of {} is larger than any extent (2^24)", what, d.multiple_of));
      }
      if (v["one_of"]) {
        const YAML::Node list = v["one_of"];
        if (!list.IsSequence() || list.size() == 0) fail(list, what + ".one_of must be a non-empty list");
        for (const auto& e : list) {
          const auto o = scalar<int64_t>(e, what + ".one_of", "an integer");
          if (std::find(d.one_of.begin(), d.one_of.end(), o) != d.one_of.end())
            fail(e, fmt::format("{}.one_of lists {} twice", what, o));
          d.one_of.push_back(o);
        }
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

  // near: {values: EXPR, rate: R, distance: [lo, hi]} of a real range attr;
  // EXPR is compiled once the inputs are declared (compile_near).
  void near(const YAML::Node& n, AttrDecl& a, const std::string& what) const {
    const std::string w = what + ".near";
    if (a.one_of.size() > 0 || a.integer || !a.labels.empty())
      fail(n, w + " is for a real range attr ({range: [lo, hi], near: ...})");
    if (!n.IsMap()) fail(n, w + " must be {values: EXPR, rate: R, distance: [lo, hi]}");
    only_keys(n, {"values", "rate", "distance"}, w);
    if (!n["values"]) fail(n, w + " needs values: EXPR (the values to draw the attr next to)");
    a.near_rate = 0.25;
    if (n["rate"]) {
      a.near_rate = number(n["rate"], w + ".rate");
      if (!(a.near_rate > 0 && a.near_rate <= 1)) fail(n["rate"], w + ".rate must be in (0, 1]");
    }
    a.near_lo = 1e-15, a.near_hi = 1e-3;
    if (n["distance"]) {
      const YAML::Node r = n["distance"];
      if (!r.IsSequence() || r.size() != 2) fail(r, w + ".distance must be [lo, hi] (relative distances)");
      a.near_lo = number(r[0], w + ".distance");
      a.near_hi = number(r[1], w + ".distance");
      if (!(a.near_lo > 0 && a.near_lo <= a.near_hi && a.near_hi <= 1))
        fail(r, fmt::format("{}.distance [{}, {}] must hold 0 < lo <= hi <= 1 (drawn log-uniformly, relative "
                            "to the value)",
                            w, a.near_lo, a.near_hi));
    }
  }

  // Each near: expression, on the inputs, dims and the other attrs: real,
  // of any shape (every element a value to draw next to).
  void compile_near(const YAML::Node& attrs, Decl& d) const {
    for (auto& a : d.attrs) {
      if (a.near_rate == 0) continue;
      const YAML::Node n = attrs[a.name]["near"]["values"];
      expr::TensorInfos infos;
      for (const auto& i : d.reference_infos)
        if (i.name != a.name) infos.push_back(i);
      const auto text = scalar<std::string>(n, "attr " + a.name + ".near.values", "an expression");
      try {
        auto e = std::make_shared<expr::Expression>(expr::Expression::compile(text, infos));
        if (e->dtype() == expr::DType::boolean)
          throw expr::ExprError(0, "is boolean; near.values gives the numbers to draw the attr next to");
        a.near = std::move(e);
        a.near_mark = ctx_.mark(n, 0);
      } catch (const expr::ExprError& err) {
        // (Its own value is what near: draws: the expression cannot read it.)
        if (std::string(err.what()).rfind("unknown name '" + a.name + "'", 0) == 0)
          fail(n,
               fmt::format(
                   "attr {}.near.values reads {} itself (near: draws {} next to these values; they are "
                   "read from the inputs, dims and other attrs): {}",
                   a.name, a.name, a.name, err.what()),
               err.offset);
        fail(n, fmt::format("attr {}.near.values: {}", a.name, err.what()), err.offset);
      }
    }
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
      only_keys(v, {"one_of", "range", "int", "near"}, what);
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
      double ignored = 0;
      size_t names = 0;
      for (const auto& e : one_of)
        names += e.IsScalar() && !YAML::convert<double>::decode(e, ignored) ? 1 : 0;
      if (names == 0) {
        for (const auto& e : one_of) {
          const double o = number(e, what + ".one_of");
          if (std::find(a.one_of.begin(), a.one_of.end(), o) != a.one_of.end())
            fail(e, fmt::format("{}.one_of lists {} twice", what, o));
          a.one_of.push_back(o);
        }
      } else {
        // Named choices: every one a distinct name; the case holds its index.
        for (const auto& e : one_of) {
          if (!e.IsScalar() || YAML::convert<double>::decode(e, ignored))
            fail(e, what + ".one_of mixes names and numbers; use one or the other");
          if (std::find(a.labels.begin(), a.labels.end(), e.Scalar()) != a.labels.end())
            fail(e, fmt::format("{}.one_of lists '{}' twice", what, e.Scalar()));
          a.one_of.push_back(static_cast<double>(a.labels.size()));
          a.labels.push_back(e.Scalar());
        }
        a.integer = true;
      }
    }
    if (has_range) {
      if (!range.IsSequence() || range.size() != 2)
        fail(range,
             what + " range must be [lo, hi]" +
                 (range.IsSequence() && range.size() == 1
                      ? std::string(" (a one-element list: write the number alone for a fixed value, or "
                                    "{one_of: [...]})")
                      : std::string()));
      a.lo = number(range[0], what);
      a.hi = number(range[1], what);
      if (a.lo > a.hi)
        fail(range, fmt::format("{} is an inverted range [{}, {}]: lo must be <= hi", what, a.lo, a.hi));
      // A draw is lo + u (hi - lo): a width past the double's range drew ±inf.
      if (!std::isfinite(a.hi - a.lo))
        fail(range, fmt::format("{} range [{}, {}] is wider than a double holds (hi - lo overflows)", what,
                                a.lo, a.hi));
    }
    if (v.IsMap() && v["near"]) near(v["near"], a, what);
    // Whole numbers within ±2^53: exact in the double the case holds, and in the int64 it is sent as.
    if (a.integer)
      for (double o : a.one_of.empty() ? std::vector<double>{a.lo, a.hi} : a.one_of) {
        if (o != std::floor(o)) fail(v, fmt::format("{} is an integer attr; {} is not an integer", what, o));
        if (std::fabs(o) > 0x1p53)
          fail(v, fmt::format("{} is an integer attr; {} is outside [-2^53, 2^53]", what, o));
      }
    return a;
  }

  // `s` read whole as an integer (std::stoll), or none.
  static std::optional<int64_t> whole_number(const std::string& s) {
    try {
      size_t used = 0;
      const int64_t v = std::stoll(s, &used);
      if (used == s.size()) return v;
    } catch (const std::exception&) {
    }
    return std::nullopt;
  }
  static std::vector<std::string> dim_names(const Decl& d) {
    std::vector<std::string> names;
    for (const auto& dd : d.dims) names.push_back(dd.name);
    return names;
  }

  std::vector<std::string> shape(const YAML::Node& n, const std::string& what, const Decl& d) const {
    if (!n) fail(n, what + " needs shape: [dims]");
    if (!n.IsSequence()) fail(n, what + ".shape must be a list of dim names or integers");
    // A spec runs against any kind of target, and a plugin's tensor views
    // carry KPROP_MAX_DIMS axes: a 7-axis op loaded, and every case of a
    // plugin: target was "the target's error" (kprop's own refusal).
    if (n.size() > KPROP_MAX_DIMS)
      fail(n, fmt::format("{}.shape has {} axes; a shape has at most {} (KPROP_MAX_DIMS: the axes a kernel's "
                          "tensor view carries, include/kprop/abi.h)",
                          what, n.size(), KPROP_MAX_DIMS));
    std::vector<std::string> out;
    for (const auto& e : n) {
      const std::string s = scalar<std::string>(e, what + ".shape", "a dim name or an integer");
      if (d.dim_index(s) < 0) {
        const auto v = whole_number(s);
        if (!v)
          fail(e, fmt::format("{}: shape names undeclared dim '{}'{}", what, s, suggestion(s, dim_names(d))));
        if (*v < 1 || *v > (int64_t{1} << 24))
          fail(e,
               fmt::format("{}: a fixed extent must be in [1, 2^24], as a dim's range (got {})", what, *v));
      }
      out.push_back(s);
    }
    return out;
  }

  // `key`: where, e.g. "input x.dtype".
  std::vector<DType> dtypes(const YAML::Node& n, const std::string& key) const {
    // In the order of DType (kernels/op/op.h), so a name's index is its DType.
    static const std::vector<std::string> names = [] {
      std::vector<std::string> all;
      for (size_t t = 0; t <= size_t(kLastDType); ++t) all.emplace_back(dtype_name(static_cast<DType>(t)));
      return all;
    }();
    const auto items = scalar_or_list(n);
    if (!items) fail(n, key + " must be a dtype or a list of them; valid: " + join(names));
    if (items->empty()) fail(n, key + " is empty; valid: " + join(names));
    const auto picked = distinct_names(*items, names, key, "dtype",
                                       [&](const YAML::Node& at, const std::string& m) { fail(at, m); });
    std::vector<DType> out;
    for (size_t i = 0; i < picked.size(); ++i) {
      const DType t = static_cast<DType>(picked[i]);
      const YAML::Node& e = (*items)[i];
      const std::string& s = names[picked[i]];
      if (!out.empty() &&
          (is_float(t) != is_float(out[0]) || (t == DType::boolean) != (out[0] == DType::boolean)))
        fail(e, fmt::format("{} mixes {} and {}: a tensor is floating, integer or bool", key,
                            dtype_name(out[0]), s));
      out.push_back(t);
    }
    return out;
  }

  // The kinds of values an input of dtype class `cls` takes (f: floating, i: integer, b: bool).
  static const std::vector<std::string>& kinds_of(char cls) {
    static const std::vector<std::string> f = {"normal", "uniform",       "integer", "large",
                                               "small",  "constant_rows", "denormal"};
    static const std::vector<std::string> i = {"ids", "permutation", "integer"};
    static const std::vector<std::string> b = {"causal", "padding", "bernoulli"};
    return cls == 'f' ? f : cls == 'i' ? i : b;
  }

  ValueSpec value_kind(const YAML::Node& key, const YAML::Node& params, const std::string& what, char cls,
                       const std::vector<std::string>& shape, const Decl& d) const {
    static const std::vector<std::string> all = {"normal",      "uniform",       "integer",  "large",
                                                 "small",       "constant_rows", "denormal", "ids",
                                                 "permutation", "causal",        "padding",  "bernoulli"};
    const auto k = scalar<std::string>(key, what + ".values", "a value kind");
    const auto& valid = kinds_of(cls);
    const auto found = std::find(all.begin(), all.end(), k);
    if (found == all.end())
      fail(key, fmt::format("{}: unknown value kind '{}'{}", what, k, suggestion(k, valid)));
    if (std::find(valid.begin(), valid.end(), k) == valid.end())
      fail(key, fmt::format("{}: value kind '{}' is not for {} tensor; valid: {}", what, k,
                            cls == 'f'   ? "a floating"
                            : cls == 'i' ? "an integer (i8, u8, i32, i64)"
                                         : "a bool",
                            join(valid)));
    ValueSpec v;
    v.kind = static_cast<ValueKind>(found - all.begin());
    const std::string w = what + ".values." + k;
    auto pair = [&](const char* a, const char* b, double da, double db) {
      v.a = da, v.b = db;
      if (!params || params.IsNull()) return;
      only_keys(params, {a, b}, w);
      if (params[a]) v.a = number(params[a], w + "." + a);
      if (params[b]) v.b = number(params[b], w + "." + b);
    };
    auto keys = [&](const std::vector<std::string>& ks) {
      if (params && !params.IsNull()) only_keys(params, ks, w);
    };
    const YAML::Node at = params && !params.IsNull() ? params : key;
    const int rank = static_cast<int>(shape.size());
    // A draw is mean + std z, |z| <= sqrt(-2 ln 2^-54) = 8.65 (rng::normal:
    // Box-Muller with u1 >= 2^-54), or lo + (hi - lo) u: parameters whose
    // draws pass the double's range would draw +-inf or NaN.
    constexpr double kMaxNormal = 9;
    const auto finite_draws = [&](const YAML::Node& where, const std::string& of, double span,
                                  const char* sum) {
      if (!std::isfinite(span))
        fail(where, fmt::format("{}: {} overflows a double (its draws would be +-inf)", of, sum));
    };
    switch (v.kind) {
      case ValueKind::normal:
        pair("mean", "std", 0, 1);
        if (v.b < 0) fail(params, w + ".std must be >= 0");
        finite_draws(at, w, std::fabs(v.a) + kMaxNormal * v.b, "|mean| + 9 std");
        break;
      case ValueKind::uniform:
        pair("lo", "hi", -1, 1);
        break;
      case ValueKind::integer:
        pair("lo", "hi", -4, 4);
        if (v.a != std::floor(v.a) || v.b != std::floor(v.b))
          fail(params, w + ": lo and hi must be integers");
        if (cls == 'i' && (v.a < op::int_range(DType::i32).first || v.b > op::int_range(DType::i32).second))
          fail(params, w + ": lo and hi must fit in i32");
        break;
      case ValueKind::large:
        pair("lo", "hi", 2, 12);  // decimal exponents
        break;
      case ValueKind::small:
        pair("lo", "hi", 2, 12);  // 10^-u
        break;
      case ValueKind::constant_rows:
        pair("mean", "std", 0, 1);
        if (v.b < 0) fail(params, w + ".std must be >= 0");
        finite_draws(at, w, std::fabs(v.a) + kMaxNormal * v.b, "|mean| + 9 std");
        break;
      case ValueKind::denormal:
        keys({});
        break;
      case ValueKind::ids: {
        keys({"below"});
        if (!(params && params.IsMap() && params["below"]))
          fail(at, w + " needs below: V (a dim or a positive integer): ids are in [0, V)");
        const YAML::Node below = params["below"];
        const auto text = scalar<std::string>(below, w + ".below", "a dim or a positive integer");
        v.bound_dim = d.dim_index(text);
        if (v.bound_dim < 0) {
          const auto n = whole_number(text);
          if (!n)
            fail(below, fmt::format("{}.below: '{}' is neither a dim nor a positive integer{}", w, text,
                                    suggestion(text, dim_names(d))));
          if (*n < 1 || *n > (int64_t{1} << 31))
            fail(below, fmt::format("{}.below must be in [1, 2^31] (got {})", w, *n));
          v.a = static_cast<double>(*n);
        }
        break;
      }
      case ValueKind::permutation: {
        keys({"axis"});
        if (rank == 0) fail(at, w + ": a permutation needs at least one axis");
        int64_t axis = -1;
        if (params && params.IsMap() && params["axis"])
          axis = scalar<int64_t>(params["axis"], w + ".axis", "an integer");
        if (axis < -rank || axis >= rank)
          fail(params && params.IsMap() && params["axis"] ? params["axis"] : at,
               fmt::format("{}.axis {} is out of range for shape {}", w, axis, expr::shape_text(shape)));
        v.axis = static_cast<int>(axis < 0 ? axis + rank : axis);
        break;
      }
      case ValueKind::causal: {
        keys({"align"});
        if (rank < 2)
          fail(at, fmt::format("{}: a causal mask needs 2 axes [.., rows, cols]; shape {} has {}", w,
                               expr::shape_text(shape), rank));
        if (params && params.IsMap() && params["align"]) {
          const auto a = scalar<std::string>(params["align"], w + ".align", "top_left or bottom_right");
          if (a != "top_left" && a != "bottom_right")
            fail(params["align"], fmt::format("{}.align: '{}'; valid: top_left, bottom_right", w, a));
          v.bottom_right = a == "bottom_right";
        }
        break;
      }
      case ValueKind::padding:
        keys({"min"});
        if (rank < 1) fail(at, w + ": a padding mask needs an axis (per row along the last one)");
        v.a = 1;
        if (params && params.IsMap() && params["min"]) {
          v.a = static_cast<double>(scalar<int64_t>(params["min"], w + ".min", "an integer"));
          if (v.a < 0) fail(params["min"], w + ".min must be >= 0");
        }
        break;
      case ValueKind::bernoulli:
        keys({"p"});
        v.a = 0.5;
        if (params && params.IsMap() && params["p"]) v.a = number(params["p"], w + ".p");
        if (v.a < 0 || v.a > 1) fail(params["p"], fmt::format("{}.p must be in [0, 1] (got {})", w, v.a));
        break;
    }
    if ((v.kind == ValueKind::uniform || v.kind == ValueKind::integer || v.kind == ValueKind::large ||
         v.kind == ValueKind::small) &&
        v.a > v.b)
      fail(params, fmt::format("{}: lo must be <= hi (got {} > {})", w, v.a, v.b));
    if (v.kind == ValueKind::uniform || v.kind == ValueKind::integer)
      finite_draws(at, w, v.b - v.a, "hi - lo");
    return v;
  }

  // Every value an integer input's kinds can draw is within each of its
  // dtypes (an i8 input's ids below 300 would wrap on the way to the kernel).
  void fits_dtypes(const YAML::Node& at, const std::string& what, const InputDecl& in, const Decl& d) const {
    const auto extent = [&](const std::string& dim) {
      const int i = d.dim_index(dim);
      return i >= 0 ? d.dims[static_cast<size_t>(i)].largest() : std::stoll(dim);
    };
    for (const ValueSpec& v : in.values) {
      double lo = 0, hi = 0;
      const char* kind = "";
      switch (v.kind) {
        case ValueKind::integer:
          lo = v.a, hi = v.b, kind = "integer";
          break;
        case ValueKind::ids:
          hi = (v.bound_dim >= 0 ? static_cast<double>(d.dims[static_cast<size_t>(v.bound_dim)].largest())
                                 : v.a) -
               1;
          kind = "ids";
          break;
        case ValueKind::permutation:
          hi = static_cast<double>(extent(in.shape[static_cast<size_t>(v.axis)])) - 1, kind = "permutation";
          break;
        default:
          continue;
      }
      for (const DType t : in.dtypes)
        if (const auto [tlo, thi] = op::int_range(t); lo < tlo || hi > thi)
          fail(at, fmt::format("{}.values.{} draws values in [{}, {}], outside {} ([{}, {}])", what, kind, lo,
                               hi, dtype_name(t), tlo, thi));
    }
  }

  std::vector<ValueSpec> values(const YAML::Node& n, const std::string& what, char cls,
                                const std::vector<std::string>& shape, const Decl& d) const {
    std::vector<ValueSpec> out;
    auto kind = [&](const YAML::Node& k, const YAML::Node& p) {
      out.push_back(value_kind(k, p, what, cls, shape, d));
    };
    if (n.IsScalar()) {
      kind(n, YAML::Node());
    } else if (n.IsSequence()) {
      for (const auto& e : n) {
        if (e.IsMap()) {
          if (e.size() != 1) fail(e, what + ".values: each entry is KIND or {KIND: {params}}");
          auto it = e.begin();
          kind(it->first, it->second);
        } else {
          kind(e, YAML::Node());
        }
      }
    } else if (n.IsMap()) {
      for (const auto& [k, v] : entries(n, what + ".values")) kind(k, v);
    } else {
      fail(n, what + ".values must be a kind, a list of kinds or {KIND: {params}}");
    }
    if (out.empty()) fail(n, what + ".values is empty");
    return out;
  }

  // specials: RATE | {rate: RATE, values: [nan, inf, -inf, 0, -0, denormal, max, -nan]}
  // (default: the first six; `max` and `-nan` only when listed)
  Specials specials(const YAML::Node& n, const std::string& what) const {
    static const std::vector<std::string> names = {"nan", "inf",      "-inf", "0",
                                                   "-0",  "denormal", "max",  "-nan"};
    const std::string w = what + ".specials";
    Specials s;
    YAML::Node rate = n;
    if (n.IsMap()) {
      only_keys(n, {"rate", "values"}, w);
      if (!n["rate"]) fail(n, w + " needs rate: (0, 1]");
      rate.reset(n["rate"]);
      if (n["values"]) {
        const YAML::Node list = n["values"];
        if (!list.IsSequence() || list.size() == 0) fail(list, w + ".values must be a non-empty list");
        // A finite number is a value of its own (254, 0.5); the rest name one.
        std::vector<YAML::Node> named;
        for (const YAML::Node& e : list) {
          const std::optional<double> v =
              e.IsScalar() && std::find(names.begin(), names.end(), e.Scalar()) == names.end()
                  ? finite_number(e.Scalar())
                  : std::nullopt;
          if (!v) {
            named.push_back(e);
            continue;
          }
          if (!std::isfinite(*v))
            fail(e, fmt::format("{}.values: {} is no finite number (name inf, -inf or max instead)", w,
                                e.Scalar()));
          if (std::find(s.finite.begin(), s.finite.end(), *v) != s.finite.end())
            fail(e, fmt::format("{}.values lists {} twice", w, e.Scalar()));
          s.finite.push_back(*v);
          finite_marks_.push_back({what, *v, e});
        }
        if (!named.empty())
          for (size_t i : distinct_names(named, names, w + ".values", "special value",
                                         [&](const YAML::Node&at, const std::string&m) { fail(at, m); }))
            s.values.push_back(static_cast<Special>(i));
      }
    }
    s.rate = rate_of(rate, w);
    if (s.values.empty() && s.finite.empty())
      for (size_t k = 0; k < static_cast<size_t>(Special::max); ++k)
        s.values.push_back(static_cast<Special>(k));
    return s;
  }

  // The number a scalar spells in full (strtod's reading; "0x10", "1e3"),
  // or nullopt: a name (nan, denormal) or anything else.
  static std::optional<double> finite_number(const std::string& text) {
    if (text.empty()) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size()) return std::nullopt;
    const char c = text[text[0] == '-' || text[0] == '+' ? 1 : 0];
    if (!(c >= '0' && c <= '9') && c != '.') return std::nullopt;  // "inf", "nan" are names
    return v;
  }

  // The finite specials' dtypes, once every input is read (an input
  // without dtypes takes the case's, known only then): each value must
  // reach the kernel as written.
  void check_finite_specials(const Decl& d) const {
    for (const auto& [what, v, at] : finite_marks_)
      for (const InputDecl& in : d.inputs)
        if (what == "input " + in.name)
          for (const DType t : in.dtypes.empty() ? d.case_dtypes : in.dtypes)
            if (round_to(t, v) != v)
              fail(at, fmt::format("{}.specials.values: {} is not exact in {} (it would reach the kernel as "
                                   "{}); list values the dtype holds",
                                   what, at.Scalar(), dtype_name(t), round_to(t, v)));
  }

  double rate_of(const YAML::Node& rate, const std::string& w) const {
    const double r = number(rate, w + ".rate");
    if (!(r > 0 && r <= 1)) fail(rate, fmt::format("{}.rate must be in (0, 1] (got {})", w, r));
    return r;
  }

  // An integer input's specials: {rate: RATE, values: [INT, ...]}, its
  // sentinels (Specials). Each is an integer within every dtype of the
  // input (fits_dtypes' rule: it reaches the kernel in that dtype) and
  // outside every kind's values, so a sentinel is never an ordinary id that
  // a transform would remap or shrinking would keep as one. A permutation
  // has no room for one: a line holding it is no permutation.
  Specials sentinels(const YAML::Node& n, const std::string& what, const InputDecl& in, const Decl& d) const {
    const std::string w = what + ".specials";
    if (!n.IsMap() || !n["values"])
      fail(n, w + ": an integer input lists its special values: {rate: R, values: [-100, ...]}");
    only_keys(n, {"rate", "values"}, w);
    if (!n["rate"]) fail(n, w + " needs rate: (0, 1]");
    for (const ValueSpec& v : in.values)
      if (v.kind == ValueKind::permutation)
        fail(n, w + ": a permutation takes no special values (a line holding one is no permutation)");
    Specials s;
    s.rate = rate_of(n["rate"], w);
    const YAML::Node list = n["values"];
    if (!list.IsSequence() || list.size() == 0)
      fail(list, w + ".values must be a non-empty list of integers");
    for (const auto& e : list) {
      const double v = number(e, w + ".values");
      if (v != std::floor(v)) fail(e, fmt::format("{}.values: {} is not an integer", w, e.Scalar()));
      // A case holds every value as a double: exact within ±2^53 only (2^53
      // + 1 read as a double is 2^53, another sentinel than the one listed).
      const std::optional<int64_t> exact = whole_number(e.Scalar());
      if (std::fabs(v) > 0x1p53 || (exact && (*exact > (int64_t{1} << 53) || *exact < -(int64_t{1} << 53))))
        fail(e, fmt::format("{}.values: {} is outside ±2^53, where a case's values (doubles) are exact", w,
                            e.Scalar()));
      if (s.sentinel(v)) fail(e, fmt::format("{}.values lists {} twice", w, v));
      for (const DType t : in.dtypes)
        if (const auto [lo, hi] = op::int_range(t); v < lo || v > hi)
          fail(e, fmt::format("{}.values: {} is outside {} ([{}, {}])", w, v, dtype_name(t), lo, hi));
      for (const ValueSpec& k : in.values) {
        double lo = 0, hi = -1;
        if (k.kind == ValueKind::integer) lo = k.a, hi = k.b;
        if (k.kind == ValueKind::ids)
          hi = (k.bound_dim >= 0 ? static_cast<double>(d.dims[static_cast<size_t>(k.bound_dim)].largest())
                                 : k.a) -
               1;
        if (v >= lo && v <= hi)
          fail(e,
               fmt::format("{}.values: {} is a value {} draws ([{}, {}]); a special value lies outside them",
                           w, v, value_kind_name(k.kind), lo, hi));
      }
      s.sentinels.push_back(v);
    }
    return s;
  }

  // relations: ["A >= B", {equal: [A, B], rate: R}, ...]
  void relations(const YAML::Node& n, Decl& d) const {
    if (!n.IsSequence()) fail(n, "op.relations must be a list of \"A OP B\" or {equal: [A, B], rate: R}");
    std::vector<std::string> names;
    for (const auto& dd : d.dims) names.push_back(dd.name);
    auto dim_at = [&](const YAML::Node& node, const std::string& s, size_t offset) {
      const int k = d.dim_index(s);
      if (k < 0)
        fail(node, fmt::format("op.relations: '{}' is not a declared dim{}", s, suggestion(s, names)),
             offset);
      return k;
    };
    std::vector<std::pair<YAML::Node, size_t>> soft;  // each equality at a rate, and its index
    for (const auto& e : n) {
      Relation r;
      if (e.IsScalar()) {
        const std::string& t = e.Scalar();
        static const std::vector<std::pair<std::string, RelOp>> ops = {
            {"<=", RelOp::le}, {">=", RelOp::ge}, {"==", RelOp::eq}, {"<", RelOp::lt}, {">", RelOp::gt}};
        size_t at = std::string::npos, len = 0;
        for (const auto& [o, op] : ops) {
          const size_t p = t.find(o);
          if (p != std::string::npos) {
            at = p, len = o.size(), r.op = op;
            break;
          }
        }
        const std::string form = fmt::format(
            "op.relations: '{}' must be A OP B, A OP B + N, A OP B - N or A OP M * B (+ or - N), with OP one "
            "of <, <=, ==, >=, > and M >= 1, N integers",
            t);
        if (at == std::string::npos) fail(e, form);
        auto trimmed = [&](size_t from, size_t to, size_t& offset) {
          while (from < to && t[from] == ' ') ++from;
          while (to > from && t[to - 1] == ' ') --to;
          offset = from;
          return t.substr(from, to - from);
        };
        size_t oa = 0, ob = 0;
        const std::string a = trimmed(0, at, oa), rhs = trimmed(at + len, t.size(), ob);
        // B's side: [M *] B [(+|-) N] (a conv's state S == K - 1, a stride's T2 == 2 * T).
        static const std::regex affine(
            R"(^(?:(\d{1,9})\s*\*\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*(?:([+-])\s*(\d{1,9}))?$)");
        std::smatch m;
        if (!identifier(a) || !std::regex_match(rhs, m, affine)) fail(e, form);
        const std::string b = m[2].str();
        if (m[1].matched) r.scale = std::stoll(m[1].str());
        if (m[4].matched) r.offset = (m[3].str() == "-" ? -1 : 1) * std::stoll(m[4].str());
        if (r.scale < 1) fail(e, form);
        r.a = dim_at(e, a, oa);
        r.b = dim_at(e, b, ob + static_cast<size_t>(m.position(2)));
      } else if (e.IsMap()) {
        only_keys(e, {"equal", "rate"}, "op.relations entry");
        const YAML::Node eq = e["equal"];
        if (!eq || !eq.IsSequence() || eq.size() != 2)
          fail(eq ? eq : e, "op.relations: equal: takes two dims [A, B]");
        r.a = dim_at(eq[0], scalar<std::string>(eq[0], "op.relations.equal", "a dim"), 0);
        r.b = dim_at(eq[1], scalar<std::string>(eq[1], "op.relations.equal", "a dim"), 0);
        r.op = RelOp::eq;
        if (e["rate"]) {
          r.rate = number(e["rate"], "op.relations.rate");
          if (!(r.rate > 0 && r.rate <= 1))
            fail(e["rate"], fmt::format("op.relations: rate must be in (0, 1] (got {})", r.rate));
        }
      } else {
        fail(e, "op.relations: each entry is \"A OP B\" or {equal: [A, B], rate: R}");
      }
      if (r.a == r.b) fail(e, "op.relations: a relation between a dim and itself");
      d.relations.push_back(r);
      // A hard relation: satisfiable with the hard relations before it (the
      // error is at the one that completes a contradiction). An equality at
      // a rate is forced against every hard relation, also those after it:
      // checked once all are read.
      if (r.hard())
        satisfiable(e, d, {}, "the relations before it");
      else
        soft.push_back({e, d.relations.size() - 1});
    }
    for (const auto& [e, i] : soft) satisfiable(e, d, {d.relations[i]}, "the relations that always hold");
  }

  // Fails at `e` (the relation d.relations.back() or extra's) unless some
  // assignment of the dims satisfies the hard relations of `d` and `extra`.
  void satisfiable(const YAML::Node& e, const Decl& d, const std::vector<Relation>& extra,
                   const std::string& others) const {
    const std::string text = (extra.empty() ? d.relations.back() : extra[0]).text(d.dims);
    const auto dom = d.consistent_domains({}, extra);
    for (size_t k = 0; k < dom.size(); ++k)
      if (dom[k].empty())
        fail(e, fmt::format(
                    "op.relations: {} cannot hold with the dims' ranges and {} (dim {} has no value left)",
                    text, others, d.dims[k].name));
    // Arc consistency alone misses gaps (multiple_of, one_of): search.
    if (!d.extends(std::vector<int64_t>(d.dims.size(), -1), extra))
      fail(e, fmt::format("op.relations: {} cannot hold with the dims' valid values and {}", text, others));
  }

  // An attr's name in a domain narrows the attr to some of the values
  // op.attrs declares, in an attr's grammar (a number, [lo, hi],
  // {one_of: [...]}, {range: [lo, hi]}; a named choice's names): the
  // declaration is the contract, and a corpus file is held to it, so a
  // value it does not allow would be drawn here and refused on replay. Its
  // kind (int:, named) and near: stay the declaration's.
  AttrDecl narrowed_attr(const AttrDecl& declared, const YAML::Node& key, const YAML::Node& v) const {
    const std::string what = "attr " + declared.name;
    if (v.IsMap()) only_keys(v, {"one_of", "range"}, what + " in a domain (int: and near: stay op.attrs')");
    AttrDecl a = declared;
    a.one_of.clear();
    if (!declared.labels.empty()) {
      const YAML::Node list = v.IsMap() ? v["one_of"] : v;
      if (!list || !(list.IsScalar() || list.IsSequence()) || (list.IsSequence() && list.size() == 0))
        fail(v,
             fmt::format("{} is a named choice: give some of its names ({})", what, join(declared.labels)));
      std::vector<YAML::Node> names;
      if (list.IsScalar()) names.push_back(list);
      for (const auto& e : list)
        if (list.IsSequence()) names.push_back(e);
      for (const YAML::Node& e : names) {
        const auto at = e.IsScalar() ? std::ranges::find(declared.labels, e.Scalar()) : declared.labels.end();
        if (at == declared.labels.end())
          fail(e, fmt::format("{}: '{}' is not one of its choices{}", what, e.IsScalar() ? e.Scalar() : "?",
                              suggestion(e.IsScalar() ? e.Scalar() : "", declared.labels)));
        const double index = static_cast<double>(at - declared.labels.begin());
        if (std::ranges::find(a.one_of, index) != a.one_of.end())
          fail(e, fmt::format("{}.one_of lists '{}' twice", what, e.Scalar()));
        a.one_of.push_back(index);
      }
      return a;
    }
    const AttrDecl p = attr(key, v);
    if (!p.labels.empty()) fail(v, fmt::format("{} takes numbers, not names", what));
    const std::string declares = fmt::format(
        "op.attrs declares {} {}", what,
        declared.one_of.empty()
            ? fmt::format("[{}, {}]{}", declared.lo, declared.hi, declared.integer ? " (integers)" : "")
            : fmt::format("one of {}", fmt::join(declared.one_of, ", ")));
    if (p.one_of.empty()) {
      if (!declared.one_of.empty())
        fail(v,
             fmt::format("{}: a domain narrows it to some of those values ({{one_of: [...]}}), not a range",
                         declares));
      if (p.lo < declared.lo || p.hi > declared.hi ||
          (declared.integer && (p.lo != std::floor(p.lo) || p.hi != std::floor(p.hi))))
        fail(v,
             fmt::format("{}; [{}, {}] is not within it (a domain narrows an attr)", declares, p.lo, p.hi));
      a.lo = p.lo, a.hi = p.hi;
      return a;
    }
    for (const double x : p.one_of)
      if (!declared.valid(x))
        fail(v, fmt::format("{}; {} is not one of its values (a domain narrows an attr)", declares, x));
    a.one_of = p.one_of;
    a.near = nullptr, a.near_rate = 0;  // near: moves a drawn range value; a list has none
    return a;
  }

  // A profile's domain: or prop_runner --domain over a parsed declaration:
  // `dtypes` replaces the case's dtype choices (and those of every input
  // that takes the case's dtype), a dim's name replaces that dim (op.dims'
  // grammar), an attr's name narrows that attr (narrowed_attr). It changes
  // which cases are drawn, not how one is checked; the relations must still
  // hold.
  std::shared_ptr<const Decl> override_domain(const Decl& base, const YAML::Node& o) {
    section_.reset(o);
    auto d = std::make_shared<Decl>(base);
    if (!d->declared) d->declared = std::make_shared<const Decl>(base);
    std::vector<std::string> keys = {"dtypes"};
    for (const auto& dd : base.dims) keys.push_back(dd.name);
    for (const auto& a : base.attrs) keys.push_back(a.name);
    const std::string what = "the domain of op " + base.name;
    for (const auto& [k, v] : entries(o, what)) {
      if (k.Scalar() == "dtypes") {
        const Decl& declared = base.declared ? *base.declared : base;
        std::vector<std::string> names;
        for (const DType x : declared.case_dtypes) names.emplace_back(dtype_name(x));
        if (v.IsSequence() && v.size() == 0) fail(v, "dtypes is empty; valid: " + join(names));
        const std::vector<DType> t = dtypes(v, "dtypes");
        if (!is_float(t[0]))
          fail(v, fmt::format("dtypes: the case's dtype is floating (f32, f64, f16, bf16); got {}",
                              dtype_name(t[0])));
        // The op's declaration is its contract: a dtype it does not declare
        // would be drawn here and refused in a corpus file (a replay without
        // this --domain or profile), so only a narrowing is taken.
        for (const DType x : t)
          if (std::ranges::find(declared.case_dtypes, x) == declared.case_dtypes.end())
            fail(v, fmt::format("dtypes: op {} declares {} for the case's dtype, not {}: a domain narrows an "
                                "op's dtypes (to test {}, add it to the op's inputs' dtype lists)",
                                base.name, join(names), dtype_name(x), dtype_name(x)));
        for (InputDecl& in : d->inputs)
          if (!in.dtypes.empty() && base.takes_case_dtype(in.dtypes)) in.dtypes = t;
        d->case_dtypes = t;
        continue;
      }
      if (const auto a = std::ranges::find(d->attrs, k.Scalar(), &AttrDecl::name); a != d->attrs.end()) {
        const Decl& declared = base.declared ? *base.declared : base;
        *a = narrowed_attr(declared.attrs[static_cast<size_t>(a - d->attrs.begin())], k, v);
        continue;
      }
      const int at = base.dim_index(k.Scalar());
      if (at < 0)
        fail(k, fmt::format("unknown key '{}' in {} (its dtypes, dims and attrs){}", k.Scalar(), what,
                            suggestion(k.Scalar(), keys)));
      d->dims[size_t(at)] = dim(k, v);
    }
    const auto dom = d->consistent_domains({});
    for (size_t k = 0; k < dom.size(); ++k)
      if (dom[k].empty())
        fail(o, fmt::format("op.relations cannot hold with these dims (dim {} has no value left)",
                            d->dims[k].name));
    if (!d->extends(std::vector<int64_t>(d->dims.size(), -1), {}))
      fail(o, "op.relations cannot hold with these dims' valid values");
    return d;
  }

  // The folder of the spec file holding `n` ("." for a bare file name).
  std::string spec_folder(const YAML::Node& n) const {
    const std::string file = ctx_.mark(n, 0).file;
    const auto slash = file.rfind('/');
    return slash == std::string::npos ? "." : file.substr(0, slash);
  }

  // op.mutants: {NAME: exec:COMMAND | plugin:PATH | {target: ..., description: TEXT}}:
  // the user's planted bugs, run by --mutants like a family's own.
  void mutants(const YAML::Node& key, const YAML::Node& m, Decl& d) const {
    if (m.IsNull() || (m.IsMap() && m.size() == 0))  // (at its key: a null's mark is the next line's)
      fail(m.IsNull() ? key : m,
           "op.mutants is empty: give {NAME: exec:COMMAND | plugin:PATH}, or remove it");
    for (const auto& [k, v] : entries(m, "op.mutants")) {
      const std::string name = k.Scalar();
      // A leading letter or '_': `--target -x` would be a flag, `--target 1` no name.
      const bool word = !name.empty() &&
                        (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
                        std::all_of(name.begin(), name.end(), [](char ch) {
                          return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
                        });
      if (!word)
        fail(k,
             fmt::format("op.mutants: '{}' is no mutant name (a letter or '_', then letters, digits, '_' and "
                         "'-'; --target NAME runs it)",
                         name));
      if (name == "reference" || name == "naive")
        fail(k, fmt::format("op.mutants: '{}' is the name of the op's own {} implementation; pick another "
                            "name",
                            name, name == "reference" ? "fp64 reference" : "same-precision"));
      const std::string what = "op.mutants." + name;
      YAML::Node program = v;
      std::optional<YAML::Node> description;
      if (v.IsMap()) {
        only_keys(v, {"target", "description"}, what);
        if (!v["target"]) fail(v, what + " needs target: exec:COMMAND | plugin:PATH");
        program.reset(v["target"]);  // reset: = would write into v
        if (v["description"]) description = v["description"];
      }
      const auto target = scalar<std::string>(program, what, "exec:COMMAND or plugin:PATH");
      if (target.rfind("exec:", 0) != 0 && target.rfind("plugin:", 0) != 0)
        fail(program, fmt::format("{} is '{}': a mutant is a program of yours, exec:COMMAND or plugin:PATH "
                                  "(a built-in family's mutants are its own)",
                                  what, target));
      if (target.find_first_not_of(" \t", target.find(':') + 1) == std::string::npos)
        fail(program, fmt::format("{} '{}' names no command or path", what, target));
      Decl::Mutant mutant;
      mutant.name = name;
      mutant.description =
          description ? scalar<std::string>(*description, what + ".description", "a text") : target;
      // Started from the spec's folder, as an external reference is.
      mutant.program = external_reference(target, spec_folder(program), d.name, ctx_.mark(program, 0).str(),
                                          "mutant " + name);
      d.mutants.push_back(std::move(mutant));
    }
  }

  std::shared_ptr<const Decl> parse(const YAML::Node& s) {
    section_.reset(s);
    only_keys(
        s, {"name", "dims", "relations", "attrs", "inputs", "outputs", "reference", "summation", "mutants"},
        "op");
    auto d = std::make_shared<Decl>();
    d->name = s["name"] ? scalar<std::string>(s["name"], "op.name", "a name") : ctx_.spec_name;
    if (s["summation"]) {
      const auto how = scalar<std::string>(s["summation"], "op.summation", "tree or sequential");
      if (how != "tree" && how != "sequential")
        fail(s["summation"],
             fmt::format("op.summation is '{}': tree (pairwise or blocked sums, the default) or "
                         "sequential (one running total, in any order)",
                         how));
      d->sequential_sums = how == "sequential";
    }
    // The ABI's own kprop_op_* names (include/kprop/abi.h, abi/op.h).
    for (const char* taken : {"device", "device_fn", "args", "attr", "fn", "input", "output", "attr_value",
                              "attr_text", "named_tensor"})
      if (plugin_symbol(d->name) == std::string("kprop_op_") + taken)
        fail(s["name"] ? s["name"] : s,
             fmt::format("op.name '{}' would export {}, a name of kprop's ABI (include/kprop/abi/op.h); pick "
                         "another name",
                         d->name, plugin_symbol(d->name)));
    std::set<std::string> taken;
    if (s["dims"] && !s["dims"].IsNull())
      for (const auto& [k, v] : entries(s["dims"], "op.dims")) {
        name(k, taken);
        d->dims.push_back(dim(k, v));
      }
    if (d->dims.size() > kMaxDims)
      fail(s["dims"], fmt::format("op.dims declares {} dims; at most {}", d->dims.size(), kMaxDims));
    // The generator and the relation checks list every value of every dim:
    // 2^24 values in all at most (128 MB a listing). Five dims of 2^24 values
    // with relations took 2.6 GB and seconds per case.
    int64_t listed = 0;
    for (const auto& dim : d->dims)
      listed += dim.one_of.empty()
                    ? (dim.hi - (dim.lo + dim.multiple_of - 1) / dim.multiple_of * dim.multiple_of) /
                              dim.multiple_of +
                          1
                    : static_cast<int64_t>(dim.one_of.size());
    if (listed > (int64_t{1} << 24))
      fail(s["dims"],
           fmt::format("op.dims: the dims take {} values in all, over 2^24 (16777216): the generator "
                       "lists them; narrow the ranges",
                       listed));
    if (s["relations"] && !s["relations"].IsNull()) relations(s["relations"], *d);
    if (s["attrs"] && !s["attrs"].IsNull())
      for (const auto& [k, v] : entries(s["attrs"], "op.attrs")) {
        name(k, taken);
        d->attrs.push_back(attr(k, v));
      }
    if (!s["inputs"] || s["inputs"].IsNull()) fail(s, "op needs inputs: {NAME: {shape: [...]}}");
    for (const auto& [k, v] : entries(s["inputs"], "op.inputs")) {
      name(k, taken);
      const std::string what = "input " + k.Scalar();
      only_keys(v, {"shape", "dtype", "values", "specials"}, what);
      InputDecl in;
      in.name = k.Scalar();
      in.shape = shape(v["shape"] ? v["shape"] : v, what, *d);
      if (v["dtype"]) in.dtypes = dtypes(v["dtype"], what + ".dtype");
      // The dtype class: declared, or the one of the first value kind
      // (masks default to bool, index kinds to i64).
      char cls = in.dtypes.empty()                ? 'f'
                 : in.dtypes[0] == DType::boolean ? 'b'
                 : is_float(in.dtypes[0])         ? 'f'
                                                  : 'i';
      if (in.dtypes.empty() && v["values"]) {
        const YAML::Node first =
            v["values"].IsSequence() && v["values"].size() > 0 ? v["values"][0] : v["values"];
        const YAML::Node key = first.IsMap() && first.size() > 0 ? first.begin()->first : first;
        if (key.IsScalar()) {
          const auto& b = kinds_of('b');
          if (std::find(b.begin(), b.end(), key.Scalar()) != b.end()) cls = 'b', in.dtypes = {DType::boolean};
          if (key.Scalar() == "ids" || key.Scalar() == "permutation") cls = 'i', in.dtypes = {DType::i64};
        }
      }
      if (v["values"]) {
        in.values = values(v["values"], what, cls, in.shape, *d);
        if (cls == 'i') fits_dtypes(v["values"], what, in, *d);
      } else if (cls == 'f')
        in.values = {ValueSpec{}};
      else
        fail(v, fmt::format("{} ({}) needs values: {}", what, dtype_name(in.dtypes[0]), join(kinds_of(cls))));
      if (v["specials"]) {
        if (cls == 'b')
          fail(v["specials"], what + ".specials: special values are for floating and integer inputs");
        in.specials = cls == 'f' ? specials(v["specials"], what) : sentinels(v["specials"], what, in, *d);
      }
      d->inputs.push_back(std::move(in));
    }
    for (const auto& in : d->inputs)
      if (!in.dtypes.empty() && is_float(in.dtypes[0])) {
        d->case_dtypes = in.dtypes;
        break;
      }
    if (d->case_dtypes.empty()) d->case_dtypes = {DType::f32, DType::f64};
    check_finite_specials(*d);
    if (!s["outputs"] || s["outputs"].IsNull()) fail(s, "op needs outputs: {NAME: {shape: [...]}}");
    for (const auto& [k, v] : entries(s["outputs"], "op.outputs")) {
      name(k, taken);
      const std::string what = "output " + k.Scalar();
      only_keys(v, {"shape", "dtype"}, what);
      OutputDecl out;
      out.name = k.Scalar();
      out.shape = shape(v["shape"] ? v["shape"] : v, what, *d);
      if (v["dtype"]) {
        const auto t = dtypes(v["dtype"], what + ".dtype");
        if (t.size() != 1) fail(v["dtype"], what + ".dtype must be one dtype (default: the case's)");
        out.dtype = t[0];  // an integer or boolean one: its reference gives its values (op.h)
      }
      d->outputs.push_back(std::move(out));
    }
    // No output: no invariant judges anything (deterministic passed, comparing nothing).
    if (d->outputs.empty()) fail(s["outputs"], "op.outputs is empty: an op needs at least one output");
    // What reference expressions read: inputs, dims and attrs (as scalars).
    for (const auto& in : d->inputs)
      d->reference_infos.push_back({in.name, in.shape,
                                    in.dtypes.empty() ? expr::DType::real : expr_dtype(in.dtypes[0]),
                                    "input " + in.name});
    for (const auto& dd : d->dims)
      d->reference_infos.push_back({dd.name, {}, expr::DType::integer, "dim " + dd.name});
    for (const auto& a : d->attrs)
      d->reference_infos.push_back(
          {a.name, {}, a.integer ? expr::DType::integer : expr::DType::real, "attr " + a.name, a.labels});
    // The spec's let: names, for the references and near:. Each checked here
    // on the names they may read, at its own position; one that reads the
    // target's tensors (target.y, reference.y, ...) is for invariants, and
    // the loader checks it once the family is built.
    expr::TensorInfos plain = d->reference_infos;
    plain.insert(plain.end(), ctx_.lets.begin(), ctx_.lets.end());  // in any order; a cycle is an error
    for (auto it = ctx_.let_section.begin(); it != ctx_.let_section.end(); ++it)
      if (taken.count(it->first.Scalar()))
        fail(it->first,
             fmt::format("let '{}' is already a name of the op (its dims, attrs, inputs and outputs share "
                         "one namespace with the spec's lets); pick another name",
                         it->first.Scalar()));
    for (const auto& let : ctx_.lets) {
      const YAML::Node value = ctx_.let_section[let.name];
      try {
        (void)expr::Expression::compile(let.definition, plain);
      } catch (const expr::ExprError& err) {
        const std::string what = err.what();
        bool family_tensor = false;  // an unknown name the family publishes beside the reference's
        for (const char* prefix :
             {"target.", "reference.", "naive.", "floor.", "overflow.", "transform", "unit_roundoff'"})
          family_tensor = family_tensor || what.rfind(std::string("unknown name '") + prefix, 0) == 0;
        if (!family_tensor) fail(value, fmt::format("let {}: {}", let.name, what), err.offset);
      }
    }
    d->reference_infos = plain;
    if (s["attrs"] && !s["attrs"].IsNull()) compile_near(s["attrs"], *d);
    for (auto it = s.begin(); it != s.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == "mutants") mutants(it->first, it->second, *d);
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
      d->external_reference = external_reference(target, spec_folder(ref), d->name, ctx_.mark(ref, 0).str());
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
        if (e->dtype() == expr::DType::boolean && o.dtype != DType::boolean)
          throw expr::ExprError(
              0, "is boolean; a reference computes the output's values (dtype: bool for a mask)");
        if (!shape_fits(e->shape(), o.shape))
          throw expr::ExprError(0, fmt::format("has shape {}, but output {} is declared {}", e->shape(),
                                               o.name, expr::shape_text(o.shape)));
        o.reference = std::move(e);
        o.reference_mark = ctx_.mark(v, 0);
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
  // Each finite special value read (specials()), with its input ("input x")
  // and place: checked against the dtypes once every input is read.
  struct FiniteMark {
    std::string what;
    double value;
    YAML::Node at;
  };
  mutable std::vector<FiniteMark> finite_marks_;
};

}  // namespace

std::shared_ptr<const Decl> parse_decl(const YAML::Node& section, const DeclaredFamilyContext& context) {
  std::shared_ptr<const Decl> d = Parser(context).parse(section);
  // The profile's domain:, then prop_runner --domain (its errors pointing
  // into the option), each parsed as the section's keys are.
  if (context.profile_domain.IsDefined() && !context.profile_domain.IsNull())
    d = Parser(context).override_domain(*d, context.profile_domain);
  if (!context.domain.IsMap() || context.domain.size() == 0) return d;
  DeclaredFamilyContext cli = context;
  cli.mark = context.domain_mark;
  return Parser(cli).override_domain(*d, context.domain);
}

}  // namespace kprop::op
