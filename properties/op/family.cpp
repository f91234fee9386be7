// The op family: generation, shrinking, the YAML codec, named tensors and
// transforms, all driven by the spec's declaration (kernels/op/op.h).
#include "properties/op/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "kprop/case_yaml.h"
#include "kprop/rng.h"

namespace kprop::op {
namespace {

int64_t count(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// The shortest text that reads back to v in the dtype.
std::string number_text(double v, DType dtype) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  return dtype == DType::f32 ? fmt::format("{}", static_cast<float>(v)) : fmt::format("{}", v);
}

int significant_digits(double v, DType dtype) {
  return case_yaml::significant_digits(v, dtype == DType::f32);
}

double round_digits(double v, int k, DType dtype) {
  const std::string s = fmt::format("{:.{}e}", v, k - 1);
  return round_to(dtype, std::strtod(s.c_str(), nullptr));
}

// Simpler values for one element, boldest first: 0, 1, -v for a negative
// v, then fewer significant digits. Each candidate is 0, 1 (never for 1
// itself), positive, or has strictly fewer digits, so shrinking terminates.
std::vector<double> simpler_values(double v, DType dtype) {
  std::vector<double> out;
  auto add = [&](double w) {
    if (w != v && std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  };
  if (!std::isfinite(v)) return {0.0, 1.0};
  if (v != 0) add(0);
  if (v != 0 && v != 1) add(1);
  if (v < 0) add(-v);
  const int digits = significant_digits(v, dtype);
  for (int k = 1; k < digits; ++k) {
    const double w = round_digits(v, k, dtype);
    if (std::isfinite(w) && significant_digits(w, dtype) < digits) add(w);
  }
  return out;
}

// Streams of kprop::rng: one block per input.
uint64_t stream(size_t input, uint64_t what) {
  return 1000 * (static_cast<uint64_t>(input) + 1) + what;
}

}  // namespace

std::vector<double> gather(const std::vector<double>& data, const std::vector<int64_t>& extents,
                           const std::vector<std::string>& shape, const std::string& dim,
                           const std::vector<int64_t>& keep) {
  std::vector<double> cur = data;
  std::vector<int64_t> ext = extents;
  for (size_t ax = 0; ax < shape.size(); ++ax) {
    if (shape[ax] != dim) continue;
    int64_t outer = 1, inner = 1;
    for (size_t k = 0; k < ax; ++k) outer *= ext[k];
    for (size_t k = ax + 1; k < ext.size(); ++k) inner *= ext[k];
    const int64_t n = ext[ax], m = static_cast<int64_t>(keep.size());
    std::vector<double> next(static_cast<size_t>(outer * m * inner));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < m; ++j)
        std::copy_n(cur.begin() + (o * n + keep[static_cast<size_t>(j)]) * inner, inner,
                    next.begin() + (o * m + j) * inner);
    cur = std::move(next);
    ext[ax] = m;
  }
  return cur;
}

Case keep_indices(const Case& c, size_t dim, const std::vector<int64_t>& keep) {
  const Decl& d = *c.decl;
  Case s = c;
  for (size_t i = 0; i < d.inputs.size(); ++i)
    s.inputs[i] =
        gather(c.inputs[i], d.extents(d.inputs[i].shape, c.dims), d.inputs[i].shape, d.dims[dim].name, keep);
  s.dims[dim] = static_cast<int64_t>(keep.size());
  return s;
}

// ---------------------------------------------------------------- generation
Case Traits::build(Draw&, const Values&) {
  throw std::logic_error("op: cases are built by OpFamily from its declaration");
}

Case OpFamily::build_case(Draw& draw) const {
  const Decl& d = *decl_;
  Case c;
  c.decl = decl_;
  for (const auto& dim : d.dims) {
    const std::vector<int64_t> values = dim.values_below(dim.hi + 1);
    c.dims.push_back(values[static_cast<size_t>(draw.sized({0, static_cast<int64_t>(values.size()) - 1}))]);
  }
  for (const auto& a : d.attrs) {
    if (!a.one_of.empty())
      c.attrs.push_back(draw.pick(a.one_of));
    else if (a.integer)
      c.attrs.push_back(
          static_cast<double>(draw.any(IntRange{static_cast<int64_t>(a.lo), static_cast<int64_t>(a.hi)})));
    else
      c.attrs.push_back(draw.any(RealRange{a.lo, a.hi}));
  }
  c.dtype = draw.pick(d.case_dtypes);
  const uint64_t seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const InputDecl& in = d.inputs[i];
    const DType dt = in.dtypes.empty() || in.dtypes == d.case_dtypes ? c.dtype : draw.pick(in.dtypes);
    c.dtypes.push_back(dt);
    const ValueSpec& v = draw.pick(in.values);
    const double u =
        (v.kind == ValueKind::large || v.kind == ValueKind::small) ? draw.any(RealRange{v.a, v.b}) : 0;
    const std::vector<int64_t> ext = d.extents(in.shape, c.dims);
    const size_t n = static_cast<size_t>(count(ext));
    const size_t row = ext.empty() ? 1 : static_cast<size_t>(ext.back());
    std::vector<double> x(n);
    for (size_t k = 0; k < n; ++k) {
      const double z = rng::normal(seed, stream(i, 1), k), w = rng::uniform(seed, stream(i, 2), k);
      switch (v.kind) {
        case ValueKind::normal:
          x[k] = v.a + v.b * z;
          break;
        case ValueKind::uniform:
          x[k] = v.a + (v.b - v.a) * w;
          break;
        case ValueKind::integer:
          x[k] = std::floor(v.a + (v.b - v.a + 1) * w);
          break;
        case ValueKind::large:
          x[k] = z * std::pow(10.0, u);
          break;
        case ValueKind::small:
          x[k] = z * std::pow(10.0, -u);
          break;
        case ValueKind::constant_rows:
          x[k] = v.a + v.b * rng::normal(seed, stream(i, 3), k / std::max<size_t>(row, 1));
          break;
      }
      x[k] = round_to(dt, x[k]);
    }
    c.inputs.push_back(std::move(x));
  }
  return c;
}

