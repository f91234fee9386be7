// Data, the contract's helpers and the reference: full attention recomputed
// from scratch for every token, fp64, two-pass softmax.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <type_traits>

#include "kernels/kvcache/kvcache.h"
#include "kprop/half.h"
#include "kprop/recent.h"
#include "kprop/rng.h"

namespace kprop::kvcache {
namespace {

// (kK + 10, kV + 10: an element's near-tie draw; + 20: its side; + 30: its
// exact-tie draw, Case::int8_ties; + 40: its dtype-tie draw, Case::store_ties.
// Case::negative_scores: kQNegative, a query element's magnitude; kSignK,
// under the case's seed, a key channel's sign.)
enum Stream : uint64_t { kQ = 1, kK = 2, kV = 3, kQNegative = 4, kRangeK = 10, kRangeV = 11, kSignK = 14 };

}  // namespace

double storage_roundoff(DType d) {
  return d == DType::f64 ? 0 : unit_roundoff(d);
}

double storage_tiny(DType d) {
  return d == DType::f64 ? 0 : denorm_min(d) / 2;
}

ChannelRanges channel_ranges(const Case& c) {
  const size_t n = static_cast<size_t>(c.kv_heads) * static_cast<size_t>(c.head_dim);
  ChannelRanges r{std::vector<double>(n), std::vector<double>(n)};
  for (size_t i = 0; i < n; ++i) {
    r.k[i] = std::pow(c.k_spread, -rng::uniform(c.seed, kRangeK, i));
    r.v[i] = std::pow(c.v_spread, -rng::uniform(c.seed, kRangeV, i));
  }
  return r;
}

namespace {

// An x with x / scale == m exactly in double, m = j + 1/2 for the first j of
// j0, j0 + 1, j0 - 1, j0 + 2, ... within [-127, 126] whose product x =
// fl(scale m) divides back to m. (About 1 tie in 9 does not, and in
// 2,000,000 samples no double within 3 ulps of such a product divided to m
// either; at each of 200,000 random scales at least 128 of the 254 ties were
// exact, so the walk stops within a few steps.) |x| <= 126.5 scale: inside
// the channel's range (127 scale), so no code clips.
double exact_tie(double scale, double j0) {
  for (int step = 0; step < 2 * 254; ++step) {
    const double j = j0 + (step % 2 ? -(step + 1) / 2 : step / 2);
    if (j < -127 || j > 126) continue;
    const double m = j + 0.5, x = scale * m;
    if (x / scale == m) return x;
  }
  return scale * (j0 + 0.5);  // no exact tie at this scale (none seen): a near one
}

// The value halfway between round_to(dtype, x) and its neighbour toward
// zero (from a zero: half the smallest subnormal), with x's sign: a tie of
// the f16/bf16 dtype, which has one significant bit more than the dtype
// (at most 12), so it is an f32 value, and |tie| <= |round_to(dtype, x)|.
// Its lower neighbour is even or odd as x's rounding was: about half the
// ties round up to even, half down.
double dtype_tie(DType dtype, double x) {
  const double r = round_to(dtype, std::fabs(x));
  const double tie = r == 0 ? denorm_min(dtype) / 2 : (r + neighbour_abs(dtype, r, -1)) / 2;
  return std::copysign(tie, x);
}

Tensors generate(const Case& c, size_t b) {
  const Sequence& s = c.seqs.at(b);
  const size_t T = static_cast<size_t>(s.tokens()), D = static_cast<size_t>(c.head_dim);
  const size_t Hq = static_cast<size_t>(c.q_heads()), Hkv = static_cast<size_t>(c.kv_heads);
  const ChannelRanges range = channel_ranges(c);
  Tensors t{std::vector<double>(T * Hq * D), std::vector<double>(T * Hkv * D),
            std::vector<double>(T * Hkv * D)};
  // K/V arrive at the cache write as f32 in non-f64 cases (Precision).
  const DType arrive = c.dtype == DType::f64 ? DType::f64 : DType::f32;
  // negative_scores (Case), kv head 0 and its query heads only (the other
  // heads keep their data, and the other bugs their chances): channel d of
  // the keys has sign key_sign[d] and the queries the opposite one,
  // magnitude (1 + w) / 2 (w uniform) times a = L sqrt(D) / (the sum of the
  // head's key ranges). A key element is range x (1 + |u|) / 2 in magnitude
  // before the ties below move it (by at most a few code steps of range /
  // 127: >= 0.45 range), so each score alpha sum_c q_c k_c lies in [-L,
  // -0.45 L / 2] (alpha = 1/sqrt(D)): L = 4096 puts an f64 case's max score
  // below -921 (exp underflows past -745), L = 512 an f32-arithmetic one's
  // below -115 (past -104, below f32's least subnormal). q within the
  // dtype's finite range: a <= L k_spread / sqrt(D), 51200 at the domain's
  // k_spread 100 and D = 1, under f16's 65504 (clamped past it: a wider
  // k_spread only weakens the mode).
  std::vector<double> key_sign;
  double q_magnitude = 0;
  if (c.negative_scores) {
    const double L = c.dtype == DType::f64 ? 4096 : 512;
    double sum = 0;
    for (size_t d = 0; d < D; ++d) {
      key_sign.push_back(rng::uniform(c.seed, kSignK, d) < 0.5 ? -1 : 1);
      sum += range.k[d];
    }
    q_magnitude = std::min(L * std::sqrt(static_cast<double>(D)) / sum, max_finite(c.dtype));
  }
  for (size_t i = 0; i < t.q.size(); ++i) {
    if (!c.negative_scores || i / D % Hq >= static_cast<size_t>(c.group)) {  // not a query head of kv head 0
      t.q[i] = round_to(c.dtype, c.q_scale * rng::normal(s.seed, kQ, i));
      continue;
    }
    const double w = rng::uniform(s.seed, kQNegative, i);
    t.q[i] = round_to(c.dtype, -key_sign[i % D] * q_magnitude * (1 + w) / 2);
  }
  // f64 K/V (the int8 cache's inputs): 5% of the elements sit 2^-30 off a
  // rounding tie of their int8 code, x = s (j + 1/2 ± 2^-30) with s = range
  // / 127: x / s rounds away from the tie in double, as the contract's
  // nearbyint(x / s) does, but a quotient formed in f32 lands on the tie.
  // Of the others, a fraction int8_ties sits exactly on a tie (exact_tie):
  // x / s == j + 1/2 in double, which the contract rounds to even. (The
  // scales come from the case's calibrated ranges, not from the values, so
  // no element moves them; every tie lies inside its channel's range.)
  // f16/bf16 K/V: a fraction store_ties sits exactly on a tie of the
  // dtype (dtype_tie), where the cache write's round to nearest even is
  // one ulp from a store that rounds ties away (or truncates); uniformly
  // drawn f32 values hit one about once in 2^15 (bf16). Drawn only for
  // cases with ties, as int8_ties.
  // `sign`: a negative_scores key's channel sign (0: none), which takes u
  // to sign (1 + |u|) / 2, at least half the range from zero.
  auto element = [&](double range, Stream stream, size_t i, double sign = 0) {
    double u = 2 * rng::uniform(s.seed, stream, i) - 1;
    if (sign != 0) u = sign * (1 + std::fabs(u)) / 2;
    if (c.dtype != DType::f64) {
      if (c.store_ties > 0 && rng::uniform(s.seed, stream + 40, i) < c.store_ties)
        return dtype_tie(c.dtype, range * u);
      return range * u;
    }
    if (rng::uniform(s.seed, stream + 10, i) < 0.05) {
      const double side = rng::uniform(s.seed, stream + 20, i) < 0.5 ? -1 : 1;
      return range / 127 * (std::floor(127 * u) + 0.5 + side * 0x1p-30);
    }
    // Drawn only for cases with ties: a case without them draws what it drew before the field.
    if (c.int8_ties > 0 && rng::uniform(s.seed, stream + 30, i) < c.int8_ties)
      return exact_tie(range / 127, std::floor(127 * u));
    return range * u;
  };
  for (size_t i = 0; i < t.k.size(); ++i) {
    const size_t channel = i % (Hkv * D);
    t.k[i] =
        round_to(arrive, element(range.k[channel], kK, i, channel < key_sign.size() ? key_sign[channel] : 0));
    t.v[i] = round_to(arrive, element(range.v[channel], kV, i));
  }
  return t;
}

// Everything generate() reads.
struct DataKey {
  uint64_t seq_seed, seed;
  int tokens, kv_heads, group, head_dim;
  double q_scale, k_spread, v_spread, int8_ties, store_ties;
  bool negative_scores;
  DType dtype;
  bool stored;
  bool operator==(const DataKey&) const = default;
};

DataKey data_key(const Case& c, size_t b, bool stored) {
  const Sequence& s = c.seqs.at(b);
  stored = stored && c.dtype != DType::f64;  // f64 K/V are stored as they arrive: one entry
  return {s.seed,     c.seed,     s.tokens(),  c.kv_heads,   c.group,           c.head_dim, c.q_scale,
          c.k_spread, c.v_spread, c.int8_ties, c.store_ties, c.negative_scores, c.dtype,    stored};
}

// Sequences larger than this (elements) are made each time rather than kept.
constexpr size_t kMaxRecentElements = size_t{1} << 20;

std::shared_ptr<const Tensors> recent_data(const Case& c, size_t b, bool stored) {
  // A few sequences (a batch of one case, a derived case or two).
  static Recent<DataKey, Tensors, 16> recent;
  const Sequence& s = c.seqs.at(b);
  const DataKey key = data_key(c, b, stored);
  stored = key.stored;
  auto make = [&] {
    Tensors t = generate(c, b);
    if (stored)
      for (auto* x : {&t.k, &t.v})
        for (double& e : *x) e = round_to(c.dtype, e);
    return std::make_shared<const Tensors>(std::move(t));
  };
  const size_t elements = static_cast<size_t>(s.tokens()) *
                          static_cast<size_t>(c.q_heads() + 2 * c.kv_heads) * static_cast<size_t>(c.head_dim);
  if (elements > kMaxRecentElements) return make();
  return recent.get(key, make);
}

}  // namespace

std::shared_ptr<const Tensors> shared_sequence_data(const Case& c, size_t b) {
  return recent_data(c, b, false);
}
std::shared_ptr<const Tensors> shared_stored_data(const Case& c, size_t b) {
  return recent_data(c, b, true);
}
Tensors sequence_data(const Case& c, size_t b) {
  return *shared_sequence_data(c, b);
}
Tensors batch_data(const Case& c) {
  Tensors all;
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    const auto data = shared_sequence_data(c, b);
    for (auto [to, from] : {std::pair{&all.q, &data->q}, {&all.k, &data->k}, {&all.v, &data->v}})
      to->insert(to->end(), from->begin(), from->end());
  }
  return all;
}
Tensors stored_data(const Case& c, size_t b) {
  return *shared_stored_data(c, b);
}

