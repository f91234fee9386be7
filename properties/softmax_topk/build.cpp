// The softmax_topk family's one case builder.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kprop/half.h"
#include "kprop/rng.h"
#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {

namespace {
// Rows longer than this draw their values in bulk (Traits::build).
constexpr int kBulkVocab = 4096;
}  // namespace

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
    // Half the rows sign their zeros at random: -0.0 is the same logit as
    // +0.0 (ties by index), which a rank by bit pattern (a radix select on
    // float bits, totalOrder) breaks. Grid values are zero at offset + q = 0:
    // a 1/levels share of a row at offset 0 (most rows), and on few levels
    // the zeros are the row's top or near it, tied in the top k.
    const bool signed_zeros = draw.chance(0.5);
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
    if (signed_zeros)
      for (size_t i = 0; i < row.size(); ++i)
        if (row[i] == 0 && (bulk ? rng::hash(seed, 4, i) & 1 : draw.chance(0.5))) row[i] = -0.0;
    for (size_t i = 0; i < row.size(); ++i)
      if (rate > 0 && (bulk ? rng::uniform(seed, 3, i) < rate : draw.chance(rate))) row[i] = kNegInf;
    c.logits.insert(c.logits.end(), row.begin(), row.end());
  }
  // f16 cases, one in four: each row keeps its (first) max, one logit
  // moves 0.05-2 below it, and most others 9.7-17 below it, where
  // exp(x - max) lies among f16's subnormals (below 2^-14 = e^-9.70;
  // e^-17.3 is half the smallest, 2^-25). There, rounding exp(x - max) to
  // f16 before the sum and the division (the contract computes it in f32)
  // errs by up to half a subnormal step, absolute; the division by Z moves
  // that error off the f16 grid and the store rounds again: the result
  // lands on another grid point than p's own (a chance of about 1/(4 Z) per
  // logit), past each_probability_close's absolute s (invariants.cpp). In
  // the normal range the same rounding stays within the store's u_s that
  // the bound allows (the exp_in_storage mutant). The grid logits rarely
  // fall in this band. Most of the row, not one logit: the band's logits
  // are checked only where the top K reach them. The one logit near the
  // max makes Z 1.1-2 (else exp(x - max) / Z is exp(x - max) itself, on the
  // f16 grid, and its store adds nothing; more of them, or ties at the max,
  // make Z large and the chance small). bf16 has no such band: its
  // subnormals start at 2^-126, f32's smallest normal, which the bound's
  // floor already allows. Drawn after every row (the rows' draws stay as
  // before), with the chance negated so that a fuzz input's missing bytes
  // (chance is true at 0) leave the case as it was; per logit, so only rows
  // short of kBulkVocab.
  const bool band = c.dtype == DType::f16 && v > 1 && v <= kBulkVocab && !draw.chance(0.75);
  if (band) {
    for (int r = 0; r < rows; ++r) {
      double* x = c.logits.data() + static_cast<size_t>(r) * static_cast<size_t>(v);
      const int top_at = static_cast<int>(std::max_element(x, x + v) - x);  // the first max stays
      const double m = x[top_at];
      if (!std::isfinite(m)) continue;  // an all -inf row: no max to go below
      const int near = draw.index(static_cast<size_t>(v));
      for (int i = 0; i < v; ++i) {
        // -inf logits kept as drawn (ranked last: the band's logits are
        // where the top K reach), zeros too (their signs tie by index:
        // negative_zero_below_zero), and one in eight of the others.
        if (i == top_at || !std::isfinite(x[i]) || x[i] == 0 || (i != near && !draw.chance(7.0 / 8)))
          continue;
        const double d = i == near ? draw.any(RealRange{0.05, 2.0}) : draw.any(RealRange{9.7, 17.0});
        // m - d rounds to the f16 grid around m (spacing up to 32 near
        // f16_max: then it may land outside the band, a value like any other).
        x[i] = round_to(c.dtype, std::max(m - d, -top));
      }
    }
  }
  // f16 cases without the band, one in three (a quarter of all f16 cases):
  // one row's finite nonzero logits become f16 subnormals j 2^-24 (j in
  // [1, 1023], either sign; below 2^-14, f16's least normal), -inf and zeros
  // kept as drawn. The grid reaches them only at e <= -17 with few levels
  // (about one f16 row in 700: f16_subnormal_ftz, a load that flushes them
  // to zero, survived a seed), so a rank of subnormals, which such a load
  // ties as zeros, is drawn on purpose here. The row's top K are subnormals
  // (or zeros): all of it but -inf and zeros is replaced. Two of them are a
  // near-tie (discarded, invariants.cpp) only within 16 f32 ulps of 1 = 32
  // subnormal steps, so most pairs of the 1023 are told apart. Not in the
  // band's cases (its rows would lose the logits 9.7-17 below the max that
  // exp_in_storage needs); the chance negated as there; per logit, so only
  // rows short of kBulkVocab.
  if (c.dtype == DType::f16 && !band && v <= kBulkVocab && !draw.chance(2.0 / 3)) {
    const size_t r = static_cast<size_t>(draw.index(static_cast<size_t>(rows)));
    double* x = c.logits.data() + r * static_cast<size_t>(v);
    for (int i = 0; i < v; ++i) {
      if (!std::isfinite(x[i]) || x[i] == 0) continue;
      const double sign = draw.chance(0.5) ? -1 : 1;  // drawn before j: one draw per statement
      x[i] = sign * std::ldexp(static_cast<double>(draw.any(IntRange{1, 1023})), -24);
    }
  }
  return c;
}

}  // namespace kprop::softmax_topk
