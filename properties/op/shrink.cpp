// The op family: the shrinker, in_domain, case sizes and stats.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <optional>

#include "kprop/case_yaml.h"
#include "properties/op/family_parts.h"

namespace kprop::op {

// ---------------------------------------------------------------- shrinking
namespace {

// The significant digits of number_text(v) (0 for 0 and non-finite values;
// an integer dtype's values are whole numbers, counted as f64's are).
int significant_digits(double v, DType dtype) {
  return case_yaml::significant_digits(v, float_type(dtype).value_or(FloatType::f64));
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
// v, then fewer significant digits, then the same digits nearer 1 (v =
// m·10^e with e moved to 0, halfway and one step toward 0: an overflow that
// needs x > 88.7 shrank to 5e8, the first value of one digit it found).
// Each candidate is 0, 1 (never for 1 itself), or lowers (digits, |e|,
// negative) in that order, so shrinking terminates.
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
  // "d.ddde±X": the digits and the decimal exponent.
  const std::string text = fmt::format("{:.{}e}", v, std::max(digits, 1) - 1);
  const size_t at = text.find('e');
  const int e = std::stoi(text.substr(at + 1));
  for (const int t : {0, e / 2, e - (e > 0) + (e < 0)}) {
    if (t == e) continue;
    const double w =
        round_to(dtype, std::strtod((text.substr(0, at) + "e" + std::to_string(t)).c_str(), nullptr));
    if (std::isfinite(w) && w != 0 && significant_digits(w, dtype) <= digits) add(w);
  }
  return out;
}

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
        case RelOp::eq: {  // b to its largest valid value whose partner scale * b + offset is valid for a, <=
                           // a
          ok = lower(b, dims[b], [&](int64_t v) {
            const int64_t w = r.scale * v + r.offset;
            return w <= dims[a] && d.dims[a].valid(w);
          });
          if (ok) dims[a] = r.scale * dims[b] + r.offset;
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

// The simplest ordinary value of an index or integer kind: 0, or the
// integer range's end nearest it.
double ordinary_int(const ValueSpec& v) {
  return v.kind == ValueKind::integer ? std::clamp(0.0, v.a, v.b) : 0.0;
}

}  // namespace

// One step, boldest first: each dim toward its smallest valid value (the
// leading or trailing indices kept; then, for short dims, each single index
// dropped; dims coupled by a hard relation lowered with it, cut the same
// way when they had its extent), attrs toward their first choice / round
// values (an integer attr also halfway toward lo and one step toward it),
// each floating input all 0 or all 1 or its special values 0, each index
// tensor all 0 / identity or its special values (sentinels) ordinary
// (ordinary_int), each mask all true; then each element toward 0, 1 and
// fewer significant digits (a sentinel to ordinary_int, ids toward 0 and
// halves, one transposition toward the identity per permutation line, one
// mask element toward true). Lazy.
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
    } else if (ad.integer) {
      // An integer attr: ranked lo < 0 < 1 < anything else, then by the
      // distance to lo; only a lower rank, or the same rank nearer lo, is
      // offered, so no two values shrink into each other and the greedy
      // shrinker ends. Simplest first: lo, 0, 1, then the value halfway to lo
      // (lo + (cur - lo) / 2, toward lo), fewer digits where that is nearer,
      // then one step toward lo: a bug that needs k >= 2 ends at k = 2, not
      // at the first round value that still fails (10, 7).
      auto rank = [&](double v) { return v == ad.lo ? 0 : v == 0 ? 1 : v == 1 ? 2 : 3; };
      const double cur = c->attrs[a];
      const auto simpler = [&](double v) {
        return rank(v) < rank(cur) || (rank(v) == rank(cur) && std::fabs(v - ad.lo) < std::fabs(cur - ad.lo));
      };
      std::vector<double> nearer;
      for (double o : {ad.lo, 0.0, 1.0})
        if (simpler(o)) options.push_back(o);
      nearer.push_back(ad.lo + std::trunc((cur - ad.lo) / 2));
      for (int k = 1; k < significant_digits(cur, DType::f64); ++k)
        nearer.push_back(truncate_digits(cur, k, DType::f64));
      nearer.push_back(cur > ad.lo ? cur - 1 : cur + 1);
      std::stable_sort(nearer.begin(), nearer.end(),
                       [&](double x, double y) { return std::fabs(x - ad.lo) < std::fabs(y - ad.lo); });
      for (double o : nearer)
        if (simpler(o) && std::find(options.begin(), options.end(), o) == options.end()) options.push_back(o);
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
      case ValueKind::integer: {
        if (v->kind == ValueKind::ids || (v->a <= 0 && v->b >= 0))
          offer(i, std::vector<double>(x.size(), 0.0));
        // Every special value (a sentinel) an ordinary value at once, as
        // a floating input's specials all go to 0.
        std::vector<double> clean = x;
        for (double& e : clean)
          if (d.inputs[i].specials.sentinel(e)) e = ordinary_int(*v);
        offer(i, std::move(clean));
        break;
      }
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
  // Then each input's nonzero span [lo, hi) halved: its first half 0, its
  // second half 0, all but its two ends 0. A failure that needs one element
  // of a long row (x[1024] of 1025) keeps it in about log2(n) steps, where
  // each element toward 0 in turn took n (2,127 steps, 18 s, through a NumPy
  // worker); one that needs many costs three more candidates a step.
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const ValueSpec* v = c->kinds.size() > i && c->kinds[i] >= 0
                             ? &d.inputs[i].values[static_cast<size_t>(c->kinds[i])]
                             : nullptr;
    const bool zero_ok =
        !v || ((v->kind == ValueKind::ids || (v->kind == ValueKind::integer && v->a <= 0 && v->b >= 0)) &&
               !d.inputs[i].specials.sentinel(0));
    if (!zero_ok) continue;
    const auto& x = c->inputs[i];
    size_t lo = 0, hi = x.size();
    while (lo < hi && x[lo] == 0) ++lo;
    while (hi > lo && x[hi - 1] == 0) --hi;
    if (hi - lo < 4) continue;  // the elements one by one take as few steps
    const size_t mid = lo + (hi - lo) / 2;
    auto zeroed = [&](size_t from, size_t to) {
      std::vector<double> y = x;
      std::fill(y.begin() + static_cast<std::ptrdiff_t>(from), y.begin() + static_cast<std::ptrdiff_t>(to),
                0.0);
      return y;
    };
    offer(i, zeroed(lo, mid));
    offer(i, zeroed(mid, hi));
    offer(i, zeroed(lo + 1, hi - 1));
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
      const double e = x[slot.index];
      // A sentinel (specials) becomes the simplest ordinary value; an
      // ordinary value moves toward 0, never to a sentinel.
      const std::vector<double> simpler =
          d.inputs[slot.input].specials.sentinel(e) ? std::vector<double>{ordinary_int(*v)} : simpler_ints(e);
      for (double w : simpler) {
        if (d.inputs[slot.input].specials.sentinel(w)) continue;
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
      return fmt::format("dim {} = {} is not a value this run's domain draws ([{}, {}], multiple of {}{})",
                         d.dims[k].name, c.dims[k], d.dims[k].lo, d.dims[k].hi, d.dims[k].multiple_of,
                         d.dims[k].one_of.empty() ? "" : ", one_of");
  for (size_t a = 0; a < d.attrs.size(); ++a)
    if (!d.attrs[a].valid(c.attrs[a]))
      return fmt::format("attr {} = {} is not a value this run's domain draws ({})", d.attrs[a].name,
                         d.attrs[a].labels.empty() ? fmt::format("{}", c.attrs[a])
                                                   : d.attrs[a].labels.at(static_cast<size_t>(c.attrs[a])),
                         d.attrs[a].values_text());
  if (auto why = d.relations_violated(c.dims); !why.empty()) return why;
  if (std::find(d.case_dtypes.begin(), d.case_dtypes.end(), c.dtype) == d.case_dtypes.end()) {
    std::vector<std::string> names;
    for (const DType t : d.case_dtypes) names.emplace_back(dtype_name(t));
    return fmt::format("dtype {} is not among this run's dtypes ({})", dtype_name(c.dtype),
                       fmt::join(names, ", "));
  }
  if (c.kinds.size() != d.inputs.size()) return "the case does not record each input's kind";
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const auto& in = d.inputs[i];
    if (d.takes_case_dtype(in.dtypes) && c.dtypes[i] != c.dtype)
      return fmt::format("input {} has dtype {}, not the case's dtype {} (it takes the case's)", in.name,
                         dtype_name(c.dtypes[i]), dtype_name(c.dtype));
    if (!d.takes_case_dtype(in.dtypes) &&
        std::find(in.dtypes.begin(), in.dtypes.end(), c.dtypes[i]) == in.dtypes.end())
      return fmt::format("input {} has dtype {}, not declared", in.name, dtype_name(c.dtypes[i]));
    if (static_cast<int64_t>(c.inputs[i].size()) != count(d.extents(in.shape, c.dims)))
      return fmt::format("input {} has {} values, not {}", in.name, c.inputs[i].size(),
                         expr::shape_text(in.shape));
    if (in.floating() ? c.kinds[i] != -1 : c.kinds[i] < 0 || c.kinds[i] >= static_cast<int>(in.values.size()))
      return fmt::format("input {} has no valid kind ({})", in.name, c.kinds[i]);
  }
  return check_structured(c);
}

namespace {

// Elements of a tensor of extents `ext`, in double: the largest shape a
// declaration allows may hold more than int64 counts.
double elements(const std::vector<int64_t>& ext) {
  double n = 1;
  for (int64_t e : ext) n *= static_cast<double>(e);
  return n;
}

// Inputs once; outputs four times (target, reference, naive, a derived
// case's); and a reference expression's intermediates twice (the naive
// evaluation's, and the floor's rounding bound, which holds a bound beside
// each value), at the evaluation's peak (Expression::peak_elements: shared
// subexpressions are kept to the evaluation's end), which an outer product
// or a broadcast takes far past the inputs and outputs.
struct Footprint {
  double held = 0;                     // elements: the inputs, and the outputs four times
  double evaluation = 0;               // elements: the largest reference's intermediates at its peak
  const OutputDecl* widest = nullptr;  // that reference's output
  double bytes() const { return 8 * (held + 2 * evaluation); }
};

Footprint footprint(const Decl& d, const std::vector<int64_t>& dims, double input_elements) {
  Footprint f{input_elements};
  const auto extent = [&](const std::string& name) {
    const int k = d.dim_index(name);
    return k < 0 ? 1.0 : static_cast<double>(dims[static_cast<size_t>(k)]);
  };
  for (const auto& o : d.outputs) {
    f.held += 4.0 * elements(d.extents(o.shape, dims));
    if (!o.reference) continue;
    if (const double s = o.reference->peak_elements(extent); s > f.evaluation)
      f.evaluation = s, f.widest = &o;
  }
  return f;
}

}  // namespace

double Traits::case_bytes(const Case& c) {
  double n = 0;
  for (const auto& x : c.inputs) n += static_cast<double>(x.size());
  return footprint(*c.decl, c.dims, n).bytes();
}

CaseSize Traits::max_case_bytes(const Values&) {
  return {};
}

// Computed, not built: a case at the dims' upper ends may not fit in memory.
CaseSize OpFamily::max_case_bytes(const Values&) const {
  std::vector<int64_t> dims;
  for (const auto& dim : decl_->dims) dims.push_back(dim.largest());
  double n = 0;
  for (const auto& in : decl_->inputs) n += elements(decl_->extents(in.shape, dims));
  std::vector<std::string> parts;
  for (size_t k = 0; k < dims.size(); ++k)
    parts.push_back(fmt::format("{} {}", decl_->dims[k].name, dims[k]));
  std::string said = join(parts, " x ");
  // Name the reference whose intermediate makes the most of it, if one does.
  const Footprint f = footprint(*decl_, dims, n);
  if (f.widest && 2 * f.evaluation > f.held)
    said += fmt::format("; reference {} holds {:.3g} elements while evaluated", f.widest->name, f.evaluation);
  CaseSize size{f.bytes(), said, "op.dims", {}};
  for (size_t k = 0; k < dims.size(); ++k) size.extents[decl_->dims[k].name] = double(dims[k]);
  return size;
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

}  // namespace kprop::op
