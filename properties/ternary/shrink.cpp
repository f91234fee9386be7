// The ternary family's shrinker.
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "kprop/select.h"
#include "properties/ternary/family.h"

namespace kprop::ternary {

namespace {

// Shape edits: keep a subset of tokens, output rows or input columns.
Case keep_tokens(const Case& c, const std::vector<int>& keep) {
  Case s = c;
  s.tokens = static_cast<int>(keep.size());
  s.x = select::rows(c.x, static_cast<size_t>(c.in_features), keep);
  s.dy = select::rows(c.dy, static_cast<size_t>(c.out_features), keep);
  return s;
}

Case keep_outputs(const Case& c, const std::vector<int>& keep) {
  Case s = c;
  s.out_features = static_cast<int>(keep.size());
  s.w = select::rows(c.w, static_cast<size_t>(c.in_features), keep);
  s.dy = select::cols(c.dy, static_cast<size_t>(c.out_features), keep);
  return s;
}

Case keep_inputs(const Case& c, const std::vector<int>& keep) {
  Case s = c;
  s.in_features = static_cast<int>(keep.size());
  s.x = select::cols(c.x, static_cast<size_t>(c.in_features), keep);
  s.w = select::cols(c.w, static_cast<size_t>(c.in_features), keep);
  return s;
}

// The weight edit `s` of `from` with mean|W| kept: the largest remaining |w|
// absorbs the change, so W/s stays put for the other weights and a rounding
// tie on W/s = 1/2 survives dropping rows or columns of W.
std::optional<Case> keep_weight_mean(const Case& from, Case s) {
  if (s.w.empty()) return std::nullopt;
  double before = 0, after = 0;
  for (double v : from.w) before += std::fabs(v);
  for (double v : s.w) after += std::fabs(v);
  const size_t j =
      static_cast<size_t>(std::max_element(s.w.begin(), s.w.end(),
                                           [](double a, double b) { return std::fabs(a) < std::fabs(b); }) -
                          s.w.begin());
  const double need = before / static_cast<double>(from.w.size()) * static_cast<double>(s.w.size()) -
                      (after - std::fabs(s.w[j]));
  if (!(need >= 0) || !std::isfinite(need) || need == std::fabs(s.w[j])) return std::nullopt;
  s.w[j] = s.w[j] < 0 ? -need : need;
  return s;
}

using select::iota_except;

// Candidates for one value, simplest first: 0, 1 with its sign, then the
// value rounded to 1, 2 and 3 significant digits.
std::vector<double> simpler_values(double v) {
  std::vector<double> out;
  if (v == 0) return out;
  out.push_back(0);
  if (std::fabs(v) != 1) out.push_back(v < 0 ? -1 : 1);
  for (int digits = 1; digits <= 3; ++digits) {
    const double p = std::pow(10.0, digits - 1 - static_cast<int>(std::floor(std::log10(std::fabs(v)))));
    const double r = std::round(v * p) / p;
    if (r != v && r != 0 && std::fabs(r) != 1 && std::find(out.begin(), out.end(), r) == out.end())
      out.push_back(r);
  }
  return out;
}

}  // namespace

// One shrink step, boldest first: cut to smaller sizes the domain allows,
// drop single tokens, output rows and input columns; set nonzero dy to 1;
// zero runs of values, or set them all to +-1; then simplify single values
// (x, w, dy) to 0, +-1 or fewer significant digits. Every edit strictly
// simplifies (fewer values, or a value lower in 0 < +-1 < fewer digits), so
// shrinking ends. Built lazily: value candidates are only made when no shape
// edit fails.
rc::Seq<Case> Traits::shrinks(const Case& c, const Values& domain) {
  // Each shape edit drops [lo, hi) along one axis; its case is made when
  // the shrinker asks for it (every edit made at once held O(K²) indices and
  // a case per column: gigabytes at K = 16385, bad_alloc past it).
  struct Drop {
    int axis, lo, hi;
  };
  std::vector<Drop> drops;
  const int dims[] = {c.tokens, c.out_features, c.in_features};
  const char* keys[] = {"tokens", "out_features", "in_features"};
  for (int axis = 0; axis < 3; ++axis) {
    const int n = dims[axis];
    if (n <= 1) continue;
    // To each size the domain allows below n (about half, where it allows
    // every size; else the next listed size down: a profile's one_of K
    // admits no half and no single drop), keeping the head, then the tail.
    const IntRange allowed = domain.int_range(keys[axis]);
    for (int64_t t : allowed.shrink_targets(n))
      if (t < n - 1 || !allowed.allows(n - 1)) {  // n - 1: the single drops below
        drops.push_back({axis, int(t), n});
        drops.push_back({axis, 0, n - int(t)});
      }
    if (allowed.allows(n - 1))
      for (int i = 0; i < n; ++i) drops.push_back({axis, i, i + 1});
  }
  auto apply = [c, dims_n = std::array<int, 3>{dims[0], dims[1], dims[2]}](const Drop& d) {
    const std::vector<int> keep = iota_except(dims_n[static_cast<size_t>(d.axis)], d.lo, d.hi);
    return d.axis == 0 ? keep_tokens(c, keep) : d.axis == 1 ? keep_outputs(c, keep) : keep_inputs(c, keep);
  };
  // Axes 1 and 2 again, mean|W| kept.
  std::vector<Drop> weight_drops;
  for (const Drop& d : drops)
    if (d.axis != 0) weight_drops.push_back(d);
  auto shape_seq = rc::seq::map(rc::seq::fromContainer(drops), apply);
  auto mean_kept = rc::seq::mapMaybe(rc::seq::fromContainer(std::move(weight_drops)),
                                     [c, apply](const Drop& d) -> rc::Maybe<Case> {
                                       std::optional<Case> s = keep_weight_mean(c, apply(d));
                                       if (!s) return rc::Nothing;
                                       return rc::Maybe<Case>(std::move(*s));
                                     });
  // Nonzero dy all set to 1 (zeros stay: 0 is simpler than 1, and undoing a
  // zeroing would let the shrinker cycle).
  std::vector<Case> ones;
  if (std::any_of(c.dy.begin(), c.dy.end(), [](double g) { return g != 0 && g != 1; })) {
    Case s = c;
    for (double& g : s.dy) g = g == 0 ? 0.0 : 1.0;
    ones.push_back(std::move(s));
  }
  // Whole-array edits of x, w and dy, boldest first: zero the first m of
  // its nonzero values (m = all, half, a quarter, ... 2), the last m (half
  // ... 2), then set every nonzero value to +-1. A failure that needs some
  // hundreds of K = 4097 products (a 16-bit accumulator wraps past 258 of
  // 127) gets there in tens of accepted steps, each a prefix or suffix
  // halved: zeroing one value at a time took a step per value, about 700
  // per 2 s where thousands were needed, so the stored case depended on
  // how far the machine got in the profile's budget.
  // Then the strided keeps (select::strided_keeps): a kernel's 16-bit lane
  // that wraps (int16_chunk_8192, K = 8191) needs most of its 512 products,
  // so every run above cut too many of them, and zeroing the other lanes'
  // 7,680 values one at a time ran out of the profile's shrink budget at
  // each seed: its stored case depended on the machine's speed.
  struct Bulk {
    int array;  // 0: x, 1: w, 2: dy
    int64_t m;  // select::halving_runs's run of nonzero values to 0; 0: every nonzero value to +-1
    select::Stride keep{0, 0};  // stride > 0: the nonzero values outside this class to 0 (m unused)
  };
  auto nonzero = [](double x) { return x != 0; };
  std::vector<Bulk> bulks;
  for (int a = 0; a < 3; ++a) {
    const std::vector<double>& v = a == 0 ? c.x : a == 1 ? c.w : c.dy;
    for (int64_t m : select::halving_runs(std::count_if(v.begin(), v.end(), nonzero)))
      bulks.push_back({a, m});
    if (std::any_of(v.begin(), v.end(), [](double x) { return x != 0 && std::fabs(x) != 1; }))
      bulks.push_back({a, 0});
  }
  for (int a = 0; a < 3; ++a) {
    const std::vector<double>& v = a == 0 ? c.x : a == 1 ? c.w : c.dy;
    for (const select::Stride k : select::strided_keeps(static_cast<int64_t>(v.size()))) {
      // Only a class that keeps some nonzero value and drops another: the
      // others are the whole array zeroed (a run above) or no edit.
      bool inside = false, outside = false;
      for (size_t i = 0; i < v.size() && !(inside && outside); ++i)
        if (v[i] != 0) (static_cast<int64_t>(i) % k.stride == k.residue ? inside : outside) = true;
      if (inside && outside) bulks.push_back({a, 0, k});
    }
  }
  auto bulk_seq = rc::seq::map(rc::seq::fromContainer(std::move(bulks)), [c, nonzero](const Bulk& b) {
    Case s = c;
    std::vector<double>& v = b.array == 0 ? s.x : b.array == 1 ? s.w : s.dy;
    auto zero = [](double& x) { x = 0; };
    if (b.keep.stride > 0) {
      select::edit_outside(v.begin(), v.end(), b.keep, nonzero, zero);
      return s;
    }
    if (b.m == 0)
      for (double& x : v) x = x == 0 ? 0.0 : x < 0 ? -1.0 : 1.0;
    select::edit_run(v.begin(), v.end(), b.m, nonzero, zero);
    return s;
  });
  // Every (array, index) pair, then each simpler value for it.
  const size_t total = c.x.size() + c.w.size() + c.dy.size();
  // The case is shared, not copied, by every index's candidates: a copy
  // per index made this pass O(K^2) (16,383 copies of 128 KB at K = 8191,
  // half of the int16_chunk_8192 shrink).
  const auto base = std::make_shared<const Case>(c);
  auto values_seq = rc::seq::mapcat(rc::seq::range<size_t>(0, total), [base](size_t i) {
    auto field = [](auto& s, size_t i) -> auto& {
      if (i < s.x.size()) return s.x[i];
      i -= s.x.size();
      if (i < s.w.size()) return s.w[i];
      return s.dy[i - s.w.size()];
    };
    return rc::seq::map(rc::seq::fromContainer(simpler_values(field(*base, i))), [base, i, field](double r) {
      Case s = *base;
      field(s, i) = r;
      return s;
    });
  });
  return rc::seq::filter(
      rc::seq::concat(std::move(shape_seq), std::move(mean_kept), rc::seq::fromContainer(std::move(ones)),
                      std::move(bulk_seq), std::move(values_seq)),
      [c](const Case& s) { return !(s == c); });
}

}  // namespace kprop::ternary
