// Softmax + top-k invariants. Ranking checks use the exact logits of the case
// (softmax is strictly increasing, so the exact order is the logit order);
// probabilities follow the tolerance policy of docs/DESIGN.md: error against the
// fp64 reference at most k x the naive same-precision error + a floor of a
// few dtype epsilons. A mismatch between two distinct logits whose gap is
// within a few dtype ulps of their distance to the row max (where rounded
// probabilities could tie) is a near-tie: discarded, never a failure.
//
// Half-precision cases (f16, bf16; softmax_topk.h's precision contract: f32
// arithmetic, probabilities stored in the dtype). The baseline is the naive
// softmax in f32 with its probabilities stored in the dtype; "the dtype
// epsilon" of the floors and near-ties is the arithmetic's (f32's 2^-23).
// Storing a probability p in the dtype adds at most u_s p + s (u_s the
// dtype's unit roundoff, 2^-11 or 2^-8; s half its smallest subnormal, the
// absolute error of a rounding among the subnormals), so the probability
// floor adds u_s max p + s (max over the compared probabilities), and a sum
// of V stored probabilities (no_nan, full_sort_at_k_equals_v) may move by
// u_s × the sum + V s. For f32 and f64 cases these terms are 0.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>

#include "kprop/tolerance.h"
#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {
namespace {

using T = Trial<Traits>;

double eps(DType d) {
  return arithmetic_epsilon(d);
}
// The storage terms of a half case (0 for f32 and f64).
double store_u(DType d) {
  return is_half(d) ? unit_roundoff(d) : 0;
}
// The probability floor: floor_eps dtype epsilons, plus a half case's store
// of the largest compared probability.
double prob_floor(const Case& c, const std::vector<double>& want, const Values& p) {
  double top = 0;
  for (double w : want) top = std::max(top, std::fabs(w));
  return p.real("tol.floor_eps") * eps(c.dtype) + store_u(c.dtype) * top + subnormal_half_step(c.dtype);
}
// The slack of a sum of `n` stored probabilities about `total`.
double sum_slack(const Case& c, const Values& p, int n, double total) {
  const double f32_part = p.real("tol.floor_eps") * eps(c.dtype) * n;
  return f32_part + store_u(c.dtype) * (total + f32_part) + n * subnormal_half_step(c.dtype);
}
double logit(const Case& c, int row, int i) {
  return c.logits[static_cast<size_t>(row) * c.vocab + i];
}
double row_max(const Case& c, int row) {
  double m = kNegInf;
  for (int i = 0; i < c.vocab; ++i) m = std::max(m, logit(c, row, i));
  return m;
}

bool near_tie(const Case& c, int row, int a, int b, double tie_ulps) {
  const double xa = logit(c, row, a), xb = logit(c, row, b), m = row_max(c, row);
  if (xa == xb || !std::isfinite(xa) || !std::isfinite(xb)) return false;
  const double scale = std::max({1.0, std::fabs(xa - m), std::fabs(xb - m)});
  return std::fabs(xa - xb) <= tie_ulps * eps(c.dtype) * scale;
}

// The parameters an invariant reads, and only those: one it does not read
// would load and do nothing (no_nan took tie_ulps and tol.k). The
// probability tolerance (k: a multiple of the naive error; floor) and the
// near-tie width of index comparisons.
enum Reads : unsigned { kTolK = 1, kTolFloor = 2, kTies = 4 };
Schema prob_params(unsigned reads) {
  Schema out;
  std::vector<Field> tol;
  if (reads & kTolK) tol.push_back(field::k(2, "allowed multiple of the naive same-dtype error"));
  if (reads & kTolFloor)
    tol.push_back(field::real("floor_eps", 8, 0, 1e9, "absolute floor in units of the dtype epsilon"));
  if (!tol.empty()) out.push_back(field::map("tol", tol, "probability tolerance (docs/DESIGN.md policy)"));
  if (reads & kTies)
    out.push_back(field::real("tie_ulps", 16, 0, 1e9,
                              "logit gaps within this many dtype ulps of |x - max| are near-ties"));
  return out;
}

std::string slot(int row, int j) {
  return fmt::format("row {} slot {}", row, j);
}

// Output shape and index range; "" when fine.
std::string shape_problem(const Case& c, const Result& r) {
  const size_t n = static_cast<size_t>(c.rows()) * c.k;
  if (r.probs.size() != n || r.indices.size() != n)
    return fmt::format("output has {} probabilities and {} indices, expected rows x K = {}", r.probs.size(),
                       r.indices.size(), n);
  for (size_t i = 0; i < n; ++i)
    if (r.indices[i] < 0 || r.indices[i] >= c.vocab)
      return fmt::format("{}: index {} out of range [0, {})",
                         slot(static_cast<int>(i) / c.k, static_cast<int>(i) % c.k), r.indices[i], c.vocab);
  return "";
}

// Each probability against its own size. The max-norm bound (k x naive
// error + floor) leaves a probability below its floor, about 8 eps,
// unchecked: a kernel that drops exp(x - max) < e^-15 as negligible returned
// 0 for a finite f32 logit 16 below the max (p = 1.1e-7) and passed it. A
// correct kernel's relative error on p_i = exp(d_i) / Z, d_i = x_i - max,
// with u the unit roundoff of its arithmetic (f32 for f16/bf16/f32 cases,
// f64 for f64), is at most
//   3 (|d_i| + ln V) u   the rounding of d_i (or of d_i - log Z in a log-space
//                        kernel, |.| <= |d_i| + ln V) amplified by exp, plus
//                        exp's own error (a fast expf: 2 + 1.17 |x| ulps);
//   4 (V + ln V + 1) u   Z: V positive terms summed in any order, each term
//                        rescaled by an online kernel as its running max
//                        grows (the rescales' errors total at most
//                        (|d_j| + 2 x rescales) u, and the p-weighted mean of
//                        |d_j| is at most 2 ln V), and the division;
// plus a half case's store u_s, all times the policy's k. Below the normal
// range the error is absolute: half the dtype's subnormal step (the store)
// plus the arithmetic's smallest normal (a flush-to-zero kernel). -inf logits
// (p = 0) are left to the max-norm bound.
Verdict each_probability_close(const Case& c, const std::vector<int>& indices, const std::vector<double>& got,
                               const std::vector<double>& want, const Values& p, const char* what) {
  const double u = eps(c.dtype) / 2, ln_v = std::log(static_cast<double>(c.vocab));
  const double tiny =
      subnormal_half_step(c.dtype) + (c.dtype == DType::f64 ? std::numeric_limits<double>::min()
                                                            : double(std::numeric_limits<float>::min()));
  double m = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    const int row = static_cast<int>(s) / c.k, j = static_cast<int>(s) % c.k;
    if (j == 0) m = row_max(c, row);
    const double x = logit(c, row, indices[s]);
    if (!std::isfinite(x)) continue;
    const double d = std::fabs(x - m);
    const double rel =
        p.real("tol.k") * (3 * (d + ln_v) * u + 4 * (c.vocab + ln_v + 1) * u + store_u(c.dtype));
    const double allowed = rel * std::fabs(want[s]) + tiny, error = std::fabs(got[s] - want[s]);
    if (error <= allowed) continue;
    return Verdict::fail(
        fmt::format(
            "{}: {}: probability {:.9g} at index {}, softmax gives {:.9g}: error {:.3g} exceeds {:.3g} "
            "relative ({:.3g} allowed for a logit {:g} below the max)",
            what, slot(row, j), got[s], indices[s], want[s], error / std::fabs(want[s]), rel, allowed, d),
        {{"row", double(row)},
         {"slot", double(j)},
         {"probability", got[s]},
         {"expected", want[s]},
         {"error", error},
         {"allowed", allowed}});
  }
  return Verdict::pass();
}

