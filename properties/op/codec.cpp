// The op family: the YAML codec of a case (against its declaration) and its
// content hash.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "kprop/case_yaml.h"
#include "kprop/rng.h"
#include "properties/op/family_parts.h"

namespace kprop::op {

// The shortest text that reads back to v in the dtype.
std::string number_text(double v, DType dtype) {
  const auto t = float_type(dtype);
  return t ? value_text(*t, v) : fmt::format("{}", static_cast<int64_t>(v));
}

// ---------------------------------------------------------------- YAML codec
namespace {

YAML::Node nested(const std::vector<double>& v, const std::vector<int64_t>& ext, size_t axis, size_t& at,
                  DType dt) {
  if (axis == ext.size()) return YAML::Node(number_text(v[at++], dt));
  if (axis + 1 == ext.size()) {  // the last axis: one list of numbers
    const size_t first = at;
    at += static_cast<size_t>(ext[axis]);
    return case_yaml::text_list(static_cast<size_t>(ext[axis]),
                                [&](size_t k) { return number_text(v[first + k], dt); });
  }
  YAML::Node list(YAML::NodeType::Sequence);
  list.SetStyle(axis + 1 == ext.size() ? YAML::EmitterStyle::Flow : YAML::EmitterStyle::Block);
  for (int64_t k = 0; k < ext[axis]; ++k) list.push_back(nested(v, ext, axis + 1, at, dt));
  return list;
}

// `t` is among the dtypes `list_of` reads from the run's declaration or
// from the spec's own (Decl::declared: a domain narrowed the run's).
template <typename ListOf>
bool declares_dtype(const Decl& d, ListOf list_of, DType t) {
  for (const Decl* e : {&d, d.declared.get()})
    if (e && std::ranges::find(list_of(*e), t) != list_of(*e).end()) return true;
  return false;
}

double read_number(const case_yaml::Item& n, DType dtype, const std::string& what) {
  if (!n.scalar) n.fail(what + " must be a number");
  const std::string s(n.text);
  if (!is_float(dtype)) {
    if (dtype == DType::boolean && (s == "true" || s == "false")) return s == "true" ? 1 : 0;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE)
      n.fail(fmt::format("{} has '{}', not an integer", what, s));
    const auto [lo, hi] = int_range(dtype);
    if (static_cast<double>(v) < lo || static_cast<double>(v) > hi)
      n.fail(fmt::format("{} has {}, outside {}", what, v, dtype_name(dtype)));
    return static_cast<double>(v);
  }
  if (s == ".nan" || s == ".NaN") return NAN;
  if (s == "-.nan" || s == "-.NaN") return -NAN;  // a NaN with its sign bit set (value_text)
  if (s == ".inf" || s == "+.inf") return INFINITY;
  if (s == "-.inf") return -INFINITY;
  char* end = nullptr;
  errno = 0;
  // The decimal rounded once to the dtype (float_type.h parse_value).
  const double v = parse_value(*float_type(dtype), s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) n.fail(what + " has a non-number '" + s + "'");
  return v;
}

void read_nested(const YAML::Node& n, const std::vector<int64_t>& ext, size_t axis, DType dt,
                 const std::string& what, std::vector<double>& out) {
  if (axis == ext.size()) {
    out.push_back(read_number(case_yaml::as_item(n), dt, what));
    return;
  }
  if (!case_yaml::is_list(n) || static_cast<int64_t>(case_yaml::list_size(n)) != ext[axis])
    case_yaml::fail(n, fmt::format("{}: axis {} must be a list of {} (shape {})", what, axis, ext[axis],
                                   expr::shape_text(ext)));
  if (axis + 1 == ext.size()) {
    case_yaml::for_each_item(n, [&](const case_yaml::Item& x) { out.push_back(read_number(x, dt, what)); });
    return;
  }
  for (const auto& e : n) read_nested(e, ext, axis + 1, dt, what, out);
}

DType read_dtype(const YAML::Node& n) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32,
                  DType::i64, DType::boolean})
    if (n && n.IsScalar() && n.Scalar() == dtype_name(t)) return t;
  case_yaml::fail(n, "dtype must be f32, f64, f16, bf16, i8, u8, i32, i64 or bool");
}

}  // namespace

// What the corpus file keeps exactly (dtypes, dims, attrs, values with -0
// kept, NaN payloads not), hashed word by word; not the kinds of index
// tensors and masks, which a file may read back as another kind that fits
// the same values.
uint64_t Traits::content_hash(const Case& c) {
  rng::ContentHash h(0x6f70u);  // "op"
  h.word(static_cast<uint64_t>(c.dtype));
  for (const int64_t d : c.dims) h.word(static_cast<uint64_t>(d));
  for (const double a : c.attrs) h.real(a);
  for (const DType t : c.dtypes) h.word(static_cast<uint64_t>(t));
  for (const auto& in : c.inputs) h.reals(in);
  return h.value();
}

