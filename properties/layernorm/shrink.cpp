// The layernorm family's shrinker.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "kprop/case_yaml.h"
#include "kprop/select.h"
#include "properties/layernorm/family.h"

namespace kprop::layernorm {

using case_yaml::significant_digits;  // of the text the case prints each value as

namespace {

// v rounded to k significant decimal digits, then to the dtype.
double round_digits(double v, int k, DType dtype) {
  const std::string s = fmt::format("{:.{}e}", v, k - 1);
  return dtype == DType::f32 ? static_cast<double>(std::strtof(s.c_str(), nullptr))
                             : round_to(dtype, std::strtod(s.c_str(), nullptr));
}

// ---- shrinking
enum class Operand { x, gamma, beta, dy };

template <typename C>  // Case or const Case
auto& tensor(C& c, Operand t) {
  switch (t) {
    case Operand::x:
      return c.x;
    case Operand::gamma:
      return c.gamma;
    case Operand::beta:
      return c.beta;
    case Operand::dy:
      return c.dy;
  }
  return c.x;
}

// Simpler values for one element, boldest first, at most `most` of them:
// the tensor's canonical value (γ = 1, β = 0, dy and x = 0 or 1), then fewer
// significant digits. Every candidate has strictly fewer digits, or is
// canonical (reached once), so shrinking terminates. Each digit count
// formats the value (an f64 value has 16): the shrinker's runs of values
// ask for the first only.
std::vector<double> simpler_values(double v, Operand t, DType dtype, size_t most = SIZE_MAX) {
  std::vector<double> out;
  auto add = [&](double w) {
    if (out.size() < most && w != v && std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  };
  switch (t) {
    case Operand::gamma:
      if (v != 1) add(1);
      break;
    case Operand::beta:
      add(0);
      break;
    case Operand::dy:
    case Operand::x:
      if (v != 0 && v != 1) add(0), add(1);
      break;
  }
  const int digits = out.size() < most ? significant_digits(v, dtype) : 0;
  for (int k = 1; k < digits && out.size() < most; ++k) {
    const double w = round_digits(v, k, dtype);
    if (std::isfinite(w) && significant_digits(w, dtype) < digits) add(w);
  }
  return out;
}

Case keep_rows(const Case& c, const std::vector<int>& keep) {
  Case s = c;
  s.rows = static_cast<int>(keep.size());
  s.x = select::rows(c.x, static_cast<size_t>(c.dim), keep);
  s.dy = select::rows(c.dy, static_cast<size_t>(c.dim), keep);
  return s;
}

Case keep_cols(const Case& c, const std::vector<int>& keep) {
  Case s = c;
  s.dim = static_cast<int>(keep.size());
  const size_t D = static_cast<size_t>(c.dim);
  s.x = select::cols(c.x, D, keep);
  s.dy = select::cols(c.dy, D, keep);
  s.gamma = select::cols(c.gamma, D, keep);
  s.beta = select::cols(c.beta, D, keep);
  return s;
}

using select::iota_except;

int digit_sum(const std::vector<double>& v, size_t lo, size_t hi, DType dtype) {
  int s = 0;
  for (size_t i = lo; i < hi; ++i) s += significant_digits(v[i], dtype);
  return s;
}

}  // namespace

// One shrink step, boldest first: fewer rows, smaller D, canonical γ, β and
// dy everywhere, ε a power of ten, constant rows, then each value with fewer
// significant digits. Lazy: a candidate is built only when reached.
rc::Seq<Case> Traits::shrinks(const Case& c0, const Values& domain) {
  auto c = std::make_shared<const Case>(c0);
  const int rows = c->rows, dim = c->dim;
  // Which rows / columns to drop, [lo, hi): each half, then each single one,
  // made on demand (a 131073-wide row has 131073 single-column candidates).
  // Single drops only where the domain admits n - 1 (a profile of one_of
  // sizes may not): else each would be built and filtered out.
  const auto drops = [&domain](int n, const char* key) {
    using Drop = std::pair<int, int>;
    if (n <= 1) return rc::Seq<Drop>();
    const int singles = outside_int_range(domain, key, n - 1).empty() ? n : 0;
    return rc::seq::concat(rc::seq::just(Drop{(n + 1) / 2, n}, Drop{0, n / 2}),
                           rc::seq::map(rc::seq::range(0, singles), [](int i) {
                             return Drop{i, i + 1};
                           }));
  };
  auto structure = rc::seq::concat(
      rc::seq::map(
          drops(rows, "rows"),
          [c](std::pair<int, int> d) { return keep_rows(*c, iota_except(c->rows, d.first, d.second)); }),
      rc::seq::map(drops(dim, "dim"), [c](std::pair<int, int> d) {
        return keep_cols(*c, iota_except(c->dim, d.first, d.second));
      }));

  std::vector<Case> global;
  auto all_equal = [](const std::vector<double>& v, double w) {
    return std::all_of(v.begin(), v.end(), [w](double e) { return e == w; });
  };
  if (!all_equal(c->gamma, 1)) {
    Case s = *c;
    std::fill(s.gamma.begin(), s.gamma.end(), 1.0);
    global.push_back(std::move(s));
  }
  if (!all_equal(c->beta, 0)) {
    Case s = *c;
    std::fill(s.beta.begin(), s.beta.end(), 0.0);
    global.push_back(std::move(s));
  }
  if (!all_equal(c->dy, 1) && !all_equal(c->dy, 0)) {
    Case s = *c;
    std::fill(s.dy.begin(), s.dy.end(), 1.0);
    global.push_back(std::move(s));
  }
  {
    Case s = *c;
    s.eps = std::pow(10.0, std::round(std::log10(c->eps)));
    round_to_dtype(s);
    const DType et = eps_dtype(c->dtype);
    if (s.eps != c->eps && significant_digits(s.eps, et) <= significant_digits(c->eps, et))
      global.push_back(std::move(s));
  }
  const size_t D = static_cast<size_t>(dim);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {  // a constant row (zero variance)
    Case s = *c;
    std::fill(s.x.begin() + static_cast<long>(r * D), s.x.begin() + static_cast<long>((r + 1) * D),
              c->x[r * D]);
    if (!(s.x == c->x) &&
        digit_sum(s.x, r * D, (r + 1) * D, c->dtype) <= digit_sum(c->x, r * D, (r + 1) * D, c->dtype))
      global.push_back(std::move(s));
  }

  // Runs of one operand's values each set to its simplest candidate, the
  // first m of those that have one (m = all, half, ... 2), then the last m
  // (half ... 2), boldest first: a failure that holds whatever most values
  // are (a 16-bit dim wraps at 65536 columns) reaches its end in tens of
  // accepted steps, where one value at a time took a step per value, past
  // the large profile's shrink budget. Each value moves to a simpler one,
  // so shrinking still ends.
  struct Bulk {
    Operand t;
    int64_t m;  // select::halving_runs's run
  };
  // Each value's simplest candidate (NaN: none), worked out once per step.
  auto simplest = std::make_shared<std::array<std::vector<double>, 4>>();
  std::vector<Bulk> bulks;
  for (Operand t : {Operand::gamma, Operand::beta, Operand::dy, Operand::x}) {
    const std::vector<double>& v = tensor(*c, t);
    std::vector<double>& to = (*simplest)[static_cast<size_t>(t)];
    to.resize(v.size());
    int64_t simplifiable = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::vector<double> first = simpler_values(v[i], t, c->dtype, 1);
      to[i] = first.empty() ? std::nan("") : first.front();
      simplifiable += !first.empty();
    }
    for (int64_t m : select::halving_runs(simplifiable)) bulks.push_back({t, m});
  }
  auto bulk = rc::seq::map(rc::seq::fromContainer(std::move(bulks)), [c, simplest](const Bulk& b) {
    Case s = *c;
    std::vector<double>& v = tensor(s, b.t);
    const std::vector<double>& to = (*simplest)[static_cast<size_t>(b.t)];
    const int64_t n = static_cast<int64_t>(v.size());
    int64_t left = std::abs(b.m);
    for (int64_t k = 0; k < n && left > 0; ++k) {
      const size_t i = static_cast<size_t>(b.m > 0 ? k : n - 1 - k);
      if (!std::isnan(to[i])) v[i] = to[i], --left;
    }
    return s;
  });

  struct Slot {
    Operand t;
    size_t i;
  };
  std::vector<Slot> slots;
  for (Operand t : {Operand::gamma, Operand::beta, Operand::dy, Operand::x}) {
    const size_t n = t == Operand::x || t == Operand::dy ? c->x.size() : D;
    for (size_t i = 0; i < n; ++i) slots.push_back({t, i});
  }
  auto values = rc::seq::mapcat(rc::seq::fromContainer(std::move(slots)), [c](const Slot& slot) {
    const double v = tensor(*c, slot.t)[slot.i];
    return rc::seq::map(rc::seq::fromContainer(simpler_values(v, slot.t, c->dtype)), [c, slot](double w) {
      Case s = *c;
      tensor(s, slot.t)[slot.i] = w;
      return s;
    });
  });
  auto all = rc::seq::concat(std::move(structure), rc::seq::fromContainer(std::move(global)), std::move(bulk),
                             std::move(values));
  return rc::seq::filter(std::move(all), [c](const Case& s) { return !(s == *c) && validate(s).empty(); });
}

}  // namespace kprop::layernorm