ChannelRanges int8_scales(const Case& c, bool per_tensor) {
  ChannelRanges s = channel_ranges(c);
  for (auto* v : {&s.k, &s.v}) {
    const double top = *std::max_element(v->begin(), v->end());
    for (double& x : *v) x = (per_tensor ? top : x) / 127;
  }
  return s;
}

int8_t quantize(double x, double scale) {
  return static_cast<int8_t>(std::clamp(std::nearbyint(x / scale), -127.0, 127.0));
}
int8_t quantize_f32(double x, double scale) {
  const float q = static_cast<float>(x) / static_cast<float>(scale);
  return static_cast<int8_t>(std::clamp(std::nearbyint(static_cast<double>(q)), -127.0, 127.0));
}
int8_t quantize_half_away(double x, double scale) {
  return static_cast<int8_t>(std::clamp(std::round(x / scale), -127.0, 127.0));
}

Tensors dequantized(const Case& c, Tensors t, const ChannelRanges& scales) {
  const size_t channels = static_cast<size_t>(c.kv_heads) * static_cast<size_t>(c.head_dim);
  for (size_t i = 0; i < t.k.size(); ++i) {
    const size_t ch = i % channels;
    t.k[i] = quantize(t.k[i], scales.k[ch]) * scales.k[ch];
    t.v[i] = quantize(t.v[i], scales.v[ch]) * scales.v[ch];
  }
  return t;
}

