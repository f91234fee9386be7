#include "properties/attention/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <tuple>

#include "kprop/case_yaml.h"
#include "kprop/errors.h"
#include "kprop/half.h"
#include "kprop/rng.h"

namespace kprop::attention {

const Choices kDtypes = {"f32", "f64", "f16", "bf16"};
const Choices kMasks = {"none", "causal", "key_padding", "boolean"};
// Value distributions (per case, for Q, K, V and dO):
//   normal         N(0, 1);
//   large          Q, K scaled by `large_magnitude` (scores ~ its square: an
//                  unguarded softmax overflows), V sometimes too;
//   growing_keys   keys drift along one direction that queries share, so the
//                  scores rise by `key_growth` from the first key to the last
//                  and the running max rises tile after tile;
//   integer        integers in [-3, 3] (exact products, ties in the scores);
//   constant_rows  every row constant (ties everywhere), sometimes every key equal.
//   near_uniform   tiny scores (P close to 1/Nk) and V around 1: the running
//                  sum l and the P·V accumulator grow like Nk, so an
//                  accumulator kept in f16/bf16 rounds at every key;
//   wide           V spread over 2^0..2^12 (up to 65504 in magnitude for any
//                  dtype): the unnormalized P·V accumulator passes f16's max
//                  after a few keys while O itself stays in range. The
//                  backward scales dO down by as much, so dP = dO·Vᵀ and
//                  the gradients stay inside every dtype's range.
// Values are rounded to the case's dtype, never past its largest finite value.
const Choices kValues = {"normal",        "large",        "growing_keys", "integer",
                         "constant_rows", "near_uniform", "wide"};

template <bool B>
Schema CaseTraits<B>::domain_schema() {
  return {
      field::int_range("batch", {1, 2}, 1, 64, "batch size B"),
      field::int_range("heads_kv", {1, 3}, 1, 64, "kv heads Hkv"),
      field::int_range("group", {1, 3}, 1, 64, "query heads per kv head g (Hq = g·Hkv; g > 1 is GQA)"),
      field::int_range("nq", {1, 40}, 1, 4096, "query length Nq"),
      field::int_range("nk", {1, 40}, 1, 4096, "key length Nk"),
      field::real("same_length_rate", 0.25, 0, 1, "probability that Nk = Nq (otherwise drawn on its own)"),
      field::int_range("dim", {1, 24}, 1, 1024, "head dimension D (odd ones included)"),
      field::int_range("block_q", {1, 32}, 1, 4096,
                       "query tile Bq; drawn as a divisor of Nq, a non-divisor, >= Nq, or 1"),
      field::int_range("block_k", {1, 32}, 1, 4096, "key tile Bk; drawn like block_q against Nk"),
      field::choices("dtypes", kDtypes, kDtypes, "precisions to draw (the case's dtype)"),
      field::choices("masks", kMasks, kMasks, "mask kinds to draw"),
      field::real("empty_batch_rate", 0.2, 0, 1, "key_padding: probability that a batch has key length 0"),
      field::real_range("mask_density", {0.1, 0.9}, 0, 1, "boolean: probability that a key is visible"),
      field::real("empty_row_rate", 0.15, 0, 1, "boolean: probability that a query row is fully masked"),
      field::choices("values", kValues, kValues, "value distributions to draw"),
      field::real_range("large_magnitude", {6, 30}, 1, 1e4, "large: scale of Q and K entries"),
      field::real_range("key_growth", {20, 400}, 0, 1e6,
                        "growing_keys: score rise from the first key to the last"),
      field::real("custom_scale_rate", 0.2, 0, 1, "probability of a scale other than 1/sqrt(D)"),
  };
}

namespace {

DType dtype_named(const std::string& name) {
  DType d = DType::f64;
  if (parse_dtype(name, d)) return d;
  throw std::logic_error("attention: unknown dtype " + name);
}
// Shrinking order: f64 < f32 < bf16 < f16 (fewer roundings first).
int dtype_rank(DType d) {
  return d == DType::f64 ? 0 : d == DType::f32 ? 1 : d == DType::bf16 ? 2 : 3;
}

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

size_t q_at(const Shape& s, int b, int h, int i) {
  return ((size_t(b) * s.heads_q + h) * s.nq + i) * s.dim;
}
size_t kv_at(const Shape& s, int b, int h, int j) {
  return ((size_t(b) * s.heads_kv + h) * s.nk + j) * s.dim;
}

void fill_values(Case& c, const std::string& kind, double magnitude, double growth, bool large_v,
                 bool same_keys, uint64_t seed) {
  const Shape& s = c.shape;
  auto normal = [&](int stream, size_t i) { return rng::normal(seed, uint64_t(stream), i); };
  auto fill = [&](std::vector<double>& t, size_t n, int stream, double sigma) {
    t.resize(n);
    for (size_t i = 0; i < n; ++i) t[i] = sigma * normal(stream, i);
  };
  fill(c.q, s.q_size(), 1, 1);
  fill(c.k, s.kv_size(), 2, 1);
  fill(c.v, s.kv_size(), 3, 1);
  if (!c.d_out.empty()) fill(c.d_out, s.q_size(), 4, 1);
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
        std::vector<double> u(size_t(s.dim));
        double norm = 0;
        for (int d = 0; d < s.dim; ++d)
          norm += (u[size_t(d)] = normal(5, (size_t(b) * s.heads_kv + kvh) * s.dim + d)) * u[size_t(d)];
        norm = std::sqrt(norm) + 1e-12;
        for (double& x : u) x /= norm;
        for (int j = 0; j < s.nk; ++j)
          for (int d = 0; d < s.dim; ++d) {
            double& x = c.k[kv_at(s, b, kvh, j) + d];
            x = 0.5 * x + step * j * u[size_t(d)];
          }
        for (int r = 0; r < s.group(); ++r)
          for (int i = 0; i < s.nq; ++i)
            for (int d = 0; d < s.dim; ++d)
              c.q[q_at(s, b, kvh * s.group() + r, i) + d] += along * u[size_t(d)];
      }
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
  for (auto* t : {&c.q, &c.k, &c.v, &c.d_out})
    for (double& x : *t) x = round_to(c.dtype, x);
}

template <typename Draw>
Case build_case(Draw& draw, const Values& domain, bool backward) {
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
  if (backward) c.d_out.resize(s.q_size());
  fill_values(c, kind, magnitude, growth, large_v, same_keys, seed);
  return c;
}

// ------------------------------------------------------------ shrinking
// A sub-case: the kept indices along every axis (members are positions
// within a GQA group, so the head map survives).
struct Selection {
  std::vector<int> batches, kv_heads, members, rows, cols, dims;
};

std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

Selection everything(const Case& c) {
  const Shape& s = c.shape;
  return {iota(s.batch), iota(s.heads_kv), iota(s.group()), iota(s.nq), iota(s.nk), iota(s.dim)};
}

Case select(const Case& c, const Selection& sel) {
  const Shape& s = c.shape;
  Case out = c;
  Shape& t = out.shape;
  t.batch = int(sel.batches.size());
  t.heads_kv = int(sel.kv_heads.size());
  t.heads_q = t.heads_kv * int(sel.members.size());
  t.nq = int(sel.rows.size());
  t.nk = int(sel.cols.size());
  t.dim = int(sel.dims.size());
  out.q.assign(t.q_size(), 0);
  out.d_out.assign(c.d_out.empty() ? 0 : t.q_size(), 0);
  out.k.assign(t.kv_size(), 0);
  out.v.assign(t.kv_size(), 0);
  for (int b = 0; b < t.batch; ++b)
    for (int kvh = 0; kvh < t.heads_kv; ++kvh) {
      const int ob = sel.batches[size_t(b)], okvh = sel.kv_heads[size_t(kvh)];
      for (int r = 0; r < int(sel.members.size()); ++r) {
        const int h = kvh * int(sel.members.size()) + r, oh = okvh * s.group() + sel.members[size_t(r)];
        for (int i = 0; i < t.nq; ++i)
          for (int d = 0; d < t.dim; ++d) {
            const size_t from = q_at(s, ob, oh, sel.rows[size_t(i)]) + sel.dims[size_t(d)];
            out.q[q_at(t, b, h, i) + d] = c.q[from];
            if (!c.d_out.empty()) out.d_out[q_at(t, b, h, i) + d] = c.d_out[from];
          }
      }
      for (int j = 0; j < t.nk; ++j)
        for (int d = 0; d < t.dim; ++d) {
          const size_t from = kv_at(s, ob, okvh, sel.cols[size_t(j)]) + sel.dims[size_t(d)];
          out.k[kv_at(t, b, kvh, j) + d] = c.k[from];
          out.v[kv_at(t, b, kvh, j) + d] = c.v[from];
        }
    }
  if (c.mask == MaskKind::key_padding) {
    out.key_lengths.clear();
    for (int ob : sel.batches) {
      int len = 0;
      for (int j : sel.cols) len += j < c.key_lengths[size_t(ob)];
      out.key_lengths.push_back(len);
    }
  }
  if (c.mask == MaskKind::boolean) {
    out.allowed.assign(size_t(t.batch) * t.nq * t.nk, 0);
    for (int b = 0; b < t.batch; ++b)
      for (int i = 0; i < t.nq; ++i)
        for (int j = 0; j < t.nk; ++j)
          out.allowed[(size_t(b) * t.nq + i) * t.nk + j] =
              c.allowed[(size_t(sel.batches[size_t(b)]) * s.nq + sel.rows[size_t(i)]) * s.nk +
                        sel.cols[size_t(j)]];
  }
  return out;
}

// Boldest first: keep one element, keep either half, drop one element.
std::vector<std::vector<int>> reductions(int n, bool singles) {
  std::vector<std::vector<int>> out;
  if (n <= 1) return out;
  if (singles)
    for (int x = 0; x < n; ++x) out.push_back({x});
  std::vector<int> all = iota(n);
  if (n > 2) {
    out.emplace_back(all.begin(), all.begin() + n / 2);
    out.emplace_back(all.begin() + n / 2, all.end());
  }
  if (n <= 128)
    for (int x = 0; x < n; ++x) {
      std::vector<int> v = all;
      v.erase(v.begin() + x);
      out.push_back(std::move(v));
    }
  return out;
}

using Edit = std::function<void(Case&)>;

// What every accepted shrink step must lower (lexicographically), so the
// greedy shrinker never cycles between edits: size, then masking, dtype,
// custom scale, tile count, non-integer values, total magnitude.
auto complexity(const Case& c) {
  const Shape& s = c.shape;
  int64_t masked = 0;
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.nq; ++i)
      for (int j = 0; j < s.nk; ++j) masked += !visible(c, b, i, j);
  int64_t fractional = 0;
  double magnitude = 0;
  for (const auto* t : {&c.q, &c.k, &c.v, &c.d_out})
    for (double x : *t) fractional += x != std::round(x), magnitude += std::fabs(x);
  const int64_t tiles = int64_t((s.nq + c.block_q - 1) / c.block_q) * ((s.nk + c.block_k - 1) / c.block_k);
  return std::tuple{int64_t(s.batch) * s.heads_q * s.nq * s.nk * s.dim,
                    int(c.mask),
                    masked,
                    dtype_rank(c.dtype),
                    int(c.scale != 0),
                    tiles,
                    c.block_q + c.block_k,
                    fractional,
                    magnitude};
}