// ---------------------------------------------------------------- shrinking
// One step, boldest first: each dim toward its smallest valid value (the
// leading indices kept; then, for short dims, each single index dropped),
// attrs toward their first choice / round values, each input all 0 or all
// 1, then each element toward 0, 1 and fewer significant digits. Lazy.
rc::Seq<Case> Traits::shrinks(const Case& c0, const Values&) {
  auto c = std::make_shared<const Case>(c0);
  const Decl& d = *c->decl;
  std::vector<std::pair<size_t, std::vector<int64_t>>> cuts;
  for (size_t k = 0; k < d.dims.size(); ++k) {
    const int64_t n = c->dims[k];
    const std::vector<int64_t> below = d.dims[k].values_below(n);
    std::vector<int64_t> sizes;
    if (!below.empty()) {
      sizes.push_back(below.front());
      const auto half = std::lower_bound(below.begin(), below.end(), (n + 1) / 2);
      if (half != below.end()) sizes.push_back(*half);
      sizes.push_back(below.back());
    }
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    for (int64_t m : sizes) {
      std::vector<int64_t> prefix(static_cast<size_t>(m)), suffix(static_cast<size_t>(m));
      std::iota(prefix.begin(), prefix.end(), 0);
      std::iota(suffix.begin(), suffix.end(), n - m);
      cuts.push_back({k, prefix});
      cuts.push_back({k, suffix});
    }
    if (!below.empty() && below.back() == n - 1 && n <= 32)
      for (int64_t drop = 0; drop < n; ++drop) {
        std::vector<int64_t> keep;
        for (int64_t j = 0; j < n; ++j)
          if (j != drop) keep.push_back(j);
        cuts.push_back({k, keep});
      }
  }
  auto structure = rc::seq::map(rc::seq::fromContainer(std::move(cuts)),
                                [c](const auto& cut) { return keep_indices(*c, cut.first, cut.second); });

  std::vector<Case> global;
  for (size_t a = 0; a < d.attrs.size(); ++a) {
    const AttrDecl& ad = d.attrs[a];
    std::vector<double> options;
    if (!ad.one_of.empty()) {
      for (double o : ad.one_of) {
        if (o == c->attrs[a]) break;
        options.push_back(o);
      }
    } else {
      // Ranked lo < 0 < 1 < anything else (then by fewer digits): only a
      // lower rank is offered, so no two values shrink into each other.
      auto rank = [&](double v) { return v == ad.lo ? 0 : v == 0 ? 1 : v == 1 ? 2 : 3; };
      const double cur = c->attrs[a];
      for (double o : {ad.lo, 0.0, 1.0})
        if (rank(o) < rank(cur)) options.push_back(o);
      if (rank(cur) == 3)
        for (int k = 1; k < significant_digits(cur, DType::f64); ++k)
          options.push_back(round_digits(cur, k, DType::f64));
    }
    for (double o : options)
      if (o != c->attrs[a] && ad.valid(o)) {
        Case s = *c;
        s.attrs[a] = o;
        global.push_back(std::move(s));
      }
  }
  for (size_t i = 0; i < d.inputs.size(); ++i)
    for (double w : {0.0, 1.0}) {
      // All 1 only where no element is 0 already (0 is simpler than 1):
      // otherwise all-0 and all-1 would shrink into each other.
      const auto& x = c->inputs[i];
      if (w == 1 && std::find(x.begin(), x.end(), 0.0) != x.end()) continue;
      Case s = *c;
      std::fill(s.inputs[i].begin(), s.inputs[i].end(), w);
      if (!(s.inputs[i] == x)) global.push_back(std::move(s));
    }

  struct Slot {
    size_t input, index;
  };
  std::vector<Slot> slots;
  for (size_t i = 0; i < d.inputs.size(); ++i)
    for (size_t k = 0; k < c->inputs[i].size(); ++k) slots.push_back({i, k});
  auto values = rc::seq::mapcat(rc::seq::fromContainer(std::move(slots)), [c](const Slot& slot) {
    const double v = c->inputs[slot.input][slot.index];
    return rc::seq::map(rc::seq::fromContainer(simpler_values(v, c->dtypes[slot.input])),
                        [c, slot](double w) {
                          Case s = *c;
                          s.inputs[slot.input][slot.index] = w;
                          return s;
                        });
  });
  return rc::seq::concat(std::move(structure), rc::seq::fromContainer(std::move(global)), std::move(values));
}