// Probabilities `got` at `indices` against the fp64 full softmax.
// `reference_probs`: the reference's own probabilities at `indices` (its
// top-k), compared instead of the fp64 softmax (the same values for the
// built-in reference; a user's reference is the oracle it names).
Verdict probabilities_close(const Case& c, const std::vector<int>& indices, const std::vector<double>& got,
                            const Values& p, const char* what,
                            const std::vector<double>* reference_probs = nullptr) {
  std::vector<double> want, naive;
  for (int row = 0; row < c.rows(); ++row) {
    const auto full = softmax_row(c, row), base = naive_softmax(c, row);
    for (int j = 0; j < c.k; ++j) {
      const size_t s = static_cast<size_t>(row) * c.k + j;
      const int i = indices[s];
      want.push_back(reference_probs ? (*reference_probs)[s] : full[static_cast<size_t>(i)]);
      naive.push_back(base[static_cast<size_t>(i)]);
    }
  }
  const ToleranceReport rep =
      compare_with_baseline(want, got, naive, p.real("tol.k"), prob_floor(c, want, p));
  if (rep.ok) {
    if (Verdict v = each_probability_close(c, indices, got, want, p, what); v.outcome != Outcome::pass)
      return v;
    return Verdict::pass({{kErrorRatio, error_ratio(rep)}});
  }
  const int row = static_cast<int>(rep.worst_index) / c.k, j = static_cast<int>(rep.worst_index) % c.k;
  return Verdict::fail(
      fmt::format("{}: {}: probability {:.9g} at index {}, softmax gives {:.9g} ({})", what, slot(row, j),
                  got[rep.worst_index], indices[rep.worst_index], want[rep.worst_index], rep.message),
      {{"row", double(row)},
       {"slot", double(j)},
       {"probability", got[rep.worst_index]},
       {"expected", want[rep.worst_index]},
       {"error", rep.target_error},
       {"allowed", rep.allowed}});
}