std::vector<Edit> simplifications(const Case& c) {
  const Shape& s = c.shape;
  std::vector<Edit> edits;
  // Tiles: fewer of them (one tile), then canonical (no larger than N).
  edits.push_back([](Case& x) { x.block_q = x.shape.nq; });
  edits.push_back([](Case& x) { x.block_k = x.shape.nk; });
  edits.push_back([](Case& x) {
    x.block_q = std::min(x.block_q, x.shape.nq);
    x.block_k = std::min(x.block_k, x.shape.nk);
  });
  // Wider dtypes first (every value of a narrower one is exact in them).
  edits.push_back([](Case& x) { x.dtype = DType::f64; });
  if (is_half(c.dtype)) edits.push_back([](Case& x) { x.dtype = DType::f32; });
  edits.push_back([](Case& x) { x.scale = 0; });
  // Masks: none, then one batch or row at a time fully visible.
  edits.push_back([](Case& x) {
    x.mask = MaskKind::none;
    x.key_lengths.clear();
    x.allowed.clear();
  });
  if (c.mask == MaskKind::key_padding)
    for (int b = 0; b < s.batch; ++b)
      edits.push_back([b](Case& x) { x.key_lengths[size_t(b)] = x.shape.nk; });
  if (c.mask == MaskKind::boolean && size_t(s.batch) * s.nq <= 256)
    for (size_t row = 0; row < size_t(s.batch) * s.nq; ++row)
      edits.push_back([row](Case& x) {
        std::fill(x.allowed.begin() + long(row * x.shape.nk),
                  x.allowed.begin() + long((row + 1) * x.shape.nk), 1);
      });
  // Values: whole tensors zeroed, rounded to integers, halved; then single
  // elements of small tensors zeroed or rounded.
  for (auto member : {&Case::q, &Case::k, &Case::v, &Case::d_out}) {
    if ((c.*member).empty()) continue;
    edits.push_back([member](Case& x) { std::fill((x.*member).begin(), (x.*member).end(), 0.0); });
    edits.push_back([member](Case& x) {
      for (double& y : x.*member) y = std::round(y);
    });
    edits.push_back([member](Case& x) {
      for (double& y : x.*member) y = round_to(x.dtype, y / 2);
    });
  }
  for (auto member : {&Case::q, &Case::k, &Case::v, &Case::d_out})
    if ((c.*member).size() <= 48)
      for (size_t i = 0; i < (c.*member).size(); ++i) {
        edits.push_back([member, i](Case& x) { (x.*member)[i] = 0; });
        edits.push_back([member, i](Case& x) { (x.*member)[i] = std::round((x.*member)[i]); });
      }
  return edits;
}

}  // namespace