YAML::Node Traits::to_yaml(const Case& c) {
  const Decl& d = *c.decl;
  YAML::Node n(YAML::NodeType::Map);
  n["dtype"] = dtype_name(c.dtype);
  YAML::Node dims(YAML::NodeType::Map), attrs(YAML::NodeType::Map), inputs(YAML::NodeType::Map);
  dims.SetStyle(YAML::EmitterStyle::Flow);
  for (size_t k = 0; k < d.dims.size(); ++k) dims[d.dims[k].name] = c.dims[k];
  n["dims"] = dims;
  if (!d.attrs.empty()) {
    attrs.SetStyle(YAML::EmitterStyle::Flow);
    for (size_t a = 0; a < d.attrs.size(); ++a)
      attrs[d.attrs[a].name] = !d.attrs[a].labels.empty()
                                   ? d.attrs[a].labels.at(static_cast<size_t>(c.attrs[a]))
                               : d.attrs[a].integer ? fmt::format("{}", static_cast<int64_t>(c.attrs[a]))
                                                    : number_text(c.attrs[a], DType::f64);
    n["attrs"] = attrs;
  }
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    YAML::Node t(YAML::NodeType::Map);
    t["dtype"] = dtype_name(c.dtypes[i]);
    if (c.kinds[i] >= 0)
      t["kind"] = value_kind_name(d.inputs[i].values[static_cast<size_t>(c.kinds[i])].kind);
    size_t at = 0;
    t["values"] = nested(c.inputs[i], d.extents(d.inputs[i].shape, c.dims), 0, at, c.dtypes[i]);
    inputs[d.inputs[i].name] = t;
  }
  n["inputs"] = inputs;
  return n;
}

Case Traits::from_yaml(const YAML::Node&) {
  throw std::logic_error("op: cases are decoded by OpFamily against its declaration");
}