// Indices of `got` equal `want` (same shape), up to near-ties: a slot
// whose two indices are near-tied is let go, and the scan goes on, so a
// near-tie in one slot hides no wrong index in a later one; the case is
// discarded only when every mismatch is a near-tie.
Verdict same_indices(const Case& c, const std::vector<int>& want, const std::vector<int>& got,
                     double tie_ulps, const char* what) {
  bool tied = false;
  for (size_t s = 0; s < want.size(); ++s) {
    if (want[s] == got[s]) continue;
    const int row = static_cast<int>(s) / c.k, j = static_cast<int>(s) % c.k;
    if (near_tie(c, row, want[s], got[s], tie_ulps)) {
      tied = true;
      continue;
    }
    return Verdict::fail(
        fmt::format("{}: {}: index {} (logit {}), expected index {} (logit {})", what, slot(row, j), got[s],
                    logit(c, row, got[s]), want[s], logit(c, row, want[s])),
        {{"row", double(row)},
         {"slot", double(j)},
         {"index", double(got[s])},
         {"expected_index", double(want[s])}});
  }
  return tied ? Verdict::discard("near-tie in the top-k") : Verdict::pass();
}

Verdict matches_reference(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  const Result& ref = t.reference();
  if (const std::string why = shape_problem(c, r); !why.empty()) return Verdict::fail(why);
  for (size_t s = 0; s < r.probs.size(); ++s)
    if (!std::isfinite(r.probs[s]))
      return Verdict::fail(fmt::format(
          "{}: probability {}", slot(static_cast<int>(s) / c.k, static_cast<int>(s) % c.k), r.probs[s]));
  if (Verdict v = same_indices(c, ref.indices, r.indices, p.real("tie_ulps"), "top-k");
      v.outcome != Outcome::pass)
    return v;
  if (ref.probs.size() != r.probs.size())
    throw ReferenceFailure(fmt::format("the reference returned {} probabilities, not {} (R × K)",
                                       ref.probs.size(), r.probs.size()));
  return probabilities_close(c, ref.indices, r.probs, p, "top-k", &ref.probs);
}