template <bool B>
Case CaseTraits<B>::build(Draw& draw, const Values& domain) {
  return build_case(draw, domain, B);
}

template <bool B>
rc::Seq<Case> CaseTraits<B>::shrinks(const Case& c, const Values& domain) {
  const Selection all = everything(c);
  std::vector<Selection> selections;
  auto along = [&](std::vector<int> Selection::*axis, int n, bool singles) {
    for (auto& kept : reductions(n, singles)) {
      Selection s = all;
      s.*axis = std::move(kept);
      selections.push_back(std::move(s));
    }
  };
  along(&Selection::batches, c.shape.batch, true);
  along(&Selection::kv_heads, c.shape.heads_kv, true);
  along(&Selection::members, c.shape.group(), true);
  // Queries and keys together first: where the domain ties Nk to Nq
  // (same_length_rate = 1) only these keep the case inside it.
  if (c.shape.nq == c.shape.nk)
    for (auto& kept : reductions(c.shape.nq, false)) {
      Selection s = all;
      s.rows = kept;
      s.cols = std::move(kept);
      selections.push_back(std::move(s));
    }
  along(&Selection::rows, c.shape.nq, false);
  along(&Selection::cols, c.shape.nk, false);
  along(&Selection::dims, c.shape.dim, true);
  auto structural = rc::seq::map(rc::seq::fromContainer(std::move(selections)),
                                 [c](const Selection& s) { return select(c, s); });
  std::vector<Edit> edits = simplifications(c);
  // One tile each, as close as the domain's tile ranges allow.
  const IntRange bq = domain.int_range("block_q"), bk = domain.int_range("block_k");
  edits.insert(edits.begin(), [bq, bk](Case& x) {
    x.block_q = int(bq.nearest(x.shape.nq));
    x.block_k = int(bk.nearest(x.shape.nk));
  });
  auto simpler = rc::seq::map(rc::seq::fromContainer(std::move(edits)), [c](const Edit& edit) {
    Case s = c;
    edit(s);
    return s;
  });
  return rc::seq::filter(rc::seq::concat(std::move(structural), std::move(simpler)),
                         [c, before = complexity(c)](const Case& s) {
                           return validate(s, B).empty() && complexity(s) < before;
                         });
}

