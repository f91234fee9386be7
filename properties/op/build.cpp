// The op family: cases drawn from the declaration (OpFamily::build_case).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "kprop/rng.h"
#include "properties/op/family_parts.h"

namespace kprop::op {

// ---------------------------------------------------------------- generation
Schema Traits::domain_schema() {
  return {};
}

Case Traits::build(Draw&, const Values&) {
  throw std::logic_error("op: cases are built by OpFamily from its declaration");
}

namespace {

// Streams of kprop::rng: one block per input.
uint64_t stream(size_t input, uint64_t what) {
  return 1000 * (static_cast<uint64_t>(input) + 1) + what;
}

// The ends of each declared range, drawn on purpose: the size ramp reaches a
// dim's greatest value only at full size, once in its count of values (T in
// [1, 32]: 1 case in 32 of the largest ones), so a kernel wrong only at the
// top of a range (a table row, a buffer or a loop bound one short) passed.
// Each dim and each attr range takes its greatest value in kAtMaxRate of the
// cases and its least in kAtMinRate of the others, independently: all of a
// case's dims at their greatest at once is rare (0.15^3 for three), and a
// case at the declared maxima fits run.max_case_mb anyway (checked when the
// spec loads).
constexpr double kAtMaxRate = 0.15;
constexpr double kAtMinRate = 0.05;

// An index into n values, smallest first: the last at kAtMaxRate, the first
// at kAtMinRate, else size-ramped.
size_t edge_or_sized(Draw& draw, size_t n) {
  if (draw.chance(kAtMaxRate)) return n - 1;
  if (draw.chance(kAtMinRate)) return 0;
  return static_cast<size_t>(draw.sized({0, static_cast<int64_t>(n) - 1}));
}

// Dims in declaration order. Without relations, each among its valid values:
// at an end (edge_or_sized), else uniformly (size-ramped). With relations, each soft equality is forced at
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
      out.push_back(values[edge_or_sized(draw, values.size())]);
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
  // Each dim among its pruned values (at their ends as edge_or_sized); a
  // value that extends to no full assignment (possible with gaps) is dropped
  // and the draw repeated.
  std::vector<int64_t> fixed(d.dims.size(), -1);
  for (size_t k = 0; k < d.dims.size(); ++k) {
    std::vector<int64_t> values = d.consistent_domains(fixed, forced)[k];
    for (;;) {
      if (values.empty()) throw std::logic_error("op: the relations dead-ended at dim " + d.dims[k].name);
      const size_t i = edge_or_sized(draw, values.size());
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
    case Special::neg_nan:  // the sign bit set (x86's 0/0): a radix sort's key transform puts it first
      return -NAN;
  }
  return 0;
}

// near: attrs, once the inputs are drawn (AttrDecl::near): a value v of the
// expression's among those in [lo, hi], moved by a relative distance drawn
// log-uniformly to one side (the other side when that leaves the range;
// neither: v itself). No value in range: the attr keeps its draw.
void draw_near_attrs(const Decl& d, Case& c, Draw& draw) {
  for (size_t a = 0; a < d.attrs.size(); ++a) {
    const AttrDecl& ad = d.attrs[a];
    if (!ad.near || !draw.chance(ad.near_rate)) continue;
    expr::Tensor near;
    try {  // the spec's error, as a reference that cannot be evaluated (op::reference)
      near = ad.near->evaluate(inputs_map(c, false));
    } catch (const expr::EvalError& e) {
      throw SpecCaseError(
          ad.near_mark, fmt::format("attr {}.near.values: `{}` cannot be evaluated on this case: {}", ad.name,
                                    ad.near->shown(), e.what()));
    }
    std::vector<double> values;
    for (const double v : near.data)
      if (v >= ad.lo && v <= ad.hi) values.push_back(v);
    const double t = draw.any(RealRange{std::log(ad.near_lo), std::log(ad.near_hi)});
    const bool up = draw.chance(0.5);
    if (values.empty()) continue;
    const double v = draw.pick(values), delta = std::fabs(v) * std::exp(t);
    const double first = up ? v + delta : v - delta, second = up ? v - delta : v + delta;
    c.attrs[a] = ad.valid(first) ? first : ad.valid(second) ? second : v;
  }
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
    else if (draw.chance(kAtMaxRate))  // a range's ends, as the dims' (edge_or_sized)
      c.attrs.push_back(a.hi);
    else if (draw.chance(kAtMinRate))
      c.attrs.push_back(a.lo);
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
    const DType dt = d.takes_case_dtype(in.dtypes) ? c.dtype : draw.pick(in.dtypes);
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
              // 10^u capped at a quarter of the dtype's largest finite value
              // (f16: 16376; f32 past u = 37), so the tensor spans the top of
              // the range (x² overflows f16 from |x| = 256 on) without
              // saturating: an input is never inf unless specials say so.
              x[k] = z * std::min(std::pow(10.0, u), max_finite(dt) / 4);
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
            const auto& ints = in.specials.sentinels;  // an integer input's
            const auto& fin = in.specials.finite;      // a floating input's listed numbers, after its names
            const uint64_t pick = rng::hash(seed, stream(i, 5), k);
            x[k] =
                !ints.empty() ? ints[pick % ints.size()]
                : pick % (sv.size() + fin.size()) < sv.size()
                    ? special_value(sv[pick % (sv.size() + fin.size())], dt, rng::hash(seed, stream(i, 6), k))
                    : fin[pick % (sv.size() + fin.size()) - sv.size()];
          }
          // Every finite value clamped to its dtype's finite range, so no
          // value becomes inf by rounding (inf only as a declared special):
          // f16/bf16 past 65504 or 3.4e38, f32 from parameters past 3.4e38
          // (the loader keeps f64's draws finite).
          if (is_float(dt) && std::isfinite(x[k])) x[k] = std::clamp(x[k], -max_finite(dt), max_finite(dt));
          x[k] = round_to(dt, x[k]);
        }
    }
    c.inputs.push_back(std::move(x));
  }
  draw_near_attrs(d, c, draw);
  return c;
}

}  // namespace kprop::op