Verdict sorted(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  if (const std::string why = shape_problem(c, r); !why.empty()) return Verdict::fail(why);
  if (c.k < 2) return Verdict::discard("K = 1: no order to check");
  bool tied = false;  // a near-tied pair is let go; the scan goes on (as same_indices)
  for (int row = 0; row < c.rows(); ++row)
    for (int j = 0; j + 1 < c.k; ++j) {
      const size_t s = static_cast<size_t>(row) * c.k + j;
      const int a = r.indices[s], b = r.indices[s + 1];
      const double xa = logit(c, row, a), xb = logit(c, row, b);
      const bool order_ok = ranks_before(xa, a, xb, b);
      const bool probs_ok = r.probs[s] >= r.probs[s + 1];
      if (order_ok && probs_ok) continue;
      if (near_tie(c, row, a, b, p.real("tie_ulps"))) {
        tied = true;
        continue;
      }
      return Verdict::fail(
          fmt::format(
              "{}: index {} (logit {}, p {:.9g}) before index {} (logit {}, p {:.9g}): {}", slot(row, j), a,
              xa, r.probs[s], b, xb, r.probs[s + 1],
              !probs_ok ? "probabilities increase"
                        : (xa == xb ? "equal logits not in index order" : "logits not in descending order")),
          {{"row", double(row)}, {"slot", double(j)}, {"first", double(a)}, {"second", double(b)}});
    }
  return tied ? Verdict::discard("near-tie in the ordering") : Verdict::pass();
}

Verdict distinct_in_range_indices(T& t, const Values&) {
  const Case& c = t.input();
  const Result& r = t.target();
  if (const std::string why = shape_problem(c, r); !why.empty()) return Verdict::fail(why);
  for (int row = 0; row < c.rows(); ++row) {
    std::set<int> seen;
    for (int j = 0; j < c.k; ++j) {
      const int i = r.indices[static_cast<size_t>(row) * c.k + j];
      if (!seen.insert(i).second)
        return Verdict::fail(fmt::format("{}: index {} appears twice", slot(row, j), i),
                             {{"row", double(row)}, {"slot", double(j)}, {"index", double(i)}});
    }
  }
  return Verdict::pass();
}

Verdict probabilities_match_softmax(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  if (const std::string why = shape_problem(c, r); !why.empty()) return Verdict::fail(why);
  return probabilities_close(c, r.indices, r.probs, p, "softmax at the returned indices");
}

Verdict no_nan(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  for (size_t s = 0; s < r.probs.size(); ++s) {
    const double q = r.probs[s];
    if (!(q >= 0 && q <= 1))
      return Verdict::fail(
          fmt::format("{}: probability {} outside [0, 1]",
                      slot(static_cast<int>(s) / std::max(c.k, 1), static_cast<int>(s) % std::max(c.k, 1)),
                      q),
          {{"probability", q}});
  }
  const double slack = sum_slack(c, p, c.vocab, 1);
  for (int row = 0; row < c.rows() && r.probs.size() == static_cast<size_t>(c.rows()) * c.k; ++row) {
    double sum = 0;
    for (int j = 0; j < c.k; ++j) sum += r.probs[static_cast<size_t>(row) * c.k + j];
    if (sum > 1 + slack)
      return Verdict::fail(fmt::format("row {}: the K probabilities sum to {:.9g} > 1", row, sum),
                           {{"sum", sum}});
  }
  return Verdict::pass();
}