template <bool B>
std::string CaseTraits<B>::in_domain(const Case& c, const Values& d) {
  const Shape& s = c.shape;
  const IntRange nk = d.int_range("nk");
  if (d.real("same_length_rate") >= 1 && s.nk != nk.nearest(s.nq))
    return fmt::format("nk = {} but same_length_rate = 1 ties it to nq = {}", s.nk, s.nq);
  if (d.real("custom_scale_rate") <= 0 && c.scale != 0)
    return fmt::format("scale {} but custom_scale_rate = 0", c.scale);
  return first_problem(
      {outside_int_range(d, "batch", s.batch), outside_int_range(d, "heads_kv", s.heads_kv),
       outside_int_range(d, "group", s.group()), outside_int_range(d, "nq", s.nq),
       outside_int_range(d, "nk", s.nk), outside_int_range(d, "dim", s.dim),
       outside_int_range(d, "block_q", c.block_q), outside_int_range(d, "block_k", c.block_k),
       outside_choices(d, "dtypes", dtype_name(c.dtype)), outside_choices(d, "masks", mask_name(c.mask))});
}

namespace {
// Doubles held at once by one trial: the inputs (Q, K, V, dO), three results
// (target, reference, naive: O or dQ of Q's size, LSE, dK, dV) and the four
// Nq×Nk matrices the reference materializes; plus the boolean mask in bytes.
double attention_bytes(double batch, double heads_kv, double group, double nq, double nk, double dim) {
  const double q = batch * heads_kv * group * nq * dim, kv = batch * heads_kv * nk * dim;
  const double scores = batch * heads_kv * group * nq * nk;
  return 8 * (2 * q + 2 * kv + 3 * (q + 2 * kv + batch * heads_kv * group * nq) + 4 * scores) +
         batch * nq * nk;
}
}  // namespace