std::string Traits::in_domain(const Case& c, const Values&) {
  const Decl& d = *c.decl;
  for (size_t k = 0; k < d.dims.size(); ++k)
    if (!d.dims[k].valid(c.dims[k]))
      return fmt::format("dim {} = {} is not a value the declaration draws ([{}, {}], multiple of {}{})",
                         d.dims[k].name, c.dims[k], d.dims[k].lo, d.dims[k].hi, d.dims[k].multiple_of,
                         d.dims[k].one_of.empty() ? "" : ", one_of");
  for (size_t a = 0; a < d.attrs.size(); ++a)
    if (!d.attrs[a].valid(c.attrs[a]))
      return fmt::format("attr {} = {} is not a value the declaration draws", d.attrs[a].name, c.attrs[a]);
  if (std::find(d.case_dtypes.begin(), d.case_dtypes.end(), c.dtype) == d.case_dtypes.end())
    return fmt::format("dtype {} is not declared", dtype_name(c.dtype));
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const auto& in = d.inputs[i];
    const bool ok = in.dtypes.empty()
                        ? c.dtypes[i] == c.dtype
                        : std::find(in.dtypes.begin(), in.dtypes.end(), c.dtypes[i]) != in.dtypes.end();
    if (!ok) return fmt::format("input {} has dtype {}, not declared", in.name, dtype_name(c.dtypes[i]));
    if (static_cast<int64_t>(c.inputs[i].size()) != count(d.extents(in.shape, c.dims)))
      return fmt::format("input {} has {} values, not {}", in.name, c.inputs[i].size(),
                         expr::shape_text(in.shape));
  }
  return "";
}

double Traits::case_bytes(const Case& c) {
  // Inputs once; outputs four times (target, reference, naive, a derived case's).
  const Decl& d = *c.decl;
  double n = 0;
  for (const auto& x : c.inputs) n += static_cast<double>(x.size());
  for (const auto& o : d.outputs) n += 4.0 * static_cast<double>(count(d.extents(o.shape, c.dims)));
  return 8 * n;
}

CaseSize OpFamily::max_case_bytes(const Values&) const {
  Case c;
  c.decl = decl_;
  for (const auto& dim : decl_->dims) c.dims.push_back(dim.values_below(dim.hi + 1).back());
  for (const auto& in : decl_->inputs)
    c.inputs.emplace_back(static_cast<size_t>(count(decl_->extents(in.shape, c.dims))));
  std::vector<std::string> parts;
  for (size_t k = 0; k < c.dims.size(); ++k)
    parts.push_back(fmt::format("{} {}", decl_->dims[k].name, c.dims[k]));
  return {Traits::case_bytes(c), join(parts, " x "), "op.dims"};
}