// The largest power of two S such that every finite logit x +- S of the row is exact in
// the dtype (all finite logits are multiples of g, the finest ulp among them,
// and stay below 2^p g in magnitude) and far from overflow; 0 if none.
double exact_shift(const Case& c, int row) {
  const int p = precision_bits(c.dtype);
  const int max_exp = c.dtype == DType::f16 ? 13 : c.dtype == DType::f64 ? 1021 : 125;
  int g = std::numeric_limits<int>::max();
  double m = 0;
  for (int i = 0; i < c.vocab; ++i) {
    const double x = logit(c, row, i);
    if (!std::isfinite(x) || x == 0) continue;
    int e;
    const double frac = std::frexp(x, &e);  // x = frac * 2^e, 0.5 <= |frac| < 1
    // Lowest set bit of the significand: x is a multiple of 2^(e - bits).
    double f = std::fabs(frac);
    int bits = 0;
    while (f != std::floor(f) && bits < 1100) f *= 2, ++bits;
    g = std::min(g, e - bits);
    m = std::max(m, std::fabs(x));
  }
  if (g == std::numeric_limits<int>::max()) return 1024;  // no nonzero finite logit
  const double room = std::ldexp(1.0, g + p) - m;         // |x + S| must stay below 2^(g+p)
  if (room < std::ldexp(1.0, g)) return 0;
  int s = std::ilogb(room);
  if (std::ldexp(1.0, s) >= room) --s;
  s = std::min(s, max_exp - 1);
  if (m >= std::ldexp(1.0, max_exp - 1)) return 0;
  return s >= g ? std::ldexp(1.0, s) : 0;
}

Verdict shift_invariance(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  const Result& ref = t.reference();
  if (!shape_problem(c, r).empty()) return Verdict::discard("output shape checked elsewhere");
  // Each row by its own shift (softmax is per row); one row's logits decide its shift.
  std::vector<double> shift(static_cast<size_t>(c.rows()));
  for (int row = 0; row < c.rows(); ++row) {
    shift[static_cast<size_t>(row)] = exact_shift(c, row);
    if (shift[static_cast<size_t>(row)] == 0) return Verdict::discard("no exact shift for these logits");
  }
  for (double sign : {1.0, -1.0}) {
    Case shifted = c;
    for (size_t i = 0; i < shifted.logits.size(); ++i)
      if (std::isfinite(shifted.logits[i]))
        shifted.logits[i] += sign * shift[i / static_cast<size_t>(c.vocab)];
    const double s = shift[0];
    const Result rs = t.run_target(shifted);
    if (!shape_problem(shifted, rs).empty())
      return Verdict::fail(fmt::format("logits shifted by {:+g}: {}", sign * s, shape_problem(shifted, rs)));
    const std::string what = c.rows() == 1
                                 ? fmt::format("logits shifted by {:+g}", sign * s)
                                 : fmt::format("rows shifted by {}{:g}, ...", sign > 0 ? "+" : "-", s);
    for (size_t i = 0; i < r.indices.size(); ++i)
      if (rs.indices[i] != r.indices[i])
        return Verdict::fail(
            fmt::format("{}: {}: index {}, unshifted gives {}", what,
                        slot(static_cast<int>(i) / c.k, static_cast<int>(i) % c.k), rs.indices[i],
                        r.indices[i]),
            {{"shift", sign * s}, {"index", double(rs.indices[i])}, {"unshifted", double(r.indices[i])}});
    // The shift is exact, so the true probabilities are the unshifted reference's.
    std::vector<double> want, naive;
    for (int row = 0; row < c.rows(); ++row) {
      const auto full = softmax_row(c, row), base = naive_softmax(shifted, row);
      for (int j = 0; j < c.k; ++j) {
        const int i = rs.indices[static_cast<size_t>(row) * c.k + j];
        want.push_back(full[static_cast<size_t>(i)]);
        naive.push_back(base[static_cast<size_t>(i)]);
      }
    }
    (void)ref;
    const ToleranceReport rep =
        compare_with_baseline(want, rs.probs, naive, p.real("tol.k"), prob_floor(c, want, p));
    if (!rep.ok)
      return Verdict::fail(fmt::format("{}: probability {:.9g}, unshifted softmax {:.9g} ({})", what,
                                       rs.probs[rep.worst_index], want[rep.worst_index], rep.message),
                           {{"shift", sign * s},
                            {"probability", rs.probs[rep.worst_index]},
                            {"expected", want[rep.worst_index]}});
    // x - max is the same after an exact shift: so is each probability's bound.
    if (Verdict v = each_probability_close(c, rs.indices, rs.probs, want, p, what.c_str());
        v.outcome != Outcome::pass)
      return v;
  }
  return Verdict::pass();
}