template <bool B>
double CaseTraits<B>::case_bytes(const Case& c) {
  const Shape& s = c.shape;
  return attention_bytes(s.batch, s.heads_kv, s.group(), s.nq, s.nk, s.dim);
}

template <bool B>
CaseSize CaseTraits<B>::max_case_bytes(const Values& d) {
  const auto hi = [&](const char* key) { return d.int_range(key).hi; };
  return {attention_bytes(double(hi("batch")), double(hi("heads_kv")), double(hi("group")), double(hi("nq")),
                          double(hi("nk")), double(hi("dim"))),
          fmt::format("B {} x Hkv {} x group {} x Nq {} x Nk {} x D {}", hi("batch"), hi("heads_kv"),
                      hi("group"), hi("nq"), hi("nk"), hi("dim")),
          "batch, heads_kv, group, nq, nk or dim"};
}

// ------------------------------------------------------------ YAML
namespace {

// The shortest text that reads back (as a double, rounded to the dtype) to x.
std::string value_text(double x, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return fmt::format("{}", static_cast<float>(x));
    case DType::f16:
      return half::f16_text(half::f16_from_double(x));
    case DType::bf16:
      return half::bf16_text(half::bf16_from_double(x));
    case DType::f64:
      break;
  }
  return fmt::format("{}", x);
}

