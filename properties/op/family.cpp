// The op family: generation, shrinking, the YAML codec, named tensors and
// transforms, all driven by the spec's declaration (kernels/op/op.h).
#include "properties/op/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
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
  const auto t = float_type(dtype);
  return t ? value_text(*t, v) : fmt::format("{}", static_cast<int64_t>(v));
}

// The significant digits of number_text(v) (0 for 0 and non-finite values).
int significant_digits(double v, DType dtype) {
  if (v == 0 || !std::isfinite(v)) return 0;
  if (!is_half(dtype)) return case_yaml::significant_digits(v, dtype == DType::f32);
  std::string digits;
  for (const char ch : number_text(v, dtype)) {
    if (ch == 'e' || ch == 'E') break;
    if (ch >= '0' && ch <= '9') digits += ch;
  }
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 0;
  return static_cast<int>(digits.find_last_not_of('0') - first + 1);
}

double round_digits(double v, int k, DType dtype) {
  const std::string s = fmt::format("{:.{}e}", v, k - 1);
  return round_to(dtype, std::strtod(s.c_str(), nullptr));
}

// v's first k significant digits (toward zero), in the dtype.
double truncate_digits(double v, int k, DType dtype) {
  std::string s = fmt::format("{:.20e}", v);  // [-]d.dddd...e[+-]XX
  const size_t dot = s.find('.'), e = s.find('e');
  s.erase(dot + static_cast<size_t>(k), e - dot - static_cast<size_t>(k));
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
    double w = round_digits(v, k, dtype);
    // Rounded past the top of the range (f16's 65504 to 7e4): the k digits
    // truncated instead (6e4).
    if (!std::isfinite(w)) w = truncate_digits(v, k, dtype);
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

namespace {

// Calls f(line, base, stride, n) for every line of `ext` along `axis`.
template <typename F>
void for_lines(const std::vector<int64_t>& ext, size_t axis, F f) {
  int64_t outer = 1, inner = 1;
  for (size_t k = 0; k < axis; ++k) outer *= ext[k];
  for (size_t k = axis + 1; k < ext.size(); ++k) inner *= ext[k];
  const int64_t n = ext[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) f(o * inner + i, o * n * inner + i, inner, n);
}

// The causal mask of extents `ext` (the last two axes rows, cols).
std::vector<double> causal_mask(const std::vector<int64_t>& ext, bool bottom_right) {
  const int64_t rows = ext[ext.size() - 2], cols = ext.back();
  std::vector<double> m(static_cast<size_t>(count(ext)));
  const int64_t shift = bottom_right ? cols - rows : 0;
  for (size_t k = 0; k < m.size(); ++k) {
    const int64_t col = static_cast<int64_t>(k) % cols, row = (static_cast<int64_t>(k) / cols) % rows;
    m[k] = col <= row + shift ? 1 : 0;
  }
  return m;
}

// The least valid length of a padding row of n elements.
int64_t padding_min(const ValueSpec& v, int64_t n) {
  return std::min(static_cast<int64_t>(v.a), n);
}

// ids' exclusive bound on a case's dims.
int64_t ids_bound(const ValueSpec& v, const std::vector<int64_t>& dims) {
  return v.bound_dim >= 0 ? dims[static_cast<size_t>(v.bound_dim)] : static_cast<int64_t>(v.a);
}

const ValueSpec* structured_kind(const Case& c, size_t i) {
  if (c.kinds.size() <= i || c.kinds[i] < 0) return nullptr;
  return &c.decl->inputs[i].values[static_cast<size_t>(c.kinds[i])];
}

}  // namespace

void normalize_structured(Case& c) {
  const Decl& d = *c.decl;
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const ValueSpec* v = structured_kind(c, i);
    if (!v) continue;
    auto& x = c.inputs[i];
    const auto ext = d.extents(d.inputs[i].shape, c.dims);
    switch (v->kind) {
      case ValueKind::permutation:  // each line re-ranked: a permutation of [0, n)
        for_lines(ext, static_cast<size_t>(v->axis), [&](int64_t, int64_t base, int64_t stride, int64_t n) {
          std::vector<std::pair<double, int64_t>> line;
          for (int64_t j = 0; j < n; ++j) line.push_back({x[static_cast<size_t>(base + j * stride)], j});
          std::sort(line.begin(), line.end());
          for (int64_t r = 0; r < n; ++r)
            x[static_cast<size_t>(base + line[static_cast<size_t>(r)].second * stride)] =
                static_cast<double>(r);
        });
        break;
      case ValueKind::ids: {
        const double bound = static_cast<double>(ids_bound(*v, c.dims));
        for (double& e : x)
          if (!(e >= 0 && e < bound)) e = 0;
        break;
      }
      case ValueKind::causal:
        x = causal_mask(ext, v->bottom_right);
        break;
      case ValueKind::padding:  // the valid count of each row as a prefix, at least the minimum
        if (!ext.empty())
          for_lines(ext, ext.size() - 1, [&](int64_t, int64_t base, int64_t stride, int64_t n) {
            int64_t len = 0;
            for (int64_t j = 0; j < n; ++j) len += x[static_cast<size_t>(base + j * stride)] != 0;
            len = std::max(len, padding_min(*v, n));
            for (int64_t j = 0; j < n; ++j) x[static_cast<size_t>(base + j * stride)] = j < len ? 1 : 0;
          });
        break;
      case ValueKind::bernoulli:
        for (double& e : x) e = e != 0 ? 1 : 0;
        break;
      default:
        break;
    }
  }
}