std::vector<Work> schedule(const Sequence& s, int chunk) {
  // One item per step, on consecutive steps (blocks_needed relies on it).
  std::vector<Work> w;
  const int step = chunk <= 0 ? s.prompt : chunk;
  if (step > 0) w.reserve(size_t(std::max(0, (s.prompt + step - 1) / step + std::max(0, s.decode))));
  int at = s.arrive;
  for (int begin = 0; begin < s.prompt; begin += step)
    w.push_back({at++, begin, std::min(s.prompt, begin + step)});
  for (int t = s.prompt; t < s.tokens(); ++t) w.push_back({at++, t, t + 1});
  return w;
}

BatchSchedule::BatchSchedule(const std::vector<Sequence>& seqs, int chunk) : next_(seqs.size(), 0) {
  plans_.reserve(seqs.size());
  for (const Sequence& s : seqs) {
    plans_.push_back(schedule(s, chunk));
    last_step_ = std::max(last_step_, plans_.back().back().step);
  }
}

StepWork BatchSchedule::take(int step) {
  StepWork s;
  for (size_t b = 0; b < plans_.size(); ++b)
    if (next_[b] < plans_[b].size() && plans_[b][next_[b]].step == step) {
      s.work.push_back({b, plans_[b][next_[b]++]});
      if (next_[b] == plans_[b].size()) s.finishing.push_back(b);
    }
  return s;
}