YAML::Node rows_node(const std::vector<double>& t, int dim, DType dtype) {
  YAML::Node rows(YAML::NodeType::Sequence);
  for (size_t r = 0; r < t.size() / size_t(dim); ++r) {
    YAML::Node row(YAML::NodeType::Sequence);
    for (int d = 0; d < dim; ++d) row.push_back(value_text(t[r * size_t(dim) + size_t(d)], dtype));
    rows.push_back(row);
  }
  return rows;
}

// f32 values are parsed as floats, f16/bf16 ones rounded from the double:
// the shortest text of either reads back exactly.
std::vector<double> read_rows(const YAML::Node& n, const char* key, int dim, DType dtype) {
  const YAML::Node rows = n[key];
  if (!rows || !rows.IsSequence())
    case_yaml::fail(rows ? rows : n, std::string("'") + key + "' must be a list of rows");
  std::vector<double> out;
  for (const auto& row : rows) {
    if (!row.IsSequence() || int(row.size()) != dim)
      case_yaml::fail(row, fmt::format("each row of '{}' must list dim = {} numbers", key, dim));
    for (const auto& x : row) {
      try {
        const double value = x.as<double>();
        out.push_back(dtype == DType::f32 && x.IsScalar() ? double(std::strtof(x.Scalar().c_str(), nullptr))
                                                          : round_to(dtype, value));
      } catch (const YAML::Exception&) {
        case_yaml::fail(x, std::string("'") + key + "' has a non-number");
      }
    }
  }
  return out;
}

}  // namespace

template <bool B>
YAML::Node CaseTraits<B>::to_yaml(const Case& c) {
  const Shape& s = c.shape;
  YAML::Node n(YAML::NodeType::Map);
  YAML::Node shape(YAML::NodeType::Map);
  shape["batch"] = s.batch;
  shape["heads_q"] = s.heads_q;
  shape["heads_kv"] = s.heads_kv;
  shape["nq"] = s.nq;
  shape["nk"] = s.nk;
  shape["dim"] = s.dim;
  n["shape"] = shape;
  YAML::Node tiles(YAML::NodeType::Map);
  tiles["q"] = c.block_q;
  tiles["k"] = c.block_k;
  n["tiles"] = tiles;
  n["dtype"] = dtype_name(c.dtype);
  if (c.scale != 0) n["scale"] = fmt::format("{}", c.scale);
  n["mask"] = mask_name(c.mask);
  if (c.mask == MaskKind::key_padding) n["key_lengths"] = case_yaml::list(c.key_lengths);
  if (c.mask == MaskKind::boolean) {
    YAML::Node rows(YAML::NodeType::Sequence);
    for (size_t r = 0; r < size_t(s.batch) * s.nq; ++r) {
      std::string row;
      for (int j = 0; j < s.nk; ++j) row += c.allowed[r * s.nk + j] ? '1' : '0';
      rows.push_back(row);
    }
    n["allowed"] = rows;
  }
  n["q"] = rows_node(c.q, s.dim, c.dtype);
  n["k"] = rows_node(c.k, s.dim, c.dtype);
  n["v"] = rows_node(c.v, s.dim, c.dtype);
  if (B) n["d_out"] = rows_node(c.d_out, s.dim, c.dtype);
  return n;
}