std::string check_input(const Case& c, size_t i) {
  const Decl& d = *c.decl;
  {
    const auto& in = d.inputs[i];
    const auto& x = c.inputs[i];
    if (!is_float(c.dtypes[i])) {
      if (x.size() != static_cast<size_t>(count(d.extents(in.shape, c.dims))))
        return fmt::format("input {} has {} values, not {}", in.name, x.size(), expr::shape_text(in.shape));
      const auto [lo, hi] = int_range(c.dtypes[i]);
      for (double e : x)
        if (e != std::floor(e) || e < lo || e > hi)
          return fmt::format("input {} ({}) holds {}, not a value of its dtype", in.name,
                             dtype_name(c.dtypes[i]), e);
    }
    const ValueSpec* v = structured_kind(c, i);
    if (!v) return "";
    const auto ext = d.extents(in.shape, c.dims);
    std::string why;
    switch (v->kind) {
      case ValueKind::ids: {
        const int64_t bound = ids_bound(*v, c.dims);
        for (size_t k = 0; k < x.size() && why.empty(); ++k)
          if (x[k] < 0 || x[k] >= static_cast<double>(bound))
            why = fmt::format("input {}: id {} at {} is outside [0, {})", in.name, x[k], k, bound);
        break;
      }
      case ValueKind::integer:
        for (size_t k = 0; k < x.size() && why.empty(); ++k)
          if (x[k] < v->a || x[k] > v->b)
            why = fmt::format("input {}: {} at {} is outside [{}, {}]", in.name, x[k], k, v->a, v->b);
        break;
      case ValueKind::permutation:
        for_lines(
            ext, static_cast<size_t>(v->axis), [&](int64_t line, int64_t base, int64_t stride, int64_t n) {
              std::vector<bool> seen(static_cast<size_t>(n));
              for (int64_t j = 0; j < n && why.empty(); ++j) {
                const double e = x[static_cast<size_t>(base + j * stride)];
                if (e < 0 || e >= static_cast<double>(n) || seen[static_cast<size_t>(e)])
                  why = fmt::format("input {}: line {} is not a permutation of [0, {})", in.name, line, n);
                else
                  seen[static_cast<size_t>(e)] = true;
              }
            });
        break;
      case ValueKind::causal:
        if (x != causal_mask(ext, v->bottom_right))
          why = fmt::format("input {} is not the causal mask", in.name);
        break;
      case ValueKind::padding:
        for_lines(ext, ext.size() - 1, [&](int64_t line, int64_t base, int64_t stride, int64_t n) {
          int64_t len = 0;
          while (len < n && x[static_cast<size_t>(base + len * stride)] != 0) ++len;
          for (int64_t j = len; j < n && why.empty(); ++j)
            if (x[static_cast<size_t>(base + j * stride)] != 0)
              why = fmt::format("input {}: row {} is not a valid prefix", in.name, line);
          if (why.empty() && len < padding_min(*v, n))
            why = fmt::format("input {}: row {} has {} valid elements, fewer than {}", in.name, line, len,
                              padding_min(*v, n));
        });
        break;
      default:
        break;
    }
    return why;
  }
}

std::string check_structured(const Case& c) {
  for (size_t i = 0; i < c.decl->inputs.size(); ++i)
    if (auto why = check_input(c, i); !why.empty()) return why;
  return "";
}

Case keep_indices(const Case& c, size_t dim, const std::vector<int64_t>& keep) {
  const Decl& d = *c.decl;
  Case s = c;
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    s.inputs[i] =
        gather(c.inputs[i], d.extents(d.inputs[i].shape, c.dims), d.inputs[i].shape, d.dims[dim].name, keep);
    // ids into the cut dim follow their rows (kept index keep[p] -> p; dropped -> 0)
    const ValueSpec* v = structured_kind(c, i);
    if (v && v->kind == ValueKind::ids && v->bound_dim == static_cast<int>(dim)) {
      std::vector<int64_t> where(static_cast<size_t>(c.dims[dim]), 0);
      for (size_t p = keep.size(); p-- > 0;) where[static_cast<size_t>(keep[p])] = static_cast<int64_t>(p);
      for (double& e : s.inputs[i])
        e = e >= 0 && e < static_cast<double>(where.size())
                ? static_cast<double>(where[static_cast<size_t>(e)])
                : 0;
    }
  }
  s.dims[dim] = static_cast<int64_t>(keep.size());
  normalize_structured(s);
  return s;
}