CaseStats Traits::stats(const Case& c) {
  const Decl& d = *c.decl;
  std::vector<std::string> parts;
  int64_t size = 0;
  for (size_t k = 0; k < d.dims.size(); ++k) {
    parts.push_back(fmt::format("{} {}", d.dims[k].name, c.dims[k]));
    size += c.dims[k];
  }
  for (const auto& x : c.inputs)
    for (double v : x) size += significant_digits(v, DType::f64) > 0 ? 1 : 0;
  return {size, fmt::format("{} {}", join(parts, ", "), dtype_name(c.dtype))};
}

// ---------------------------------------------------------------- YAML codec
namespace {

YAML::Node nested(const std::vector<double>& v, const std::vector<int64_t>& ext, size_t axis, size_t& at,
                  DType dt) {
  if (axis == ext.size()) return YAML::Node(number_text(v[at++], dt));
  YAML::Node list(YAML::NodeType::Sequence);
  list.SetStyle(axis + 1 == ext.size() ? YAML::EmitterStyle::Flow : YAML::EmitterStyle::Block);
  for (int64_t k = 0; k < ext[axis]; ++k) list.push_back(nested(v, ext, axis + 1, at, dt));
  return list;
}

double read_number(const YAML::Node& n, DType dtype, const std::string& what) {
  if (!n.IsScalar()) case_yaml::fail(n, what + " must be a number");
  const std::string& s = n.Scalar();
  if (s == ".nan" || s == ".NaN") return NAN;
  if (s == ".inf" || s == "+.inf") return INFINITY;
  if (s == "-.inf") return -INFINITY;
  char* end = nullptr;
  errno = 0;
  const double v =
      dtype == DType::f32 ? static_cast<double>(std::strtof(s.c_str(), &end)) : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) case_yaml::fail(n, what + " has a non-number '" + s + "'");
  return v;
}

void read_nested(const YAML::Node& n, const std::vector<int64_t>& ext, size_t axis, DType dt,
                 const std::string& what, std::vector<double>& out) {
  if (axis == ext.size()) {
    out.push_back(read_number(n, dt, what));
    return;
  }
  if (!n.IsSequence() || static_cast<int64_t>(n.size()) != ext[axis])
    case_yaml::fail(n, fmt::format("{}: axis {} must be a list of {} (shape {})", what, axis, ext[axis],
                                   expr::shape_text(ext)));
  for (const auto& e : n) read_nested(e, ext, axis + 1, dt, what, out);
}

DType read_dtype(const YAML::Node& n) {
  if (!n || !n.IsScalar() || (n.Scalar() != "f32" && n.Scalar() != "f64"))
    case_yaml::fail(n, "dtype must be f32 or f64");
  return n.Scalar() == "f32" ? DType::f32 : DType::f64;
}

}  // namespace

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
      attrs[d.attrs[a].name] = d.attrs[a].integer ? fmt::format("{}", static_cast<int64_t>(c.attrs[a]))
                                                  : number_text(c.attrs[a], DType::f64);
    n["attrs"] = attrs;
  }
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    YAML::Node t(YAML::NodeType::Map);
    t["dtype"] = dtype_name(c.dtypes[i]);
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
  const YAML::Node dims = n["dims"];
  if (!dims || !dims.IsMap()) case_yaml::fail(dims ? dims : n, "'dims' must be a map {DIM: extent}");
  for (auto it = dims.begin(); it != dims.end(); ++it)
    if (d.dim_index(it->first.Scalar()) < 0)
      case_yaml::fail(it->first, "undeclared dim '" + it->first.Scalar() + "'");
  for (const auto& dim : d.dims) {
    const int64_t v = case_yaml::read<int64_t>(dims, dim.name.c_str());
    if (v < 1 || v > (1 << 24))
      case_yaml::fail(dims[dim.name], fmt::format("dim {} = {} is not an extent", dim.name, v));
    c.dims.push_back(v);
  }
  const YAML::Node attrs = n["attrs"];
  if (!d.attrs.empty() && (!attrs || !attrs.IsMap()))
    case_yaml::fail(attrs ? attrs : n, "'attrs' must be a map");
  if (attrs && attrs.IsMap())
    for (auto it = attrs.begin(); it != attrs.end(); ++it) {
      bool known = false;
      for (const auto& a : d.attrs) known = known || a.name == it->first.Scalar();
      if (!known) case_yaml::fail(it->first, "undeclared attr '" + it->first.Scalar() + "'");
    }
  for (const auto& a : d.attrs) {
    if (!attrs[a.name]) case_yaml::fail(attrs, "missing attr '" + a.name + "'");
    c.attrs.push_back(read_number(attrs[a.name], DType::f64, "attr " + a.name));
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
    case_yaml::expect_keys(t, {"dtype", "values"}, "input " + in.name);
    const DType dt = read_dtype(t["dtype"]);
    const auto ext = d.extents(in.shape, c.dims);
    total += static_cast<double>(count(ext));
    if (total > double(1 << 26)) case_yaml::fail(t, "the case is too large");
    std::vector<double> v;
    if (!t["values"]) case_yaml::fail(t, "input " + in.name + " needs values");
    read_nested(t["values"], ext, 0, dt, "input " + in.name, v);
    c.dtypes.push_back(dt);
    c.inputs.push_back(std::move(v));
  }
  return box(std::move(c));
}