int blocks_needed(const Case& c) {
  if (c.page_size < 1) return 0;
  // schedule() gives a sequence one work item per step, from its first step
  // to its last, so at a step inside that range it holds the blocks up to
  // the end of that step's item: plan[step - first step]. (Looking that
  // item up, rather than scanning the plan for the latest item so far, was
  // the difference between linear and quadratic in a long chunk-1 prefill;
  // this runs in every validate().)
  int peak = 0;
  for (int chunk : {0, c.chunk}) {
    const BatchSchedule batch(c.seqs, chunk);
    for (int step = 0; step <= batch.last_step(); ++step) {
      int64_t held = 0;
      for (const auto& plan : batch.plans()) {
        const int64_t i = int64_t(step) - plan.front().step;
        if (i >= 0 && i < int64_t(plan.size()))
          held += (int64_t(plan[size_t(i)].end) + c.page_size - 1) / c.page_size;
      }
      peak = static_cast<int>(std::max<int64_t>(peak, held));
    }
  }
  return peak;
}

Case fit_pool(Case c) {
  const int need = blocks_needed(c);
  for (int b = static_cast<int>(c.pool.size()); b < need; ++b) c.pool.push_back(b);
  return c;
}

double poison_key(Poison p) {
  return p == Poison::nan ? std::numeric_limits<double>::quiet_NaN() : 0.0;
}
double poison_value(Poison p, DType d) {
  if (p == Poison::nan) return std::numeric_limits<double>::quiet_NaN();
  return d == DType::f16 ? half::f16_max : round_to(d, 1e30);
}

std::string validate(const Case& c) {
  // Bounds far above real models (what bounds a case is the spec's memory
  // budget, run.max_case_mb): they keep token and slot arithmetic in int.
  if (c.kv_heads < 1 || c.kv_heads > 1024) return "kv_heads must be in [1, 1024]";
  if (c.group < 1 || c.group > 1024) return "group must be in [1, 1024]";
  if (c.head_dim < 1 || c.head_dim > 65536) return "head_dim must be in [1, 65536]";
  if (c.seqs.empty() || c.seqs.size() > 65536) return "the batch needs 1 to 65536 sequences";
  int64_t tokens = 0;
  for (const Sequence& s : c.seqs) {
    if (s.prompt < 1) return "every prompt has at least one token";
    if (s.decode < 0 || s.arrive < 0) return "decode steps and arrival steps are >= 0";
    if (s.prompt > (1 << 24) || s.decode > (1 << 24) || s.arrive > (1 << 24))
      return "prompt, decode and arrival steps must be at most 2^24";
    tokens += s.tokens();
  }
  if (tokens > 1 << 26) return "more than 2^26 tokens in the batch";
  if (c.page_size < 1 || c.page_size > (1 << 20)) return "page_size must be in [1, 2^20]";
  if (c.chunk < 1 || c.chunk > (1 << 24)) return "chunk must be in [1, 2^24]";
  if (!(c.q_scale > 0 && c.q_scale <= 1e3)) return "q_scale must be in (0, 1000]";
  if (c.dtype != DType::f64 && c.dtype != DType::f32 && !is_half(c.dtype)) return "unknown dtype";
  if (!(c.k_spread >= 1 && c.k_spread <= 1e6 && c.v_spread >= 1 && c.v_spread <= 1e6))
    return "k_spread and v_spread must be in [1, 1e6]";
  if (!(c.int8_ties >= 0 && c.int8_ties <= 1)) return "int8_ties must be in [0, 1]";
  if (c.int8_ties > 0 && c.dtype != DType::f64)
    return "int8_ties applies to f64 cases only (the int8 cache's)";
  if (!(c.store_ties >= 0 && c.store_ties <= 1)) return "store_ties must be in [0, 1]";
  if (c.store_ties > 0 && !is_half(c.dtype)) return "store_ties applies to f16 and bf16 cases only";
  std::vector<bool> seen(c.pool.size());
  for (int b : c.pool) {
    if (b < 0 || b >= static_cast<int>(seen.size()) || seen[static_cast<size_t>(b)])
      return "pool must be a permutation of 0 .. n-1";
    seen[static_cast<size_t>(b)] = true;
  }
  if (const int need = blocks_needed(c); static_cast<int>(c.pool.size()) < need)
    return fmt::format("pool has {} blocks, the schedule holds up to {} at once", c.pool.size(), need);
  return "";
}