// ---------------------------------------------------------------- generation
Case Traits::build(Draw&, const Values&) {
  throw std::logic_error("op: cases are built by OpFamily from its declaration");
}

namespace {

// Dims in declaration order. Without relations, each uniformly (size-ramped)
// among its valid values. With relations, each soft equality is forced at
// its rate (when it can hold with those forced before it), then each dim is
// drawn among the values left by arc consistency given the dims drawn
// before it that extend to a full assignment (Decl::extends: with gaps in
// the valid values, arc consistency alone can leave a dead end), so the
// draw never dead-ends.
std::vector<int64_t> draw_dims(const Decl& d, Draw& draw) {
  std::vector<int64_t> out;
  if (d.relations.empty()) {
    for (const auto& dim : d.dims) {
      const std::vector<int64_t> values = dim.values_below(dim.hi + 1);
      out.push_back(values[static_cast<size_t>(draw.sized({0, static_cast<int64_t>(values.size()) - 1}))]);
    }
    return out;
  }
  std::vector<Relation> forced;
  for (const auto& r : d.relations)
    if (!r.hard() && draw.chance(r.rate)) {
      forced.push_back(r);
      forced.back().rate = 1;
      if (!d.extends(std::vector<int64_t>(d.dims.size(), -1), forced)) forced.pop_back();
    }
  // Each dim among its pruned values; a value that extends to no full
  // assignment (possible with gaps) is dropped and the draw repeated.
  std::vector<int64_t> fixed(d.dims.size(), -1);
  for (size_t k = 0; k < d.dims.size(); ++k) {
    std::vector<int64_t> values = d.consistent_domains(fixed, forced)[k];
    for (;;) {
      if (values.empty()) throw std::logic_error("op: the relations dead-ended at dim " + d.dims[k].name);
      const auto i = static_cast<size_t>(draw.sized({0, static_cast<int64_t>(values.size()) - 1}));
      fixed[k] = values[i];
      if (d.extends(fixed, forced)) break;
      values.erase(values.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return fixed;
}

// The special value `s` in `dt` (a denormal: from the hash h).
double special_value(Special s, DType dt, uint64_t h) {
  switch (s) {
    case Special::nan:
      return NAN;
    case Special::pos_inf:
      return INFINITY;
    case Special::neg_inf:
      return -INFINITY;
    case Special::pos_zero:
      return 0.0;
    case Special::neg_zero:
      return -0.0;
    case Special::denormal: {  // a subnormal of dt: k · denorm_min, 0 < k < 2^(mantissa bits)
      const int bits = dt == DType::f32 ? 23 : dt == DType::f16 ? 10 : dt == DType::bf16 ? 7 : 52;
      const uint64_t mant = (uint64_t{1} << bits) - 1;
      const double v = static_cast<double>(1 + (h >> 1) % mant) * denorm_min(dt);
      return h & 1 ? -v : v;
    }
    case Special::max:
      return h & 1 ? -max_finite(dt) : max_finite(dt);
  }
  return 0;
}

}  // namespace

Case OpFamily::build_case(Draw& draw) const {
  const Decl& d = *decl_;
  Case c;
  c.decl = decl_;
  c.dims = draw_dims(d, draw);
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
    const bool floating = in.floating();
    const DType dt = in.dtypes.empty() || in.dtypes == d.case_dtypes ? c.dtype : draw.pick(in.dtypes);
    c.dtypes.push_back(dt);
    const int kind = draw.index(in.values.size());
    const ValueSpec& v = in.values[static_cast<size_t>(kind)];
    c.kinds.push_back(floating ? -1 : kind);
    const double u =
        (v.kind == ValueKind::large || v.kind == ValueKind::small) ? draw.any(RealRange{v.a, v.b}) : 0;
    // Specials on in half the cases (the other half stays clean).
    const bool specials = in.specials.rate > 0 && draw.chance(0.5);
    const std::vector<int64_t> ext = d.extents(in.shape, c.dims);
    const size_t n = static_cast<size_t>(count(ext));
    const size_t row = ext.empty() ? 1 : static_cast<size_t>(ext.back());
    std::vector<double> x(n);
    switch (v.kind) {
      case ValueKind::permutation:  // Fisher-Yates per line on kprop::rng
        for_lines(
            ext, static_cast<size_t>(v.axis), [&](int64_t line, int64_t base, int64_t stride, int64_t m) {
              std::vector<int64_t> p(static_cast<size_t>(m));
              std::iota(p.begin(), p.end(), 0);
              for (int64_t j = m - 1; j > 0; --j)
                std::swap(p[static_cast<size_t>(j)],
                          p[rng::hash(seed, stream(i, 7), static_cast<uint64_t>(line * m + j)) %
                            static_cast<uint64_t>(j + 1)]);
              for (int64_t j = 0; j < m; ++j)
                x[static_cast<size_t>(base + j * stride)] = static_cast<double>(p[static_cast<size_t>(j)]);
            });
        break;
      case ValueKind::causal:
        x = causal_mask(ext, v.bottom_right);
        break;
      case ValueKind::padding:
        for_lines(ext, ext.size() - 1, [&](int64_t line, int64_t base, int64_t stride, int64_t m) {
          const int64_t lo = padding_min(v, m);
          const int64_t len =
              lo + static_cast<int64_t>(rng::uniform(seed, stream(i, 8), static_cast<uint64_t>(line)) *
                                        static_cast<double>(m - lo + 1));
          for (int64_t j = 0; j < m; ++j) x[static_cast<size_t>(base + j * stride)] = j < len ? 1 : 0;
        });
        break;
      default:
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
              x[k] = std::min(v.b, std::floor(v.a + (v.b - v.a + 1) * w));
              break;
            case ValueKind::large:
              // Half dtypes: 10^u capped at a quarter of the largest finite
              // value (f16: 16376), so the tensor spans the top of the range
              // (x² overflows f16 from |x| = 256 on) without saturating.
              x[k] = z * (is_half(dt) ? std::min(std::pow(10.0, u), max_finite(dt) / 4) : std::pow(10.0, u));
              break;
            case ValueKind::small:
              x[k] = z * std::pow(10.0, -u);
              break;
            case ValueKind::constant_rows:
              x[k] = v.a + v.b * rng::normal(seed, stream(i, 3), k / std::max<size_t>(row, 1));
              break;
            case ValueKind::denormal:
              x[k] = special_value(Special::denormal, dt, rng::hash(seed, stream(i, 6), k));
              break;
            case ValueKind::ids:
              x[k] = std::min(std::floor(w * static_cast<double>(ids_bound(v, c.dims))),
                              static_cast<double>(ids_bound(v, c.dims) - 1));
              break;
            case ValueKind::bernoulli:
              x[k] = w < v.a ? 1 : 0;
              break;
            default:
              break;
          }
          if (specials && rng::uniform(seed, stream(i, 4), k) < in.specials.rate) {
            const auto& sv = in.specials.values;
            x[k] = special_value(sv[rng::hash(seed, stream(i, 5), k) % sv.size()], dt,
                                 rng::hash(seed, stream(i, 6), k));
          }
          // Half dtypes: every finite value clamped to the finite range, so
          // no value becomes inf by rounding (inf only as a declared special).
          if (is_half(dt) && std::isfinite(x[k])) x[k] = std::clamp(x[k], -max_finite(dt), max_finite(dt));
          x[k] = round_to(dt, x[k]);
        }
    }
    c.inputs.push_back(std::move(x));
  }
  return c;
}