// ---------------------------------------------------------------- named tensors
const expr::TensorInfos& Traits::tensor_infos() {
  static const expr::TensorInfos none;
  return none;
}

namespace {}  // namespace

// floor.Y: op::floor_of (kernels/op/op.h, its derivation).
void Traits::tensors(const Case& c, const Result* target, const Result* reference, expr::TensorMap& out) {
  const Decl& d = *c.decl;
  put_inputs(c, out, false);
  std::optional<Result> ref_own, naive_res;
  auto ref = [&]() -> const Result& {
    if (reference) return *reference;
    if (!ref_own) ref_own = op::reference(c);
    return *ref_own;
  };
  const bool want_naive = out.wants_prefix("naive.");
  if (want_naive) naive_res = op::naive(c);
  for (size_t i = 0; i < d.outputs.size(); ++i) {
    const auto& o = d.outputs[i];
    const auto ext = d.extents(o.shape, c.dims);
    if (target && out.wanted("target." + o.name))
      out.put("target." + o.name, expr::Tensor::of(ext, target->outputs[i]));
    if (out.wanted("reference." + o.name))
      out.put("reference." + o.name, expr::Tensor::of(ext, ref().outputs[i]));
    if (want_naive && out.wanted("naive." + o.name))
      out.put("naive." + o.name, expr::Tensor::of(ext, naive_res->outputs[i]));
    if (out.wanted("floor." + o.name))
      out.put("floor." + o.name, expr::Tensor::scalar(op::floor_of(c, i, ref().outputs[i])));
  }
}

// ---------------------------------------------------------------- transforms
const std::vector<TransformInfo>& Traits::transforms() {
  static const std::vector<TransformInfo> list = [] {
    std::vector<TransformInfo> l = {{"scale", "", {}, {}}, {"shift", "", {}, {}}};
    for (size_t k = 0; k < kMaxDims; ++k)
      l.push_back(
          {fmt::format("permute_dim{}", k), "", {}, {{"transform.perm", {}, expr::DType::integer, ""}}});
    return l;
  }();
  return list;
}

Case Traits::transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                       expr::TensorMap& out) {
  const Decl& d = *c.decl;
  Case s = c;
  if (name == "scale" || name == "shift") {
    for (size_t i = 0; i < d.inputs.size(); ++i) {
      const double f = params.real(d.inputs[i].name);
      for (double& v : s.inputs[i]) v = round_to(c.dtypes[i], name == "scale" ? v * f : v + f);
    }
    return s;
  }
  const size_t k = static_cast<size_t>(std::stoul(name.substr(std::string("permute_dim").size())));
  const int64_t n = c.dims[k];
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t j = n - 1; j > 0; --j)  // Fisher-Yates on kprop::rng
    std::swap(perm[static_cast<size_t>(j)],
              perm[static_cast<size_t>(rng::hash(seed, 7, static_cast<uint64_t>(j)) %
                                       static_cast<uint64_t>(j + 1))]);
  s = keep_indices(c, k, perm);
  out.put("transform.perm", expr::Tensor::ints({n}, perm));
  return s;
}

