// The softmax_topk family's shrinker.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "kprop/select.h"
#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {

namespace {

// Is x exactly a value of the case's dtype?
bool representable(const Case& c, double x) {
  return !std::isfinite(x) || round_to(c.dtype, x) == x;
}

// Does exp(x - m) round to 0 in the dtype (a half case: computed in f32,
// stored in the dtype)?
bool underflows(const Case& c, double x, double m) {
  if (!std::isfinite(m)) return false;
  if (c.dtype == DType::f64) return std::exp(x - m) == 0.0;
  const float e = std::exp(static_cast<float>(x - m));
  return round_to(c.dtype, e) == 0.0;
}

// Sum of |x| over a row's finite logits: row transforms must shrink it.
double row_weight(const Case& c, int r) {
  double w = 0;
  for (int j = 0; j < c.vocab; ++j) {
    const double x = c.logits[static_cast<size_t>(r) * c.vocab + j];
    if (std::isfinite(x)) w += std::fabs(x);
  }
  return w;
}

bool finite_nonzero(double x) {
  return std::isfinite(x) && x != 0;
}

Case with_columns(const Case& c, const std::vector<int>& cols) {
  Case s = c;
  s.vocab = static_cast<int>(cols.size());
  s.k = std::min(c.k, s.vocab);
  s.logits.clear();
  for (int r = 0; r < c.rows(); ++r)
    for (int j : cols) s.logits.push_back(c.logits[static_cast<size_t>(r) * c.vocab + j]);
  return s;
}

// Simpler stand-ins for one logit, boldest first.
std::vector<double> simpler_values(double x) {
  std::vector<double> out;
  if (x == kNegInf) return {0.0};
  if (x != 0) out.push_back(0);
  const double a = std::fabs(x), s = x < 0 ? -1 : 1;
  if (a > 1) {
    out.push_back(s);
    const int e = std::ilogb(a);
    out.push_back(s * std::ldexp(1.0, e / 2));  // about the square root of the magnitude
    if (std::trunc(x) != x) out.push_back(std::trunc(x));
    out.push_back(s * std::ldexp(1.0, e));  // the power of two below
    out.push_back(std::trunc(x / 2));
    // Towards 0 by large, middling and small power-of-two steps, then by 1:
    // a failure that needs a large magnitude (exp underflowing past
    // |x| = 745) finds it in tens of accepted steps, where steps of 1 alone
    // took one per unit (319 steps). Three, not one per bit: every
    // candidate of every logit is a copy of the case.
    for (int j : std::set<int, std::greater<>>{e - 1, (e - 1) / 2, 1})
      if (j >= 1) out.push_back(x - s * std::ldexp(1.0, j));
    out.push_back(x - s);  // every candidate is smaller in magnitude: shrinking terminates
  } else if (a > 0 && a < 1) {
    out.push_back(s);
  }
  return out;
}

}  // namespace