// ---------------------------------------------------------------- shrinking
namespace {

// The dims after setting dim k to m, with the dims the hard relations
// couple to it lowered as little as needed (each to its largest valid value
// that satisfies them); none when that would need a dim to grow.
std::optional<std::vector<int64_t>> coupled_dims(const Decl& d, std::vector<int64_t> dims, size_t k,
                                                 int64_t m) {
  dims[k] = m;
  // The largest valid value of dim j that is <= cap and makes r hold.
  auto lower = [&](size_t j, int64_t cap, auto ok) -> bool {
    for (int64_t v : [&] {
           auto below = d.dims[j].values_below(cap + 1);
           std::reverse(below.begin(), below.end());
           return below;
         }())
      if (ok(v)) {
        dims[j] = v;
        return true;
      }
    return false;
  };
  for (size_t round = 0; round <= 4 * d.dims.size() + 4; ++round) {
    bool violated = false;
    for (const auto& r : d.relations) {
      if (!r.hard()) continue;
      const size_t a = static_cast<size_t>(r.a), b = static_cast<size_t>(r.b);
      if (r.holds(dims[a], dims[b])) continue;
      violated = true;
      bool ok = false;
      switch (r.op) {
        case RelOp::ge:
        case RelOp::gt:  // b too large: lower b
          ok = lower(b, dims[b], [&](int64_t v) { return r.holds(dims[a], v); });
          break;
        case RelOp::le:
        case RelOp::lt:  // a too large: lower a
          ok = lower(a, dims[a], [&](int64_t v) { return r.holds(v, dims[b]); });
          break;
        case RelOp::eq: {  // both to the largest value valid for both <= the smaller
          const int64_t cap = std::min(dims[a], dims[b]);
          ok = lower(a, cap, [&](int64_t v) { return d.dims[b].valid(v); });
          if (ok) dims[b] = dims[a];
          break;
        }
      }
      if (!ok) return std::nullopt;
    }
    // The cut dim keeps m: a partner that needed it lowered further (an
    // equality where m is not valid for the partner) gives no candidate.
    if (!violated) return dims[k] == m ? std::optional(dims) : std::nullopt;
  }
  return std::nullopt;
}

// Simpler values for an element of an integer tensor: 0, then half.
std::vector<double> simpler_ints(double v) {
  if (v == 0) return {};
  std::vector<double> out = {0};
  const double h = std::trunc(v / 2);
  if (h != 0) out.push_back(h);
  return out;
}

}  // namespace