Verdict full_sort_at_k_equals_v(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  Case all = c;
  all.k = c.vocab;
  const Result full = c.k == c.vocab ? r : t.run_target(all);
  if (const std::string why = shape_problem(all, full); !why.empty()) return Verdict::fail("K = V: " + why);
  // The stable sort by logit, independent of any implementation.
  const Result want = reference(all);
  if (Verdict v = same_indices(all, want.indices, full.indices, p.real("tie_ulps"), "K = V full sort");
      v.outcome != Outcome::pass)
    return v;
  const double slack = sum_slack(c, p, c.vocab, 1);
  for (int row = 0; row < c.rows(); ++row) {
    double sum = 0, naive_sum = 0;
    for (double q : naive_softmax(c, row)) naive_sum += q;
    for (int j = 0; j < c.vocab; ++j) sum += full.probs[static_cast<size_t>(row) * c.vocab + j];
    const double expect = row_max(c, row) == kNegInf ? 0.0 : 1.0;
    const double allowed = p.real("tol.k") * std::fabs(naive_sum - expect) + slack;
    if (!(std::fabs(sum - expect) <= allowed))
      return Verdict::fail(
          fmt::format("K = V: row {} probabilities sum to {:.12g}, expected {} (allowed error {:.3g})", row,
                      sum, expect, allowed),
          {{"row", double(row)}, {"sum", sum}});
    // The K-output is the prefix of the full sort.
    if (!shape_problem(c, r).empty()) continue;
    for (int j = 0; j < c.k; ++j)
      if (r.indices[static_cast<size_t>(row) * c.k + j] !=
          full.indices[static_cast<size_t>(row) * c.vocab + j])
        return Verdict::fail(fmt::format("{}: index {} with K = {}, but K = V puts index {} there",
                                         slot(row, j), r.indices[static_cast<size_t>(row) * c.k + j], c.k,
                                         full.indices[static_cast<size_t>(row) * c.vocab + j]),
                             {{"row", double(row)}, {"slot", double(j)}});
  }
  return Verdict::pass();
}

}  // namespace

void register_invariants(FamilyDef<Traits>& f) {
  f.invariant(
      {"matches_reference",
       "indices equal the reference's (near-ties discarded), probabilities within the dtype tolerance",
       prob_params(kTolK | kTolFloor | kTies)},
      matches_reference);
  f.invariant(
      {"sorted", "each row's output is in descending probability and logit order, equal logits by index",
       prob_params(kTies),
       [](const Values& d, const Values&) -> std::string {
         if (d.int_range("vocab").hi >= 2) return "";
         return "K >= 2, but domain.vocab is [1, 1]; widen vocab or drop the invariant";
       }},
      sorted);
  f.invariant({"distinct_in_range_indices", "rows x K outputs; indices in [0, V), distinct within a row", {}},
              distinct_in_range_indices);
  f.invariant(
      {"probabilities_match_softmax", "each returned probability equals the full softmax at its index",
       prob_params(kTolK | kTolFloor)},
      probabilities_match_softmax);
  f.invariant(
      {"shift_invariance",
       "adding an exact constant (+-S, the largest exact power of two) to every finite logit leaves the "
       "indices and probabilities unchanged",
       prob_params(kTolK | kTolFloor)},
      shift_invariance);
  f.invariant(
      {"full_sort_at_k_equals_v",
       "with K = V the output is the stable sort by logit, sums to 1 (0 for all -inf rows) and has the K "
       "output as its prefix",
       prob_params(kTolK | kTolFloor | kTies)},
      full_sort_at_k_equals_v);
  f.invariant({"no_nan", "every probability is a number in [0, 1]; the K of a row sum to at most 1",
               prob_params(kTolFloor)},
              no_nan);
}

}  // namespace kprop::softmax_topk