template <bool B>
Case CaseTraits<B>::from_yaml(const YAML::Node& n) {
  using case_yaml::read;
  if (B)
    case_yaml::expect_keys(
        n, {"shape", "tiles", "dtype", "scale", "mask", "key_lengths", "allowed", "q", "k", "v", "d_out"},
        "attention case");
  else
    case_yaml::expect_keys(
        n, {"shape", "tiles", "dtype", "scale", "mask", "key_lengths", "allowed", "q", "k", "v"},
        "attention case");
  Case c;
  const YAML::Node shape = n["shape"];
  if (!shape) case_yaml::fail(n, "missing 'shape'");
  case_yaml::expect_keys(shape, {"batch", "heads_q", "heads_kv", "nq", "nk", "dim"}, "shape");
  Shape& s = c.shape;
  s.batch = read<int>(shape, "batch");
  s.heads_q = read<int>(shape, "heads_q");
  s.heads_kv = read<int>(shape, "heads_kv");
  s.nq = read<int>(shape, "nq");
  s.nk = read<int>(shape, "nk");
  s.dim = read<int>(shape, "dim");
  for (int x : {s.batch, s.heads_q, s.heads_kv, s.nq, s.nk, s.dim})
    if (x < 1 || x > 1 << 16) case_yaml::fail(shape, "every dimension must be in [1, 65536]");
  const YAML::Node tiles = n["tiles"];
  if (!tiles) case_yaml::fail(n, "missing 'tiles'");
  case_yaml::expect_keys(tiles, {"q", "k"}, "tiles");
  c.block_q = read<int>(tiles, "q");
  c.block_k = read<int>(tiles, "k");
  const std::string dtype = read<std::string>(n, "dtype");
  if (std::find(kDtypes.begin(), kDtypes.end(), dtype) == kDtypes.end())
    case_yaml::fail(n["dtype"], "dtype must be one of " + join(kDtypes));
  c.dtype = dtype_named(dtype);
  c.scale = case_yaml::read_or<double>(n, "scale", 0.0);
  const std::string mask = read<std::string>(n, "mask");
  const auto it = std::find(kMasks.begin(), kMasks.end(), mask);
  if (it == kMasks.end())
    case_yaml::fail(n["mask"], "mask must be one of none, causal, key_padding, boolean");
  c.mask = static_cast<MaskKind>(it - kMasks.begin());
  if (n["key_lengths"]) c.key_lengths = case_yaml::read_list<int>(n, "key_lengths");
  if (n["allowed"]) {
    for (const std::string& row : case_yaml::read_list<std::string>(n, "allowed")) {
      if (int(row.size()) != s.nk || row.find_first_not_of("01") != std::string::npos)
        case_yaml::fail(n["allowed"],
                        fmt::format("each row of 'allowed' must be {} characters 0 or 1", s.nk));
      for (char ch : row) c.allowed.push_back(ch == '1');
    }
  }
  c.q = read_rows(n, "q", s.dim, c.dtype);
  c.k = read_rows(n, "k", s.dim, c.dtype);
  c.v = read_rows(n, "v", s.dim, c.dtype);
  if (B) c.d_out = read_rows(n, "d_out", s.dim, c.dtype);
  if (const std::string why = validate(c, B); !why.empty()) case_yaml::fail(n, why);
  return c;
}

template <bool B>
CaseStats CaseTraits<B>::stats(const Case& c) {
  const Shape& s = c.shape;
  return {int64_t(s.batch) * s.heads_q * s.nq * s.nk * s.dim, shape_text(c)};
}

std::string shape_text(const Case& c) {
  const Shape& s = c.shape;
  std::string mask = mask_name(c.mask);
  if (c.mask == MaskKind::key_padding) mask += fmt::format(" {}", fmt::join(c.key_lengths, ","));
  return fmt::format("B{} Hq{}/Hkv{} Nq{} Nk{} D{} tiles {}x{} {} {}{}", s.batch, s.heads_q, s.heads_kv, s.nq,
                     s.nk, s.dim, c.block_q, c.block_k, dtype_name(c.dtype), mask,
                     c.scale != 0 ? fmt::format(" scale {}", c.scale) : "");
}

Case permuted(const Case& c, const std::vector<int>& key_perm, const std::vector<int>& query_perm) {
  Selection sel = everything(c);
  sel.rows = query_perm;
  sel.cols = key_perm;
  return select(c, sel);
}

template struct CaseTraits<false>;
template struct CaseTraits<true>;

}  // namespace kprop::attention