// One step, boldest first: each dim toward its smallest valid value (the
// leading or trailing indices kept; then, for short dims, each single index
// dropped; dims coupled by a hard relation lowered with it, cut the same
// way when they had its extent), attrs toward their first choice / round
// values, each floating input all 0 or all 1 or its special values 0, each
// index tensor all 0 / identity, each mask all true; then each element
// toward 0, 1 and fewer significant digits (ids toward 0 and halves, one
// transposition toward the identity per permutation line, one mask element
// toward true). Lazy.
rc::Seq<Case> Traits::shrinks(const Case& c0, const Values&) {
  auto c = std::make_shared<const Case>(c0);
  const Decl& d = *c->decl;
  struct Cut {
    size_t dim;
    std::vector<int64_t> keep;
  };
  std::vector<Cut> cuts;
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
  auto structure = rc::seq::mapcat(rc::seq::fromContainer(std::move(cuts)), [c](const Cut& cut) {
    const Decl& d = *c->decl;
    const int64_t m = static_cast<int64_t>(cut.keep.size());
    std::vector<Case> out;
    const auto dims =
        d.relations.empty() ? std::optional(std::vector<int64_t>{}) : coupled_dims(d, c->dims, cut.dim, m);
    if (!dims) return rc::seq::fromContainer(std::move(out));
    Case s = keep_indices(*c, cut.dim, cut.keep);
    for (size_t j = 0; j < dims->size(); ++j) {
      if (j == cut.dim || (*dims)[j] == c->dims[j]) continue;
      std::vector<int64_t> keep(static_cast<size_t>((*dims)[j]));
      if ((*dims)[j] == m && c->dims[j] == c->dims[cut.dim])
        keep = cut.keep;  // the same indices as the dim it is coupled to
      else
        std::iota(keep.begin(), keep.end(), 0);
      s = keep_indices(s, j, keep);
    }
    out.push_back(std::move(s));
    return rc::seq::fromContainer(std::move(out));
  });

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
  auto offer = [&](size_t i, std::vector<double> x) {
    if (x == c->inputs[i]) return;
    Case s = *c;
    s.inputs[i] = std::move(x);
    global.push_back(std::move(s));
  };
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const auto& x = c->inputs[i];
    const ValueSpec* v = c->kinds.size() > i && c->kinds[i] >= 0
                             ? &d.inputs[i].values[static_cast<size_t>(c->kinds[i])]
                             : nullptr;
    if (!v) {
      // All 1 only where no element is 0 already (0 is simpler than 1):
      // otherwise all-0 and all-1 would shrink into each other.
      offer(i, std::vector<double>(x.size(), 0.0));
      if (std::find(x.begin(), x.end(), 0.0) == x.end()) offer(i, std::vector<double>(x.size(), 1.0));
      // Every special value (NaN, ±inf) 0 at once.
      std::vector<double> clean = x;
      for (double& e : clean)
        if (!std::isfinite(e)) e = 0;
      offer(i, std::move(clean));
      continue;
    }
    switch (v->kind) {
      case ValueKind::ids:
      case ValueKind::integer:
        if (v->kind == ValueKind::ids || (v->a <= 0 && v->b >= 0))
          offer(i, std::vector<double>(x.size(), 0.0));
        break;
      case ValueKind::permutation: {  // the identity: re-ranking the positions
        std::vector<double> id = x;
        const auto ext = d.extents(d.inputs[i].shape, c->dims);
        for_lines(ext, static_cast<size_t>(v->axis), [&](int64_t, int64_t base, int64_t stride, int64_t n) {
          for (int64_t j = 0; j < n; ++j) id[static_cast<size_t>(base + j * stride)] = static_cast<double>(j);
        });
        offer(i, std::move(id));
        break;
      }
      case ValueKind::padding:
      case ValueKind::bernoulli:
        offer(i, std::vector<double>(x.size(), 1.0));
        break;
      default:
        break;
    }
  }

  struct Slot {
    size_t input, index;
  };
  std::vector<Slot> slots;
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const ValueSpec* v = c->kinds.size() > i && c->kinds[i] >= 0
                             ? &d.inputs[i].values[static_cast<size_t>(c->kinds[i])]
                             : nullptr;
    if (v && v->kind == ValueKind::causal) continue;  // fixed by the shape
    if (v && v->kind == ValueKind::permutation) {
      // One slot per line (index = the line).
      const auto ext = d.extents(d.inputs[i].shape, c->dims);
      const int64_t n = ext[static_cast<size_t>(v->axis)];
      for (size_t line = 0; line < c->inputs[i].size() / static_cast<size_t>(std::max<int64_t>(n, 1)); ++line)
        slots.push_back({i, line});
      continue;
    }
    if (v && v->kind == ValueKind::padding) {  // one slot per row: its full length
      const size_t n =
          static_cast<size_t>(std::max<int64_t>(d.extents(d.inputs[i].shape, c->dims).back(), 1));
      for (size_t row = 0; row < c->inputs[i].size() / n; ++row) slots.push_back({i, row});
      continue;
    }
    for (size_t k = 0; k < c->inputs[i].size(); ++k) slots.push_back({i, k});
  }
  auto values = rc::seq::mapcat(rc::seq::fromContainer(std::move(slots)), [c](const Slot& slot) {
    const Decl& d = *c->decl;
    const auto& x = c->inputs[slot.input];
    const ValueSpec* v = c->kinds.size() > slot.input && c->kinds[slot.input] >= 0
                             ? &d.inputs[slot.input].values[static_cast<size_t>(c->kinds[slot.input])]
                             : nullptr;
    std::vector<Case> out;
    auto with = [&](std::vector<double> y) {
      if (y == x) return;
      Case s = *c;
      s.inputs[slot.input] = std::move(y);
      out.push_back(std::move(s));
    };
    const auto ext = d.extents(d.inputs[slot.input].shape, c->dims);
    if (v && v->kind == ValueKind::permutation) {
      // The first misplaced element of the line swapped into place: one
      // more fixed point each step.
      for_lines(ext, static_cast<size_t>(v->axis),
                [&](int64_t line, int64_t base, int64_t stride, int64_t n) {
                  if (static_cast<size_t>(line) != slot.index) return;
                  for (int64_t j = 0; j < n; ++j) {
                    const size_t at = static_cast<size_t>(base + j * stride);
                    if (x[at] == static_cast<double>(j)) continue;
                    std::vector<double> y = x;
                    for (int64_t q = j + 1; q < n; ++q)
                      if (x[static_cast<size_t>(base + q * stride)] == static_cast<double>(j))
                        std::swap(y[at], y[static_cast<size_t>(base + q * stride)]);
                    with(std::move(y));
                    return;
                  }
                });
    } else if (v && v->kind == ValueKind::padding) {
      const size_t n = static_cast<size_t>(ext.back());
      std::vector<double> y = x;
      std::fill_n(y.begin() + static_cast<std::ptrdiff_t>(slot.index * n), n, 1.0);
      with(std::move(y));
    } else if (v && v->kind == ValueKind::bernoulli) {
      if (x[slot.index] == 0) {
        std::vector<double> y = x;
        y[slot.index] = 1;
        with(std::move(y));
      }
    } else if (v) {  // ids, integer
      for (double w : simpler_ints(x[slot.index])) {
        if (v->kind == ValueKind::integer && (w < v->a || w > v->b)) continue;
        std::vector<double> y = x;
        y[slot.index] = w;
        with(std::move(y));
      }
    } else {
      for (double w : simpler_values(x[slot.index], c->dtypes[slot.input])) {
        std::vector<double> y = x;
        y[slot.index] = w;
        with(std::move(y));
      }
    }
    return rc::seq::fromContainer(std::move(out));
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
  if (auto why = d.relations_violated(c.dims); !why.empty()) return why;
  if (std::find(d.case_dtypes.begin(), d.case_dtypes.end(), c.dtype) == d.case_dtypes.end())
    return fmt::format("dtype {} is not declared", dtype_name(c.dtype));
  if (c.kinds.size() != d.inputs.size()) return "the case does not record each input's kind";
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const auto& in = d.inputs[i];
    const bool ok = in.dtypes.empty()
                        ? c.dtypes[i] == c.dtype
                        : std::find(in.dtypes.begin(), in.dtypes.end(), c.dtypes[i]) != in.dtypes.end();
    if (!ok) return fmt::format("input {} has dtype {}, not declared", in.name, dtype_name(c.dtypes[i]));
    if (static_cast<int64_t>(c.inputs[i].size()) != count(d.extents(in.shape, c.dims)))
      return fmt::format("input {} has {} values, not {}", in.name, c.inputs[i].size(),
                         expr::shape_text(in.shape));
    if (in.floating() ? c.kinds[i] != -1 : c.kinds[i] < 0 || c.kinds[i] >= static_cast<int>(in.values.size()))
      return fmt::format("input {} has no valid kind ({})", in.name, c.kinds[i]);
  }
  return check_structured(c);
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
    for (double v : x) size += v != 0 && std::isfinite(v) ? 1 : 0;  // a value not yet shrunk away
  CaseStats s{size, fmt::format("{} {}", join(parts, ", "), dtype_name(c.dtype))};
  for (size_t k = 0; k < d.dims.size(); ++k) s.dim(d.dims[k].name, double(c.dims[k]));  // the declared dims
  return s.kind("dtype", dtype_name(c.dtype));
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
  if (!is_float(dtype)) {
    if (dtype == DType::boolean && (s == "true" || s == "false")) return s == "true" ? 1 : 0;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE)
      case_yaml::fail(n, fmt::format("{} has '{}', not an integer", what, s));
    const auto [lo, hi] = int_range(dtype);
    if (static_cast<double>(v) < lo || static_cast<double>(v) > hi)
      case_yaml::fail(n, fmt::format("{} has {}, outside {}", what, v, dtype_name(dtype)));
    return static_cast<double>(v);
  }
  if (s == ".nan" || s == ".NaN") return NAN;
  if (s == ".inf" || s == "+.inf") return INFINITY;
  if (s == "-.inf") return -INFINITY;
  char* end = nullptr;
  errno = 0;
  // f32: the nearest float (strtof). Halves: the decimal's double rounded to
  // nearest even in the half type (half::round_to_*; exact for the text
  // number_text writes, which is the shortest that reads back this way).
  double v =
      dtype == DType::f32 ? static_cast<double>(std::strtof(s.c_str(), &end)) : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) case_yaml::fail(n, what + " has a non-number '" + s + "'");
  if (is_half(dtype)) v = round_to(dtype, v);
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
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean})
    if (n && n.IsScalar() && n.Scalar() == dtype_name(t)) return t;
  case_yaml::fail(n, "dtype must be f32, f64, f16, bf16, i32, i64 or bool");
}

}  // namespace