// One shrink step, boldest first: fewer rows, fewer columns, runs of logits
// to -inf (or -inf to 0), smaller K, block 1, whole-row simplifications
// (dense ranks, halving), then one value at a time towards 0, +-1 and small
// powers of two. Candidates that break the contract or repeat the case are
// skipped.
rc::Seq<Case> Traits::shrinks(const Case& c, const Values& domain) {
  std::vector<Case> out;
  const int rows = c.rows(), v = c.vocab;
  if (rows > 1) {
    for (int r = 0; r < rows; ++r) {
      Case s = c;
      s.logits.assign(c.logits.begin() + static_cast<long>(r) * v,
                      c.logits.begin() + static_cast<long>(r + 1) * v);
      out.push_back(std::move(s));
    }
    Case s = c;  // drop the last row
    s.logits.resize(static_cast<size_t>(rows - 1) * v);
    out.push_back(std::move(s));
  }
  // Fewer columns: the first or the last t, for each t the domain allows
  // below V (about half where it allows every V; else the next one_of
  // vocabulary down, which halving never lands on).
  const IntRange vocabs = domain.int_range("vocab");
  for (int64_t t : vocabs.shrink_targets(v)) {
    if (t == v - 1 && vocabs.allows(v - 1)) continue;  // the single drops below
    std::vector<int> first, last;
    for (int j = 0; j < int(t); ++j) first.push_back(j), last.push_back(v - int(t) + j);
    out.push_back(with_columns(c, first));
    out.push_back(with_columns(c, last));
  }
  // Every candidate past this point is made on demand: a 131072-wide row has
  // 131072 single-column drops and several simpler values per logit, each a copy.
  auto shared = std::make_shared<const Case>(c);
  // Only where the domain admits V - 1 (a profile of one_of vocabularies
  // does not): else each of them would be built and filtered out.
  const bool drops = v > 1 && outside_int_range(domain, "vocab", v - 1).empty();
  auto column_drops = rc::seq::map(rc::seq::range(0, drops ? v : 0), [shared](int drop) {
    std::vector<int> cols;
    for (int j = 0; j < shared->vocab; ++j)
      if (j != drop) cols.push_back(j);
    return with_columns(*shared, cols);
  });
  std::vector<Case> head = std::move(out);
  out.clear();
  // Whole-row edits, boldest first: the first m of a row's finite nonzero
  // logits set to -inf (m = all, half, a quarter, ... 2), then the last m
  // (half ... 2); then the same runs of its -inf logits set to 0, where 0
  // would neither underflow nor raise the row's max. A failure at some
  // positions of a 131072-wide row (an index past 65535) gets there in tens
  // of accepted steps, and K then falls by halves: one logit or one K at a
  // time took a step each, past the large profile's shrink budget, so that
  // the stored case depended on the machine's speed. They come before K's
  // edits, which would otherwise crawl down by one. Each turns finite
  // nonzero logits to -inf (never 0s, which would come back) or -inf to 0:
  // shrinking still ends.
  struct Bulk {
    int row;
    int64_t m;     // select::halving_runs's run of the logits of the kind
    bool to_zero;  // false: finite nonzero logits to -inf; true: -inf to 0
  };
  std::vector<Bulk> bulks;
  for (int r = 0; r < rows; ++r) {
    const auto begin = c.logits.begin() + static_cast<long>(r) * v, end = begin + v;
    for (int64_t m : select::halving_runs(std::count_if(begin, end, finite_nonzero)))
      bulks.push_back({r, m, false});
    const double top = *std::max_element(begin, end);
    if (top >= 0 && !underflows(c, 0, top))
      for (int64_t m : select::halving_runs(std::count(begin, end, kNegInf))) bulks.push_back({r, m, true});
  }
  auto bulk = rc::seq::map(rc::seq::fromContainer(std::move(bulks)), [shared](const Bulk& b) {
    Case s = *shared;
    const auto begin = s.logits.begin() + static_cast<long>(b.row) * s.vocab, end = begin + s.vocab;
    if (b.to_zero)
      select::edit_run(
          begin, end, b.m, [](double x) { return x == kNegInf; }, [](double& x) { x = 0; });
    else
      select::edit_run(begin, end, b.m, finite_nonzero, [](double& x) { x = kNegInf; });
    return s;
  });
  // Smaller K: 1, then K less half the way to 1, less a quarter, ... less
  // one (as RapidCheck shrinks integers): a failure that needs K past some
  // rank (65536 of a 131072-wide row) gets to the least such K in O(log K)
  // accepted steps, where only 1, K/2 and K - 1 crawled down one at a time.
  // Made when asked for: each is a copy of the case.
  std::vector<int> ks;
  if (c.k > 1) ks.push_back(1);
  for (int step = (c.k - 1) / 2; step >= 1; step /= 2)
    if (c.k - step > 1) ks.push_back(c.k - step);
  auto smaller_k = rc::seq::map(rc::seq::fromContainer(std::move(ks)), [shared](int k) {
    Case s = *shared;
    s.k = k;
    return s;
  });
  for (int b : {1, c.block / 2})
    if (b >= 1 && b < c.block) {
      Case s = c;
      s.block = b;
      out.push_back(std::move(s));
    }
  for (int r = 0; r < rows; ++r) {
    const auto begin = c.logits.begin() + static_cast<long>(r) * v;
    // Dense ranks (0 = lowest finite), -inf kept: the order and the ties survive.
    std::set<double> distinct;
    for (auto it = begin; it != begin + v; ++it)
      if (std::isfinite(*it)) distinct.insert(*it);
    std::map<double, double> rank;
    for (double x : distinct) rank.emplace(x, static_cast<double>(rank.size()));
    Case ranks = c, halved = c;
    for (int j = 0; j < v; ++j) {
      double& x = ranks.logits[static_cast<size_t>(r) * v + j];
      if (std::isfinite(x)) x = rank[x];
      double& h = halved.logits[static_cast<size_t>(r) * v + j];
      if (std::isfinite(h) && std::fabs(h) >= 2) h = std::trunc(h / 2);
    }
    // The row shifted so its max is 0 (when exact): readable, same softmax.
    if (!distinct.empty() && *distinct.rbegin() != 0) {
      const double top = *distinct.rbegin();
      Case moved = c;
      bool exact = true;
      for (int j = 0; j < v; ++j) {
        double& x = moved.logits[static_cast<size_t>(r) * v + j];
        if (!std::isfinite(x)) continue;
        const double y = x - top;
        exact = exact && y + top == x && representable(c, y);
        x = y;
      }
      if (exact && row_weight(moved, r) <= row_weight(c, r)) out.push_back(std::move(moved));
    }
    // Row transforms only where they shrink sum |x|, so that no two undo each other.
    if (row_weight(ranks, r) < row_weight(c, r)) out.push_back(std::move(ranks));
    out.push_back(std::move(halved));
    if (distinct.empty()) {  // an all -inf row: zeros keep every tie
      Case zeros = c;
      std::fill(zeros.logits.begin() + static_cast<long>(r) * v,
                zeros.logits.begin() + static_cast<long>(r + 1) * v, 0.0);
      out.push_back(std::move(zeros));
    }
  }
  std::vector<double> row_max;
  for (int r = 0; r < rows; ++r)
    row_max.push_back(*std::max_element(c.logits.begin() + static_cast<long>(r) * v,
                                        c.logits.begin() + static_cast<long>(r + 1) * v));
  auto values = rc::seq::mapcat(rc::seq::range<size_t>(0, c.logits.size()), [shared, row_max](size_t i) {
    const Case& c = *shared;
    const double m = row_max[i / static_cast<size_t>(c.vocab)];
    const double x = c.logits[i];
    // -inf is the canonical zero-probability logit: a logit whose
    // probability underflows in the dtype becomes -inf, and -inf becomes 0
    // only where 0 would not underflow (so the two never undo each other).
    std::vector<double> ys;
    if (std::isfinite(x) && underflows(c, x, m)) ys.push_back(kNegInf);
    // Values the dtype cannot hold (or that round back to x: the halving
    // decrements below x's last bit) are dropped before a case is copied.
    for (double y : simpler_values(x))
      if (y != x && representable(c, y) && !(x == kNegInf && std::isfinite(m) && underflows(c, y, m)))
        ys.push_back(y);
    return rc::seq::map(rc::seq::fromContainer(std::move(ys)), [shared, i](double y) {
      Case s = *shared;
      s.logits[i] = y;
      return s;
    });
  });
  auto all =
      rc::seq::concat(rc::seq::fromContainer(std::move(head)), std::move(column_drops), std::move(bulk),
                      std::move(smaller_k), rc::seq::fromContainer(std::move(out)), std::move(values));
  return rc::seq::filter(std::move(all), [c](const Case& s) {
    if (s == c || !validate(s).empty()) return false;
    for (double x : s.logits)
      if (!representable(s, x)) return false;
    return true;
  });
}

}  // namespace kprop::softmax_topk