namespace {

// Output of token t of one sequence from its full K/V: scores, max, exp, sum,
// in T (double: the reference; float: the naive same-precision baseline,
// whose outputs are then rounded to the dtype).
template <typename T>
std::vector<double> recompute_sequence(const Case& c, const Tensors& x, size_t b) {
  const size_t D = static_cast<size_t>(c.head_dim), Hq = static_cast<size_t>(c.q_heads());
  const size_t Hkv = static_cast<size_t>(c.kv_heads), g = static_cast<size_t>(c.group);
  const T alpha = static_cast<T>(1 / std::sqrt(static_cast<double>(D)));
  const size_t T_ = static_cast<size_t>(c.seqs[b].tokens());
  std::vector<double> out(T_ * Hq * D);
  std::vector<T> p(T_), o(D);
  for (size_t t = 0; t < T_; ++t)
    for (size_t h = 0; h < Hq; ++h) {
      const double* q = &x.q[(t * Hq + h) * D];
      const size_t kvh = h / g;
      T m = -std::numeric_limits<T>::infinity();
      for (size_t j = 0; j <= t; ++j) {
        const double* k = &x.k[(j * Hkv + kvh) * D];
        T s = 0;
        for (size_t d = 0; d < D; ++d) s += static_cast<T>(q[d]) * static_cast<T>(k[d]);
        p[j] = alpha * s;
        m = std::max(m, p[j]);
      }
      T l = 0;
      for (size_t j = 0; j <= t; ++j) l += p[j] = std::exp(p[j] - m);
      std::fill(o.begin(), o.end(), T(0));
      for (size_t j = 0; j <= t; ++j) {
        const double* v = &x.v[(j * Hkv + kvh) * D];
        const T w = p[j] / l;  // once per key: the compiler cannot hoist it past the stores to o
        for (size_t d = 0; d < D; ++d) o[d] += w * static_cast<T>(v[d]);
      }
      double* dst = &out[(t * Hq + h) * D];
      for (size_t d = 0; d < D; ++d)
        dst[d] = std::is_same_v<T, double> ? o[d] : round_to(c.dtype, static_cast<double>(o[d]));
    }
  return out;
}

template <typename T>
Result recompute(const Case& c, bool int8_cache) {
  // A case's derived cases (another page layout, chunking or sub-batch: the
  // metamorphic invariants) hold the same sequences, and the spec's default
  // target is this reference: without the cache each derived case
  // recomputed full attention, O(tokens^2) per sequence (a third of the
  // kvcache fuzzer's time). Kept like the sequences' data, a few at a time,
  // by what a sequence's outputs depend on: its data key (one cache per
  // arithmetic type T).
  static Recent<DataKey, std::vector<double>, 16> recent;
  const ChannelRanges scales = int8_cache ? int8_scales(c) : ChannelRanges{};
  Result r;
  r.int8_cache = int8_cache;
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    if (int8_cache) {  // the scales are the whole case's: not one sequence's
      r.out.push_back(recompute_sequence<T>(c, dequantized(c, sequence_data(c, b), scales), b));
      continue;
    }
    const std::shared_ptr<const Tensors> data = shared_stored_data(c, b);
    auto make = [&] {
      return std::make_shared<const std::vector<double>>(recompute_sequence<T>(c, *data, b));
    };
    const size_t elements = data->q.size() + data->k.size() + data->v.size();
    r.out.push_back(elements > kMaxRecentElements ? *make() : *recent.get(data_key(c, b, true), make));
  }
  return r;
}

}  // namespace

// The reference keeps its outputs in fp64 whatever the dtype.
Result reference(const Case& c) {
  return recompute<double>(c, false);
}
Result reference_dequantized(const Case& c) {
  return recompute<double>(c, true);
}
Result naive(const Case& c) {
  if (c.dtype == DType::f64) return reference(c);
  return recompute<float>(c, false);
}

}  // namespace kprop::kvcache