// What the corpus file keeps exactly (dtypes, dims, attrs, values with -0
// kept, NaN payloads not), hashed word by word; not the kinds of index
// tensors and masks, which a file may read back as another kind that fits
// the same values.
uint64_t Traits::content_hash(const Case& c) {
  uint64_t h = 0x6f70u;  // "op"
  auto add = [&h](uint64_t w) { h = rng::mix(h ^ w); };
  auto real = [&add](double v) { add(std::isnan(v) ? 0x7ff8000000000000ULL : std::bit_cast<uint64_t>(v)); };
  add(static_cast<uint64_t>(c.dtype));
  for (const int64_t d : c.dims) add(static_cast<uint64_t>(d));
  for (const double a : c.attrs) real(a);
  for (const DType t : c.dtypes) add(static_cast<uint64_t>(t));
  for (const auto& in : c.inputs) {
    add(in.size());
    for (const double v : in) real(v);
  }
  return h;
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
    if (a.labels.empty()) {
      c.attrs.push_back(read_number(attrs[a.name], DType::f64, "attr " + a.name));
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
    const size_t i = c.inputs.size() - 1;
    if (kind >= 0 && !check_input(c, i).empty())
      for (size_t k = static_cast<size_t>(kind) + 1; k < in.values.size(); ++k) {
        if (in.values[k].kind != in.values[static_cast<size_t>(kind)].kind) continue;
        c.kinds[i] = static_cast<int>(k);
        if (check_input(c, i).empty()) break;
        c.kinds[i] = kind;
      }
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
    for (size_t k = 0; k < kMaxDims; ++k) {
      l.push_back(
          {fmt::format("permute_dim{}", k), "", {}, {{"transform.perm", {}, expr::DType::integer, ""}}});
      l.push_back({fmt::format("slice_dim{}", k),
                   "",
                   {},
                   {{"transform.index", {}, expr::DType::integer, ""},
                    {"transform.applies", {}, expr::DType::boolean, ""}}});
    }
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
      if (!is_float(c.dtypes[i])) continue;
      const double f = params.real(d.inputs[i].name);
      for (double& v : s.inputs[i]) v = round_to(c.dtypes[i], name == "scale" ? v * f : v + f);
    }
    return s;
  }
  if (name.rfind("slice_dim", 0) == 0) {
    // A contiguous run [a, a + m) along dim k, m drawn among the smaller
    // values the dim and the hard relations allow (none: the whole dim, and
    // transform.applies = false, so the check is discarded).
    const size_t k = static_cast<size_t>(std::stoul(name.substr(std::string("slice_dim").size())));
    const int64_t n = c.dims[k];
    std::vector<int64_t> sizes;
    for (const int64_t m : d.dims[k].values_below(n)) {
      std::vector<int64_t> dims = c.dims;
      dims[k] = m;
      if (d.relations_violated(dims).empty()) sizes.push_back(m);
    }
    const int64_t m = sizes.empty() ? n : sizes[rng::hash(seed, 11, 0) % sizes.size()];
    const int64_t a = static_cast<int64_t>(rng::hash(seed, 11, 1) % static_cast<uint64_t>(n - m + 1));
    std::vector<int64_t> keep(static_cast<size_t>(m));
    std::iota(keep.begin(), keep.end(), a);
    s = keep_indices(c, k, keep);
    out.put("transform.index", expr::Tensor::ints({m}, keep));
    out.put("transform.applies", expr::Tensor::scalar(m < n ? 1 : 0, expr::DType::boolean));
    return s;
  }
  const size_t k = static_cast<size_t>(std::stoul(name.substr(std::string("permute_dim").size())));
  const int64_t n = c.dims[k];
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  rng::shuffle(perm, seed, 7);
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
    infos_.push_back(
        {"naive." + o.name, o.shape, expr::DType::real,
         "the reference expression with every intermediate rounded to the output's dtype (f32 for a "
         "half output, then rounded to the half at the store)"});
    infos_.push_back(
        {"floor." + o.name,
         {},
         expr::DType::real,
         "(8 + 2 ceil(log2 n)) × u(dtype) × max|reference." + o.name +
             "|, n the largest dim (8 + 2n for f64 outputs; for f16/bf16 outputs u = 2^-24 plus u_store × "
             "max|reference." +
             o.name + "| + denorm_min/2); close(k=) adds it"});
  }
  Schema scale, shift;
  for (const auto& in : d.inputs) {
    if (!in.floating()) continue;
    scale.push_back(field::real(in.name, 1.0, -1e300, 1e300, "factor applied to input " + in.name));
    shift.push_back(field::real(in.name, 0.0, -1e300, 1e300, "offset added to input " + in.name));
  }
  transforms_.push_back({"scale", "every input times its factor (rounded to its dtype)", scale, {}});
  transforms_.push_back({"shift", "every input plus its offset (rounded to its dtype)", shift, {}});
  for (const auto& dim : d.dims) {  // in the order of Traits::transforms()
    transforms_.push_back({"permute_" + dim.name,
                           "a random permutation along every axis named " + dim.name,
                           {},
                           {{"transform.perm", {dim.name}, expr::DType::integer, "the permutation drawn"}}});
    transforms_.push_back(
        {"slice_" + dim.name,
         "a random contiguous run of indices along every axis named " + dim.name +
             " (a smaller valid extent; the whole dim when the relations allow none)",
         {},
         {{"transform.index", {dim.name}, expr::DType::integer, "the indices kept, ascending"},
          {"transform.applies",
           {},
           expr::DType::boolean,
           "false when no smaller extent is valid: the invariant is discarded, not passed"}}});
  }
  implementation({"reference", ImplKind::reference, "the declared reference expressions, in fp64"},
                 op::reference);
  implementation(
      {"naive", ImplKind::optimized,
       "the reference expressions with every intermediate rounded to the output's dtype (f32 for a "
       "half output, stored rounded to nearest even)"},
      op::naive);
  register_invariants(*this);
  register_external(*this);
}

