#include "properties/softmax_topk/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "kprop/case_yaml.h"
#include "kprop/half.h"
#include "kprop/rng.h"

namespace kprop::softmax_topk {

namespace {
// Rows longer than this draw their values in bulk (Traits::build).
constexpr int kBulkVocab = 4096;
}  // namespace

Schema Traits::domain_schema() {
  return {
      field::renamed(field::choices("dtypes", {"f16", "bf16", "f32", "f64"}, {"f16", "bf16", "f32", "f64"},
                                    "input dtypes (the fused kernel computes in the dtype; f16/bf16 in f32, "
                                    "probabilities stored in the dtype)"),
                     "dtype"),
      field::int_range("rows", {1, 4}, 1, 1 << 24, "rows per case"),
      field::int_range("vocab", {1, 100}, 1, 1 << 24, "V: logits per row"),
      field::real("k_above_32_rate", 0.3, 0, 1,
                  "probability K is drawn from [33, V] when V > 32 (fixed-cap structures)"),
      field::int_range("block", {1, 64}, 1, 1 << 24, "fused kernel block width (online max/normaliser step)"),
      field::map(
          "values",
          {
              field::int_range(
                  "magnitude_log2", {-20, 100}, -120, 1000,
                  "scale exponent of the logit grid (clamped per dtype): huge magnitudes overflow exp(x)"),
              field::int_range("offset_log2", {3, 22}, 0, 22,
                               "row offsets +-2^j in grid units: large logits with small differences"),
              field::int_range("tie_levels", {2, 8}, 2, 1 << 20,
                               "distinct values in a row drawn for exact ties"),
              field::real_range("neg_inf_rate", {0.0, 0.8}, 0, 1,
                                "fraction of -inf logits in rows that have some"),
          },
          "logit rows: grid values q * 2^e (shift-exact), exact ties, offsets, -inf entries, all -inf rows; "
          "in f64, a third of the rows split ties by 2^-29 relative (distinct in f64, one value in f32)"),
  };
}

// One case builder for RapidCheck draws, fuzz bytes and seed corpora. Logits
// are drawn one by one (value-level control: grid values, ties, -inf).
Case Traits::build(Draw& draw, const Values& domain) {
  Case c;
  parse_dtype(draw.pick(domain.choices("dtypes")), c.dtype);  // the schema allows only valid names
  const IntRange vr = domain.int_range("vocab");
  // A quarter of the cases reach the whole vocab range at once (K > 32 needs V > 32).
  c.vocab = static_cast<int>(draw.chance(0.25) ? draw.any(vr) : draw.sized(vr));
  const int rows = static_cast<int>(draw.sized(domain.int_range("rows")));
  c.block = static_cast<int>(draw.any(domain.int_range("block")));
  const int v = c.vocab;
  if (v > 32 && draw.chance(domain.real("k_above_32_rate")))
    c.k = static_cast<int>(draw.any(IntRange{33, v}));
  else if (draw.chance(0.2))
    c.k = 1;
  else if (draw.chance(0.2))
    c.k = v;
  else
    c.k = static_cast<int>(draw.any(IntRange{1, v}));

  const IntRange mag = domain.int_range("values.magnitude_log2");
  const IntRange off = domain.int_range("values.offset_log2");
  const IntRange levels = domain.int_range("values.tie_levels");
  const RealRange inf_rate = domain.real_range("values.neg_inf_rate");
  // Grid values (o + q) * 2^e with |o + q| < 2^23 are exact in f32 and f64
  // and stay exact under shifts by powers of two (shift_invariance). A half
  // case draws the same rows, e clamped to its exponent range (f16: e in
  // [-24, 3], so values reach thousands: exp(x) overflows f16 past 11.09;
  // bf16: f32's range), then rounds each value to the dtype (clamped to its
  // largest finite value first: never an inf from rounding). The rounding
  // merges nearby grid values into exact ties, as storing in half does.
  const int max_e = c.dtype == DType::f32    ? 127 - 25
                    : c.dtype == DType::f16  ? 3
                    : c.dtype == DType::bf16 ? 127 - 25
                                             : 1023 - 25;
  const int min_e = c.dtype == DType::f16 ? -24 : -100;
  const double top = c.dtype == DType::f16    ? half::f16_max
                     : c.dtype == DType::bf16 ? half::bf16_max
                                              : HUGE_VAL;
  for (int r = 0; r < rows; ++r) {
    // f64 rows, a third of the time: each grid value y moved to
    // y·(1 + f·2^-29), f in [-3, 3] (exact: an integer below 2^52 times a
    // power of two): logits that f64 tells apart and f32 rounds to one value,
    // so a rank by f32 keys misorders them (f32_rank_keys).
    const bool fine = c.dtype == DType::f64 && draw.chance(1.0 / 3);
    const int64_t levels_here = draw.chance(0.5) ? draw.any(levels) : int64_t{1} << 19;
    int e = static_cast<int>(draw.chance(0.5) ? draw.any(IntRange{-3, 3}) : draw.any(mag));
    e = std::clamp(e, min_e, max_e);
    int64_t offset = 0;
    if (draw.chance(0.3)) {
      const int64_t sign = draw.chance(0.5) ? 1 : -1;  // drawn before the shift: one draw per statement
      offset = sign * (int64_t{1} << draw.any(off));
    }
    double rate = 0;
    if (draw.chance(0.5)) rate = draw.chance(0.15) ? 1.0 : draw.any(inf_rate);
    const bool ascending = draw.chance(0.2);
    // A row past kBulkVocab logits takes its values from counter-based
    // streams under one drawn seed: a draw per logit costs the generator
    // ~300 bytes (RapidCheck keeps each for shrinking), 6x the case itself
    // at a 256k vocabulary (bench/case_memory.py). Shorter rows draw each
    // value, so that RapidCheck and the fuzzer shape them one by one.
    const bool bulk = v > kBulkVocab;
    const uint64_t seed = bulk ? uint64_t(draw.any(IntRange{1, int64_t(1) << 40})) : 0;
    auto pick = [&](uint64_t stream, size_t i, IntRange range) {
      if (!bulk) return draw.any(range);
      return range.lo +
             static_cast<int64_t>(rng::hash(seed, stream, i) % static_cast<uint64_t>(range.count()));
    };
    std::vector<double> row;
    for (int i = 0; i < v; ++i) {
      const int64_t q = pick(1, size_t(i), IntRange{0, levels_here - 1}) - levels_here / 2;
      if (fine)
        row.push_back(
            std::ldexp(static_cast<double>((offset + q) * (int64_t{1} << 29) +
                                           (offset + q == 0 ? 0 : pick(2, size_t(i), IntRange{-3, 3}))),
                       e - 29));
      else
        row.push_back(std::ldexp(static_cast<double>(offset + q), e));
    }
    if (is_half(c.dtype))
      for (double& x : row) x = round_to(c.dtype, std::clamp(x, -top, top));
    if (ascending) std::sort(row.begin(), row.end());
    for (size_t i = 0; i < row.size(); ++i)
      if (rate > 0 && (bulk ? rng::uniform(seed, 3, i) < rate : draw.chance(rate))) row[i] = kNegInf;
    c.logits.insert(c.logits.end(), row.begin(), row.end());
  }
  return c;
}

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

// One shrink step, boldest first: fewer rows, fewer columns, smaller K, block
// 1, whole-row simplifications (dense ranks, halving), then one value at a
// time towards 0, +-1 and small powers of two. Candidates that break the
// contract or repeat the case are skipped.
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
  if (v > 1) {
    std::vector<int> first, second;
    for (int j = 0; j < v; ++j) (j < (v + 1) / 2 ? first : second).push_back(j);
    out.push_back(with_columns(c, first));
    out.push_back(with_columns(c, second));
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
  for (int k : {1, c.k / 2, c.k - 1})
    if (k >= 1 && k < c.k) {
      Case s = c;
      s.k = k;
      out.push_back(std::move(s));
    }
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
  auto all = rc::seq::concat(rc::seq::fromContainer(std::move(head)), std::move(column_drops),
                             rc::seq::fromContainer(std::move(out)), std::move(values));
  return rc::seq::filter(std::move(all), [c](const Case& s) {
    if (s == c || !validate(s).empty()) return false;
    for (double x : s.logits)
      if (!representable(s, x)) return false;
    return true;
  });
}

std::string Traits::in_domain(const Case& c, const Values& d) {
  return first_problem({outside_choices(d, "dtypes", dtype_name(c.dtype)),
                        outside_int_range(d, "rows", c.rows()), outside_int_range(d, "vocab", c.vocab),
                        outside_int_range(d, "block", c.block)});
}

namespace {
// Bytes of one trial: the logits, three results of K ≤ V probabilities and
// indices (target, reference, the K = V full sort), the implementation
// running (its logits, probabilities and indices in its dtype: ≤ 24 bytes a
// logit), and two softmax rows. bench/case_memory.py measures the peak
// against this: 38 MB of 45 at rows 2 x V 262144, fused.
double softmax_bytes(double rows, double vocab) {
  return 8 * rows * vocab + 3 * 16 * rows * vocab + 24 * rows * vocab + 2 * 8 * vocab;
}
}  // namespace

double Traits::case_bytes(const Case& c) {
  return softmax_bytes(c.rows(), c.vocab);
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const int64_t rows = d.int_range("rows").hi, vocab = d.int_range("vocab").hi;
  CaseSize size{softmax_bytes(double(rows), double(vocab)), fmt::format("rows {} x V {}", rows, vocab),
                "rows or vocab"};
  // The named tensors' dims (tensors.cpp); K, at most V, counted as V.
  size.extents = {{"R", double(rows)}, {"V", double(vocab)}, {"K", double(vocab)}};
  return size;
}

YAML::Node Traits::to_yaml(const Case& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["dtype"] = dtype_name(c.dtype);
  n["k"] = c.k;
  n["block"] = c.block;
  YAML::Node rows(YAML::NodeType::Sequence);
  for (int r = 0; r < c.rows(); ++r) {
    const std::vector<double> values(c.logits.begin() + static_cast<long>(r) * c.vocab,
                                     c.logits.begin() + static_cast<long>(r + 1) * c.vocab);
    // A half case's values as the shortest text that reads back (rounded
    // to the dtype) to the value.
    YAML::Node row =
        is_half(c.dtype)
            ? case_yaml::text_list(values.size(), [&](size_t i) { return value_text(c.dtype, values[i]); })
            : case_yaml::real_list(values);
    rows.push_back(row);
  }
  n["logits"] = rows;
  return n;
}

Case Traits::from_yaml(const YAML::Node& n) {
  case_yaml::expect_keys(n, {"dtype", "k", "block", "logits"}, "softmax_topk case");
  Case c;
  const std::string dtype = case_yaml::read<std::string>(n, "dtype");
  if (!parse_dtype(dtype, c.dtype)) case_yaml::fail(n["dtype"], "dtype must be f16, bf16, f32 or f64");
  c.k = case_yaml::read<int>(n, "k");
  c.block = case_yaml::read_or<int>(n, "block", 16);
  const YAML::Node rows = n["logits"];
  if (!rows || !rows.IsSequence() || rows.size() == 0)
    case_yaml::fail(rows ? rows : n, "'logits' must be a non-empty list of rows");
  c.vocab = -1;
  for (const auto& item : rows) {
    const YAML::Node row = item;
    // Read in place: assigning the row into a holder map merges yaml-cpp's
    // node memory, quadratic in the rows of a large case.
    std::vector<double> values = case_yaml::read_real_list(row, "'row'");
    // A half case's values are written as their shortest text (kprop/half.h),
    // which reads back as the nearest double, then rounds to the dtype. Any
    // other text must be an exact value of the dtype (as for f32): no silent
    // rounding of a hand-written corpus value.
    if (is_half(c.dtype))
      case_yaml::for_each_item(row, [&](const case_yaml::Item& x) {
        const double v = values[x.index], h = round_to(c.dtype, v);
        if (!std::isfinite(v) || h == v) return;
        const std::string shortest = value_text(c.dtype, h);
        if (std::isfinite(h) && x.text == shortest)
          values[x.index] = h;
        else
          x.fail(fmt::format("logit {} is not a {} value (nearest: {})", x.text, dtype, shortest));
      });
    if (c.vocab >= 0 && static_cast<int>(values.size()) != c.vocab)
      case_yaml::fail(row, "rows differ in length");
    if (values.size() > (1u << 22)) case_yaml::fail(row, "row too long for a test case");
    c.vocab = static_cast<int>(values.size());
    c.logits.insert(c.logits.end(), values.begin(), values.end());
  }
  if (c.logits.size() > (1u << 24)) case_yaml::fail(rows, "case too large");
  case_yaml::check_contract(n, validate(c));
  return c;
}

CaseStats Traits::stats(const Case& c) {
  int neg_inf = 0;
  double top = 0;
  for (double x : c.logits) {
    if (x == kNegInf)
      ++neg_inf;
    else
      top = std::max(top, std::fabs(x));
  }
  return CaseStats{
      static_cast<int64_t>(c.logits.size()) + c.k,
      fmt::format("{} x {} {}, K {}, block {}{}, max |logit| {:g}", c.rows(), c.vocab, dtype_name(c.dtype),
                  c.k, c.block, neg_inf ? fmt::format(", {} -inf", neg_inf) : "", top)}
      .dim("rows", c.rows())
      .dim("vocab", c.vocab)
      .dim("K", c.k)
      .dim("-inf logits", neg_inf)
      .kind("dtype", dtype_name(c.dtype));
}

}  // namespace kprop::softmax_topk