// ---------------------------------------------------------------- the family
OpFamily::OpFamily(std::shared_ptr<const Decl> decl) : decl_(std::move(decl)) {
  const Decl& d = *decl_;
  infos_ = d.reference_infos;
  for (const auto& o : d.outputs) {
    infos_.push_back({"target." + o.name, o.shape, expr::DType::real, "output " + o.name + " of the target"});
    infos_.push_back({"reference." + o.name, o.shape, expr::DType::real, "the reference expression in fp64"});
    infos_.push_back({"naive." + o.name, o.shape, expr::DType::real,
                      "the reference expression with every intermediate rounded to the output's dtype"});
    infos_.push_back({"floor." + o.name,
                      {},
                      expr::DType::real,
                      "(8 + 2 ceil(log2 n)) × u(dtype) × max|reference." + o.name +
                          "|, n the largest dim (8 + 2n for f64 outputs); close(k=) adds it"});
  }
  Schema scale, shift;
  for (const auto& in : d.inputs) {
    scale.push_back(field::real(in.name, 1.0, -1e300, 1e300, "factor applied to input " + in.name));
    shift.push_back(field::real(in.name, 0.0, -1e300, 1e300, "offset added to input " + in.name));
  }
  transforms_.push_back({"scale", "every input times its factor (rounded to its dtype)", scale, {}});
  transforms_.push_back({"shift", "every input plus its offset (rounded to its dtype)", shift, {}});
  for (const auto& dim : d.dims)
    transforms_.push_back({"permute_" + dim.name,
                           "a random permutation along every axis named " + dim.name,
                           {},
                           {{"transform.perm", {dim.name}, expr::DType::integer, "the permutation drawn"}}});
  implementation({"reference", ImplKind::reference, "the declared reference expressions, in fp64"},
                 op::reference);
  implementation({"naive", ImplKind::optimized,
                  "the reference expressions with every intermediate rounded to the output's dtype"},
                 op::naive);
  register_invariants(*this);
  register_external(*this);
}

namespace {

std::vector<DeclaredKey> section_keys() {
  std::vector<std::string> kinds;
  for (auto k : {ValueKind::normal, ValueKind::uniform, ValueKind::integer, ValueKind::large,
                 ValueKind::small, ValueKind::constant_rows})
    kinds.push_back(value_kind_name(k));
  return {
      {"name", "NAME", "the op's name in exec:/plugin: requests (default: the spec's name)"},
      {"dims", "{DIM: [lo, hi] | N | {range: [lo, hi], multiple_of: M, one_of: [N, ...]}}",
       "symbolic extents drawn per case (1 <= lo <= hi <= 2^24); shrinking moves each toward its least valid "
       "value"},
      {"attrs", "{ATTR: X | [lo, hi] | {one_of: [X, ...]} | {range: [lo, hi]}, with int: true for integers}",
       "scalars drawn per case, sent as JSON attrs; references read them by name"},
      {"inputs",
       "{NAME: {shape: [DIM | N, ...], dtype: f32 | f64 | [f32, f64], values: KIND | [KIND, ...] | {KIND: "
       "{params}}}}",
       "input tensors; the first input listing dtypes sets the case's dtype; value kinds: " + join(kinds) +
           " (normal/constant_rows take mean, std; the others lo, hi)"},
      {"outputs", "{NAME: {shape: [DIM | N, ...], dtype: f32 | f64}}",
       "output tensors the target returns (dtype default: the case's)"},
      {"reference", "{OUTPUT: EXPR}",
       "one expression per output, evaluated in fp64 on the inputs, dims and attrs (docs/SPEC.md expression "
       "functions); also evaluated with every intermediate rounded to the output's dtype (naive.OUTPUT)"},
  };
}

[[maybe_unused]] const bool registered = register_declared_family(
    {"op", "op", "a kernel declared in the spec itself",
     [](const YAML::Node& section, const DeclaredFamilyContext& context) -> std::shared_ptr<const Family> {
       return std::make_shared<OpFamily>(parse_decl(section, context));
     },
     section_keys(),
     "dims: {T: [1, 64], D: [1, 512]}\n"
     "attrs: {eps: {one_of: [1.0e-5, 1.0e-6]}}\n"
     "inputs:\n"
     "  x: {shape: [T, D], dtype: [f32, f64], values: [normal, large, constant_rows, integer]}\n"
     "  w: {shape: [D], values: {normal: {mean: 1, std: 0.1}}}\n"
     "outputs:\n"
     "  y: {shape: [T, D]}\n"
     "reference:\n"
     "  y: x / sqrt(mean(x * x, axis=-1, keepdims=true) + eps) * w\n"});

}  // namespace

}  // namespace kprop::op
