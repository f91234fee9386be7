// The one case builder of the attention families.
#include <algorithm>
#include <cmath>
#include <functional>

#include "kprop/rng.h"
#include "properties/attention/family_parts.h"

namespace kprop::attention {
namespace {

// ------------------------------------------------------------ generation
// One case builder (CaseTraits::build) for RapidCheck draws, libFuzzer bytes
// and fuzz seed corpora, so the fuzzer reaches exactly the generator's domain. Bulk data (values, masks)
// comes from counter-based randomness under a drawn seed.
template <typename Draw>
int pick_tile(Draw& draw, int n, IntRange r) {
  // The allowed value nearest x (a plain range clamps; one_of / multiple_of snap).
  auto clamp = [&](int64_t x) { return static_cast<int>(r.nearest(x)); };
  std::vector<int> divisors, others;
  for (int64_t t = r.lo; t <= std::min<int64_t>(r.hi, n); ++t)
    if (r.allows(t)) (n % t == 0 ? divisors : others).push_back(int(t));
  switch (draw.any(IntRange{0, 4})) {
    case 0:
      if (!divisors.empty()) return divisors[size_t(draw.any(IntRange{0, int64_t(divisors.size()) - 1}))];
      return clamp(n);
    case 1:
      if (!others.empty()) return others[size_t(draw.any(IntRange{0, int64_t(others.size()) - 1}))];
      return clamp(n);
    case 2:
      return clamp(n + draw.any(IntRange{0, 3}));  // one tile (maybe larger than N)
    case 3:
      return clamp(1);
    default:
      return clamp(draw.any(r));
  }
}

template <typename Draw>
const std::string& pick(Draw& draw, const Choices& options) {
  return options[size_t(draw.any(IntRange{0, int64_t(options.size()) - 1}))];
}

// Unit vectors, one per (batch, kv head): the direction growing_keys and
// masked_peaks move keys along and queries toward.
std::vector<double> head_direction(const Shape& s, int b, int kvh, uint64_t seed) {
  std::vector<double> u(size_t(s.dim));
  double norm = 0;
  for (int d = 0; d < s.dim; ++d)
    norm += (u[size_t(d)] = rng::normal(seed, 5, (size_t(b) * s.heads_kv + kvh) * s.dim + d)) * u[size_t(d)];
  norm = std::sqrt(norm) + 1e-12;
  for (double& x : u) x /= norm;
  return u;
}

// Moves every query of kv head (b, kvh)'s group by `along` u.
void queries_toward(Case& c, int b, int kvh, const std::vector<double>& u, double along) {
  const Shape& s = c.shape;
  for (int r = 0; r < s.group(); ++r)
    for (int i = 0; i < s.nq; ++i)
      for (int d = 0; d < s.dim; ++d) c.q[q_at(s, b, kvh * s.group() + r, i) + d] += along * u[size_t(d)];
}

// masked_peaks: a key is a peak when the mask hides it from the batch's
// first query row (the masks are the same for every head); with no mask, a
// quarter of the keys at random. Peaks move `peak` / (scale along) along u,
// the queries `along` toward it: a peak outscores the other keys by about
// `peak` (the queries' own spread along u moves it by about peak / along).
// A key entry stays within a quarter of the dtype's largest finite value
// (16376 in f16, where a peak then reaches about 5e4 at most), so that
// rounding to the dtype keeps it finite and a metamorphic shift of the
// keys stays in range.
void masked_peaks(Case& c, double peak, uint64_t seed) {
  const Shape& s = c.shape;
  const double along = 4, step = peak / (effective_scale(c) * along), cap = max_finite(c.dtype) / 4;
  for (int b = 0; b < s.batch; ++b)
    for (int kvh = 0; kvh < s.heads_kv; ++kvh) {
      const std::vector<double> u = head_direction(s, b, kvh, seed);
      for (int j = 0; j < s.nk; ++j) {
        const bool is_peak = c.mask == MaskKind::none ? rng::uniform(seed, 32, size_t(b) * s.nk + j) < 0.25
                                                      : !visible(c, b, 0, j);
        if (is_peak)
          for (int d = 0; d < s.dim; ++d) {
            double& x = c.k[kv_at(s, b, kvh, j) + d];
            x = std::clamp(x + step * u[size_t(d)], -cap, cap);
          }
      }
      queries_toward(c, b, kvh, u, along);
    }
}

void fill_values(Case& c, const std::string& kind, double magnitude, double growth, double peak, bool large_v,
                 bool same_keys, uint64_t seed) {
  const Shape& s = c.shape;
  auto normal = [&](int stream, size_t i) { return rng::normal(seed, uint64_t(stream), i); };
  // A tensor the kind below overwrites in full draws no normals first: each
  // value is a function of (seed, stream, index) alone, so leaving some out
  // changes no other (a fifth of the normals of a backward case went to
  // values overwritten at once).
  const bool integer = kind == "integer", rows = kind == "constant_rows", pinned = kind == "pinned_grads";
  auto fill = [&](std::vector<double>& t, size_t n, int stream, bool overwritten) {
    t.resize(n);
    if (!overwritten)
      for (size_t i = 0; i < n; ++i) t[i] = normal(stream, i);
  };
  fill(c.q, s.q_size(), 1, integer || rows);
  fill(c.k, s.kv_size(), 2, integer || rows);
  fill(c.v, s.kv_size(), 3, integer || rows || pinned || kind == "near_uniform");
  if (!c.d_out.empty()) fill(c.d_out, s.q_size(), 4, integer || pinned);
  if (kind == "large") {
    for (double& x : c.q) x *= magnitude;
    for (double& x : c.k) x *= magnitude;
    if (large_v) {
      for (double& x : c.v) x *= magnitude;
      // Half cases: dO shrinks as V grows, so dP = dO·Vᵀ and dQ = dS·K
      // (≈ |dP|·|K|) stay far inside f16's range.
      if (is_half(c.dtype))
        for (double& x : c.d_out) x /= magnitude;
    }
  } else if (kind == "growing_keys") {
    const double scale = effective_scale(c), along = 3;
    const double step = growth / (scale * along * std::max(1, s.nk - 1));
    for (int b = 0; b < s.batch; ++b)
      for (int kvh = 0; kvh < s.heads_kv; ++kvh) {
        const std::vector<double> u = head_direction(s, b, kvh, seed);
        for (int j = 0; j < s.nk; ++j)
          for (int d = 0; d < s.dim; ++d) {
            double& x = c.k[kv_at(s, b, kvh, j) + d];
            x = 0.5 * x + step * j * u[size_t(d)];
          }
        queries_toward(c, b, kvh, u, along);
      }
  } else if (kind == "masked_peaks") {
    masked_peaks(c, peak, seed);
  } else if (kind == "integer") {
    int stream = 10;
    for (auto* t : {&c.q, &c.k, &c.v, &c.d_out}) {
      for (size_t i = 0; i < t->size(); ++i)
        (*t)[i] = std::floor(rng::uniform(seed, uint64_t(stream), i) * 7) - 3;
      ++stream;
    }
  } else if (kind == "constant_rows") {
    auto constant_rows = [&](std::vector<double>& t, int stream, bool all_equal) {
      for (size_t row = 0; row < t.size() / size_t(s.dim); ++row) {
        const double x = std::round(4 * normal(stream, all_equal ? 0 : row)) / 4;
        std::fill(t.begin() + long(row * s.dim), t.begin() + long((row + 1) * s.dim), x);
      }
    };
    constant_rows(c.q, 20, false);
    constant_rows(c.k, 21, same_keys);
    constant_rows(c.v, 22, false);
  } else if (kind == "near_uniform") {
    // Half the time every key and every value row of a head is the same:
    // P = 1/Nk exactly and O = that row, so the accumulators add one
    // constant Nk times (the most coherent rounding an f16/bf16
    // accumulator can make).
    for (double& x : c.q) x *= 0.02;
    const size_t heads = size_t(s.batch) * s.heads_kv, row = size_t(s.dim);
    for (size_t h = 0; h < heads; ++h)
      for (int j = 0; j < s.nk; ++j)
        for (int d = 0; d < s.dim; ++d) {
          const size_t at = (h * s.nk + size_t(j)) * row + size_t(d), first = h * s.nk * row + size_t(d);
          c.v[at] = 1 + 0.25 * normal(23, same_keys ? first : at);
          if (same_keys) c.k[at] = c.k[first];
        }
  } else if (kind == "tied_scores") {
    // Every key of a head equal to its first (Q and V as drawn, normal).
    for (int b = 0; b < s.batch; ++b)
      for (int kvh = 0; kvh < s.heads_kv; ++kvh)
        for (int j = 1; j < s.nk; ++j)
          std::copy_n(&c.k[kv_at(s, b, kvh, 0)], s.dim, &c.k[kv_at(s, b, kvh, j)]);
  } else if (kind == "pinned_grads") {
    // Scores that tie while the keys differ (Q zero past its first channel,
    // every key of a head sharing that channel), V small integers and dO one
    // signed power of two per row, in one channel: where a row's visible
    // keys number 2^t, O is exact in the dtype and so is every dS, and dQ,
    // dK are known to f32 accuracy before their stores
    // (dq_dk_rounded_to_nearest). Its softmax scale, a power of two, is set
    // with the header (pinned_scale).
    const size_t dim = size_t(s.dim);
    for (size_t row = 0; row < c.q.size() / dim; ++row)
      std::fill_n(c.q.begin() + long(row * dim + 1), dim - 1, 0.0);
    for (int b = 0; b < s.batch; ++b)
      for (int kvh = 0; kvh < s.heads_kv; ++kvh)
        for (int j = 1; j < s.nk; ++j) c.k[kv_at(s, b, kvh, j)] = c.k[kv_at(s, b, kvh, 0)];
    for (size_t i = 0; i < c.v.size(); ++i) c.v[i] = std::floor(rng::uniform(seed, 25, i) * 7) - 3;
    for (size_t row = 0; row < c.d_out.size() / dim; ++row) {
      const size_t at = size_t(std::floor(rng::uniform(seed, 26, row) * double(dim)));
      const int e = int(std::floor(rng::uniform(seed, 27, row) * 5)) - 2;
      std::fill_n(c.d_out.begin() + long(row * dim), dim, 0.0);
      c.d_out[row * dim + std::min(at, dim - 1)] =
          (rng::uniform(seed, 28, row) < 0.5 ? -1 : 1) * std::ldexp(1.0, e);
    }
  } else if (kind == "wide") {
    // One magnitude 2^e per (b, kv head), e in [0, 15], V around it (mostly
    // positive): O stays below 65504, the unnormalized P·V sum need not.
    int widest = 0;
    const size_t per_head = size_t(s.nk) * s.dim;
    for (size_t h = 0; h < size_t(s.batch) * s.heads_kv; ++h) {
      const int e = int(std::floor(rng::uniform(seed, 24, h) * 16));
      widest = std::max(widest, e);
      for (size_t i = h * per_head; i < (h + 1) * per_head; ++i)
        c.v[i] = std::clamp(std::ldexp(1 + 0.5 * c.v[i], e), -60000.0, 60000.0);
    }
    for (double& x : c.d_out) x = std::ldexp(x, -widest);
  }
  // Stored as the dtype holds them, saturating as a cast with saturation
  // does: a domain's extremes (key_growth 1e6, large_magnitude 1e4) put
  // values past f16's 65504, which rounded to inf and made cases outside the
  // contract (validate: inputs must be finite).
  const double most = max_finite(c.dtype);
  for (auto* t : {&c.q, &c.k, &c.v, &c.d_out})
    for (double& x : *t) x = round_to(c.dtype, std::clamp(x, -most, most));
}

// pinned_grads: the softmax scale becomes a power of two (1 to 1/8) where it
// is not one: only then may a kernel fold it into dS exactly. A function of
// the seed alone, so it is part of the case's header (before the values).
void pinned_scale(Case& c, uint64_t seed) {
  int exponent = 0;
  if (std::frexp(effective_scale(c), &exponent) != 0.5)
    c.scale = std::ldexp(1.0, -int(std::floor(rng::uniform(seed, 29, 0) * 4)));
}

// Every draw, then the bulk values (fill_values, from the drawn seed by
// counter: none of them is a draw). `hollow`, where set and true for the
// case so far (its header: shape, tiles, dtype, scale, mask), returns it
// without them.
template <typename Draw>
Case build_case(Draw& draw, const Values& domain, bool backward,
                const std::function<bool(const Case&)>& hollow = {}) {
  Case c;
  Shape& s = c.shape;
  s.batch = int(draw.sized(domain.int_range("batch")));
  s.heads_kv = int(draw.any(domain.int_range("heads_kv")));
  s.heads_q = s.heads_kv * int(draw.any(domain.int_range("group")));
  s.nq = int(draw.sized(domain.int_range("nq")));
  s.nk = draw.chance(domain.real("same_length_rate")) ? int(domain.int_range("nk").nearest(s.nq))
                                                      : int(draw.sized(domain.int_range("nk")));
  s.dim = int(draw.sized(domain.int_range("dim")));
  c.block_q = pick_tile(draw, s.nq, domain.int_range("block_q"));
  c.block_k = pick_tile(draw, s.nk, domain.int_range("block_k"));
  c.dtype = dtype_named(pick(draw, domain.choices("dtypes")));
  if (draw.chance(domain.real("custom_scale_rate"))) {
    static const double fixed[] = {1.0, 0.5, 0.125, 2.0};
    const int64_t which = draw.any(IntRange{0, 4});
    c.scale = which < 4 ? fixed[which] : 0.05 + 1.5 * draw.any(RealRange{0, 1});
  }
  const std::string mask = pick(draw, domain.choices("masks"));
  const uint64_t seed = uint64_t(draw.any(IntRange{1, int64_t(1) << 40}));
  if (mask == "causal") {
    c.mask = MaskKind::causal;
  } else if (mask == "key_padding") {
    c.mask = MaskKind::key_padding;
    for (int b = 0; b < s.batch; ++b)
      c.key_lengths.push_back(draw.chance(domain.real("empty_batch_rate")) ? 0
                              : draw.chance(0.25)                          ? s.nk
                                                  : int(draw.any(IntRange{0, s.nk})));
  } else if (mask == "boolean") {
    c.mask = MaskKind::boolean;
    const double density = draw.any(domain.real_range("mask_density"));
    const double empty = domain.real("empty_row_rate");
    c.allowed.resize(size_t(s.batch) * s.nq * s.nk);
    for (size_t row = 0; row < size_t(s.batch) * s.nq; ++row) {
      const bool hidden = rng::uniform(seed, 30, row) < empty;
      for (int j = 0; j < s.nk; ++j)
        c.allowed[row * s.nk + j] = !hidden && rng::uniform(seed, 31, row * s.nk + j) < density;
    }
  }
  const std::string kind = pick(draw, domain.choices("values"));
  const double magnitude = draw.any(domain.real_range("large_magnitude"));
  const double growth = draw.any(domain.real_range("key_growth"));
  const bool large_v = draw.chance(0.5), same_keys = draw.chance(0.5);
  // Drawn for its own kind only, so the other kinds draw what they did.
  const double peak =
      kind == "masked_peaks" ? std::pow(10.0, draw.any(domain.real_range("log10_peak_score"))) : 0;
  if (kind == "pinned_grads") pinned_scale(c, seed);
  if (hollow && hollow(c)) return c;
  if (backward) c.d_out.resize(s.q_size());
  fill_values(c, kind, magnitude, growth, peak, large_v, same_keys, seed);
  return c;
}

}  // namespace

template <bool B>
Case CaseTraits<B>::build(Draw& draw, const Values& domain) {
  return build_case(draw, domain, B);
}
template <bool B>
Case CaseTraits<B>::build(Draw& draw, const Values& domain, const std::function<bool(const Case&)>& hollow) {
  return build_case(draw, domain, B, hollow);
}

// The members defined here, for both families (not the whole class: once
// files share a translation unit, KPROP_UNITY, each member is instantiated once).
template Case CaseTraits<false>::build(Draw&, const Values&);
template Case CaseTraits<true>::build(Draw&, const Values&);
template Case CaseTraits<false>::build(Draw&, const Values&, const std::function<bool(const Case&)>&);
template Case CaseTraits<true>::build(Draw&, const Values&, const std::function<bool(const Case&)>&);

}  // namespace kprop::attention