AnyCase OpFamily::from_yaml(const YAML::Node& n) const {
  const Decl& d = *decl_;
  case_yaml::expect_keys(n, {"dtype", "dims", "attrs", "inputs"}, "op case");
  Case c;
  c.decl = decl_;
  c.dtype = read_dtype(n["dtype"]);
  // The contract's dtypes and structured values (ids in range, exact masks)
  // hold in a corpus file as in a drawn case: the target relies on them.
  if (!declares_dtype(
          d, [](const Decl& e) -> const std::vector<DType>& { return e.case_dtypes; }, c.dtype))
    case_yaml::fail(n["dtype"], fmt::format("dtype {} is not one the op declares (did the spec drop it since "
                                            "the case was stored? then retire the file)",
                                            dtype_name(c.dtype)));
  const YAML::Node dims = n["dims"];
  if (!dims || !dims.IsMap()) case_yaml::fail(dims ? dims : n, "'dims' must be a map {DIM: extent}");
  for (auto it = dims.begin(); it != dims.end(); ++it)
    if (d.dim_index(it->first.Scalar()) < 0)
      case_yaml::fail(it->first, "undeclared dim '" + it->first.Scalar() + "'");
  // The relations and the attrs' declarations hold in a corpus file too:
  // the target is entitled to them, whatever the domain. A dim's range is
  // the domain's (a profile's domain: and --domain replace it: a case a
  // wider profile stored replays in the spec's own run), as the other
  // families' domain keys are.
  for (const auto& dim : d.dims) {
    const int64_t v = case_yaml::read<int64_t>(dims, dim.name.c_str());
    if (v < 1 || v > (1 << 24))
      case_yaml::fail(dims[dim.name], fmt::format("dim {} = {} is not an extent", dim.name, v));
    c.dims.push_back(v);
  }
  if (const std::string why = d.relations_violated(c.dims); !why.empty())
    case_yaml::fail(dims, "op.relations: " + why);
  const YAML::Node attrs = n["attrs"];
  if (!d.attrs.empty() && (!attrs || !attrs.IsMap()))
    case_yaml::fail(attrs ? attrs : n, "'attrs' must be a map");
  if (attrs && attrs.IsMap())
    for (auto it = attrs.begin(); it != attrs.end(); ++it) {
      bool known = false;
      for (const auto& a : d.attrs) known = known || a.name == it->first.Scalar();
      if (!known) case_yaml::fail(it->first, "undeclared attr '" + it->first.Scalar() + "'");
    }
  for (size_t k = 0; k < d.attrs.size(); ++k) {
    // Held to the spec's declaration, not to a domain that narrowed the run's
    // (a case stored before `--domain '{eps: 1e-5}'` still replays).
    const AttrDecl& a = d.declared ? d.declared->attrs[k] : d.attrs[k];
    if (!attrs[a.name]) case_yaml::fail(attrs, "missing attr '" + a.name + "'");
    if (a.labels.empty()) {
      const double v = read_number(case_yaml::as_item(attrs[a.name]), DType::f64, "attr " + a.name);
      if (!a.valid(v))
        case_yaml::fail(attrs[a.name], fmt::format("attr {} = {} is not one the declaration allows ({})",
                                                   a.name, v, a.values_text()));
      c.attrs.push_back(v);
      continue;
    }
    const auto at = std::find(a.labels.begin(), a.labels.end(), attrs[a.name].Scalar());
    if (!attrs[a.name].IsScalar() || at == a.labels.end())
      case_yaml::fail(attrs[a.name], fmt::format("attr {} must be one of {}", a.name, join(a.labels, ", ")));
    c.attrs.push_back(static_cast<double>(at - a.labels.begin()));
  }
  const YAML::Node inputs = n["inputs"];
  if (!inputs || !inputs.IsMap()) case_yaml::fail(inputs ? inputs : n, "'inputs' must be a map");
  for (auto it = inputs.begin(); it != inputs.end(); ++it) {
    bool known = false;
    for (const auto& in : d.inputs) known = known || in.name == it->first.Scalar();
    if (!known) case_yaml::fail(it->first, "undeclared input '" + it->first.Scalar() + "'");
  }
  double total = 0;
  for (const auto& in : d.inputs) {
    const YAML::Node t = inputs[in.name];
    if (!t) case_yaml::fail(inputs, "missing input '" + in.name + "'");
    case_yaml::expect_keys(t, {"dtype", "kind", "values"}, "input " + in.name);
    const DType dt = read_dtype(t["dtype"]);
    const size_t i = c.inputs.size();
    // An input that takes the case's dtype (no list, or the case's own
    // choices) has exactly it; another draws among its own.
    if (d.takes_case_dtype(in.dtypes) && dt != c.dtype)
      case_yaml::fail(t["dtype"],
                      fmt::format("input {} has dtype {}, not the case's dtype {} (it takes the case's)",
                                  in.name, dtype_name(dt), dtype_name(c.dtype)));
    if (!d.takes_case_dtype(in.dtypes) &&
        !declares_dtype(
            d, [i](const Decl& e) -> const std::vector<DType>& { return e.inputs[i].dtypes; }, dt))
      case_yaml::fail(t["dtype"],
                      fmt::format("input {} has dtype {}, not declared", in.name, dtype_name(dt)));
    int kind = -1;
    if (!in.floating()) {
      // The first declared kind of that name the values satisfy (kinds of
      // one name differ only in their params).
      if (!t["kind"] || !t["kind"].IsScalar())
        case_yaml::fail(t, "input " + in.name + " needs kind: (its value kind)");
      for (size_t k = 0; k < in.values.size() && kind < 0; ++k)
        if (t["kind"].Scalar() == value_kind_name(in.values[k].kind)) kind = static_cast<int>(k);
      if (kind < 0)
        case_yaml::fail(t["kind"],
                        "input " + in.name + ": kind '" + t["kind"].Scalar() + "' is not declared");
    } else if (t["kind"]) {
      case_yaml::fail(t["kind"], "input " + in.name + " is floating: its values have no kind");
    }
    const auto ext = d.extents(in.shape, c.dims);
    total += static_cast<double>(count(ext));
    if (total > double(1 << 26)) case_yaml::fail(t, "the case is too large");
    std::vector<double> v;
    if (!t["values"]) case_yaml::fail(t, "input " + in.name + " needs values");
    read_nested(t["values"], ext, 0, dt, "input " + in.name, v);
    c.dtypes.push_back(dt);
    c.kinds.push_back(kind);
    c.inputs.push_back(std::move(v));
    if (kind >= 0 && !check_input(c, i).empty())
      for (size_t k = static_cast<size_t>(kind) + 1; k < in.values.size(); ++k) {
        if (in.values[k].kind != in.values[static_cast<size_t>(kind)].kind) continue;
        c.kinds[i] = static_cast<int>(k);
        if (check_input(c, i).empty()) break;
        c.kinds[i] = kind;
      }
    if (const std::string why = check_input(c, i); !why.empty()) case_yaml::fail(t["values"], why);
  }
  return box(std::move(c));
}

}  // namespace kprop::op