namespace {

std::vector<DeclaredKey> section_keys() {
  return {
      {"name", "NAME", "the op's name in exec:/plugin: requests (default: the spec's name)"},
      {"dims", "{DIM: [lo, hi] | N | {range: [lo, hi], multiple_of: M, one_of: [N, ...]}}",
       "symbolic extents drawn per case (1 <= lo <= hi <= 2^24); shrinking moves each toward its least valid "
       "value"},
      {"relations", "[\"A OP B\" (OP: <, <=, ==, >=, >), {equal: [A, B], rate: R}, ...]",
       "relations between dims: always hold, or an equality forced in a fraction R of the cases; checked "
       "satisfiable at load; shrinking lowers coupled dims together"},
      {"attrs", "{ATTR: X | [lo, hi] | {one_of: [X, ...]} | {range: [lo, hi]}, with int: true for integers}",
       "scalars drawn per case, sent as JSON attrs; references read them by name; one_of of names (e.g. "
       "[gelu, tanh]) is a named choice: targets get the name, references its index (0, 1, ...)"},
      {"inputs",
       "{NAME: {shape: [DIM | N, ...], dtype: f32 | f64 | f16 | bf16 | i32 | i64 | bool | [..], values: KIND "
       "| [KIND, "
       "...] | "
       "{KIND: {params}}, specials: RATE | {rate: R, values: [nan, inf, -inf, 0, -0, denormal, max]}}}",
       "input tensors; the first floating input listing dtypes sets the case's dtype; floating kinds: "
       "normal, "
       "uniform, integer, large, small, constant_rows, denormal; index tensors (i32, i64): ids {below: V}, "
       "permutation {axis}, integer; masks (bool, sent as u8): causal {align}, padding {min}, bernoulli {p}"},
      {"outputs", "{NAME: {shape: [DIM | N, ...], dtype: f32 | f64 | f16 | bf16}}",
       "output tensors the target returns (dtype default: the case's; f16/bf16 store in half, computed in "
       "f32)"},
      {"reference", "{OUTPUT: EXPR}",
       "one expression per output, evaluated in fp64 on the inputs, dims and attrs (docs/SPEC.md expression "
       "functions); also evaluated with every intermediate rounded to the output's dtype (naive.OUTPUT; f32 "
       "for a "
       "half output, then rounded to it)"},
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
