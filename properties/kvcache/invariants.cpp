// KV cache invariants. Comparisons between fp64 caches use a tight tolerance
// (only the summation order differs: online softmax over tiles against a
// two-pass softmax). A target with an int8 cache is held to the same
// tolerance wherever both sides see the same quantized cache (itself under
// another layout, chunking, batch or poison; the reference on dequantized
// K/V), and to the derived quantization bound where the other side is fp64.
//
// The int8 bound, per output element (token t, query head h, channel d):
//   with per-channel scales sk, sv (range / 127), every dequantized key and
//   value is within half a step of the true one, so each score moves by at
//   most eps = alpha * sum_c |q_c| sk[c] / 2 (alpha = 1/sqrt(D)). Softmax
//   weights then change by a factor within [e^-2eps, e^2eps] and
//   sum_j |p'_j - p_j| <= 2 tanh(eps). Writing
//     o' - o = sum_j (p'_j - p_j)(v_j - m) + sum_j p'_j (v'_j - v_j)
//   with m the midrange of the visible v_j[d] (range R_d):
//     |o' - o| <= R_d tanh(eps) + sv[d] / 2.
//
// f32, f16 and bf16 cases (kernels/kvcache/kvcache.h, Precision). The
// reference runs in fp64 on the same inputs as the cache holds them (Q and
// the rounded K/V), so a correct target's error has two sources: f32
// arithmetic and the rounding of its outputs to the dtype. Per output element
// (token t, n = t + 1 visible keys, query head h, channel d), with eps =
// 2^-24 (f32's unit roundoff), smax = max_j |q|·|k_j| / sqrt(D) (the largest
// score magnitude), vmax_d = max_j |v_j[d]|, o the reference output, u the
// storage unit roundoff (2^-24 f32, 2^-11 f16, 2^-8 bf16) and tau half the
// dtype's smallest subnormal:
//   scores: each dot product of D terms and the scale, (D + 2) eps smax;
//     s_j - m and the rescale exponents m_k - m_k+1 (they telescope to at
//     most 2 smax in all): 4 eps smax; the exps and the <= n rescale
//     products: 3n + 3 eps; so each weight p_j carries a relative error
//     eta <= eps (2 (D + 2) smax + 4 smax + 3n + 3);
//   sums: the numerator sum_j p_j v_j and l = sum_j p_j each add n terms and
//     are rescaled <= n times: a further 2n + 2 eps relative per term;
//   o = N / l: weights perturbed by theta_j in N and phi_j in l give
//     |o^ - o| <= (max theta + max phi) vmax_d, plus eps |o| for the division:
//     e32 = 2 eps (2 (D + 2) smax + 4 smax + 5n + 5) vmax_d + eps vmax_d;
//   store: |round(o32) - o32| <= u |o32| + tau, |o32| <= |o| + e32.
// So |o^ - o| <= floor = u |o| + tau + (1 + u) f32_k e32, f32_k (spec
// parameter, default 2) covering the second-order terms left out. Against
// the reference (matches_reference) the allowed error is that floor plus
// naive_k × the same-precision naive baseline's own error there (naive():
// the reference's two-pass computation in f32, stored in the dtype). Two
// runs of the target (the metamorphic invariants) each lie within the floor
// of the reference: they may differ by twice it. The value hull widens by
// the floor. f64 cases keep the fp64 tolerances (no floor).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "kprop/tolerance.h"
#include "properties/kvcache/family.h"

namespace kprop::kvcache {

// The derived int8 bound (header comment) for every output element.
std::vector<std::vector<double>> int8_bound(const Case& c) {
  const size_t D = static_cast<size_t>(c.head_dim), Hq = static_cast<size_t>(c.q_heads());
  const size_t Hkv = static_cast<size_t>(c.kv_heads), g = static_cast<size_t>(c.group);
  const double alpha = 1 / std::sqrt(static_cast<double>(D));
  const ChannelRanges s = int8_scales(c);
  std::vector<std::vector<double>> bound;
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    const auto data = shared_sequence_data(c, b);
    const Tensors& x = *data;
    const size_t T = static_cast<size_t>(c.seqs[b].tokens());
    std::vector<double> lo(Hkv * D, INFINITY), hi(Hkv * D, -INFINITY), out(T * Hq * D);
    for (size_t t = 0; t < T; ++t) {
      for (size_t i = 0; i < Hkv * D; ++i) {
        lo[i] = std::min(lo[i], x.v[t * Hkv * D + i]);
        hi[i] = std::max(hi[i], x.v[t * Hkv * D + i]);
      }
      for (size_t h = 0; h < Hq; ++h) {
        const size_t kv = h / g;
        double eps = 0;
        for (size_t d = 0; d < D; ++d) eps += std::fabs(x.q[(t * Hq + h) * D + d]) * s.k[kv * D + d] / 2;
        eps *= alpha;
        for (size_t d = 0; d < D; ++d) {
          const size_t ch = kv * D + d;
          out[(t * Hq + h) * D + d] = (hi[ch] - lo[ch]) * std::tanh(eps) + s.v[ch] / 2;
        }
      }
    }
    bound.push_back(std::move(out));
  }
  return bound;
}
std::vector<std::vector<double>> f32_error(const Case& c) {
  const size_t D = static_cast<size_t>(c.head_dim), Hq = static_cast<size_t>(c.q_heads());
  const size_t Hkv = static_cast<size_t>(c.kv_heads), g = static_cast<size_t>(c.group);
  const double alpha = 1 / std::sqrt(static_cast<double>(D)), eps = 0x1p-24;
  std::vector<std::vector<double>> error(c.seqs.size());
  if (c.dtype == DType::f64) return error;
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    const size_t T_ = static_cast<size_t>(c.seqs[b].tokens());
    std::vector<double>& out = error[b];
    out.assign(T_ * Hq * D, 0.0);
    const auto data = shared_stored_data(c, b);
    const Tensors& x = *data;
    std::vector<double> vmax(Hkv * D, 0.0);
    for (size_t t = 0; t < T_; ++t) {
      for (size_t i = 0; i < Hkv * D; ++i) vmax[i] = std::max(vmax[i], std::fabs(x.v[t * Hkv * D + i]));
      for (size_t h = 0; h < Hq; ++h) {
        const double* q = &x.q[(t * Hq + h) * D];
        double top = 0;
        for (size_t j = 0; j <= t; ++j) {
          const double* k = &x.k[(j * Hkv + h / g) * D];
          double s = 0;
          for (size_t d = 0; d < D; ++d) s += std::fabs(q[d] * k[d]);
          top = std::max(top, alpha * s);
        }
        const double n = static_cast<double>(t + 1);
        const double rel = 2 * eps * (2 * (double(D) + 2) * top + 4 * top + 5 * n + 5) + eps;
        for (size_t d = 0; d < D; ++d) out[(t * Hq + h) * D + d] = rel * vmax[h / g * D + d];
      }
    }
  }
  return error;
}

// The derived floor (header comment) of every output element of a non-f64
// case, from the reference's outputs; zeros for f64 cases.
std::vector<std::vector<double>> storage_floor(const Case& c, const Result& ref, double f32_k,
                                               const std::vector<std::vector<double>>& e32) {
  const size_t D = static_cast<size_t>(c.head_dim), Hq = static_cast<size_t>(c.q_heads());
  const double u = storage_roundoff(c.dtype), tau = storage_tiny(c.dtype);
  std::vector<std::vector<double>> floor;
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    const size_t T_ = static_cast<size_t>(c.seqs[b].tokens());
    std::vector<double> out(T_ * Hq * D, 0.0);
    if (c.dtype == DType::f64 || b >= ref.out.size() || ref.out[b].size() != out.size() || b >= e32.size() ||
        e32[b].size() != out.size()) {
      floor.push_back(std::move(out));
      continue;
    }
    for (size_t i = 0; i < out.size(); ++i) {
      const double o = std::fabs(ref.out[b][i]);
      out[i] = u * (std::isfinite(o) ? o : 0.0) + tau + (1 + u) * f32_k * e32[b][i];
    }
    floor.push_back(std::move(out));
  }
  return floor;
}
std::vector<std::vector<double>> storage_floor(const Case& c, const Result& ref, double f32_k) {
  return storage_floor(c, ref, f32_k, f32_error(c));
}

namespace {

using T = Trial<Traits>;
using Bound = std::vector<std::vector<double>>;  // per sequence, like Result::out

// The fp64 tolerance `tol` (field::tolerance) and the f32/f16/bf16 floor's parameters.
Schema kv_params(double atol, double rtol, const char* why, bool naive = false) {
  Schema s = {
      field::tolerance(atol, rtol, why, "absolute tolerance (all dtypes)", "relative tolerance (all dtypes)"),
      field::real("f32_k", 2, 1, 1e3,
                  "f32/f16/bf16 cases: multiple of the first-order f32 error bound in the derived "
                  "floor (properties/kvcache/invariants.cpp)")};
  if (naive)
    s.push_back(field::real("naive_k", 1, 0, 1e3,
                            "f32/f16/bf16 cases: multiple of the naive same-precision baseline's error "
                            "allowed on top of the floor"));
  return s;
}

// The extra allowance of a non-f64 case: `times` × the derived floor (empty for f64 cases).
Bound half_bound(T& t, const Values& p, double times) {
  const Case& c = t.input();
  if (c.dtype == DType::f64) return {};
  Bound f = storage_floor(c, t.reference(), p.real("f32_k"), t.once<f32_error>());
  for (auto& row : f)
    for (double& x : row) x *= times;
  return f;
}

// a + b elementwise (either may be empty: none).
Bound add(Bound a, const Bound& b) {
  if (a.empty()) return b;
  for (size_t s = 0; s < a.size() && s < b.size(); ++s)
    for (size_t i = 0; i < a[s].size() && i < b[s].size(); ++i) a[s][i] += b[s][i];
  return a;
}

const char* kFp64 = "fp64 against fp64: only the summation order differs";

// Where element i of sequence b's output sits.
std::string locate(const Case& c, size_t b, size_t i) {
  const size_t D = static_cast<size_t>(c.head_dim), Hq = static_cast<size_t>(c.q_heads());
  const size_t t = i / (Hq * D);
  const Sequence& s = c.seqs[b];
  return fmt::format("sequence {} ({} token {}), head {}, channel {}", b,
                     t < static_cast<size_t>(s.prompt) ? "prompt" : "decode", t, i / D % Hq, i % D);
}

// got ~ want elementwise: |got - want| <= atol + rtol |want| (+ bound), NaN
// and infinities equal. `what` names the two sides for the message.
Verdict agree(const Case& c, const Result& got, const Result& want, const Values& p, const Bound* bound,
              const std::string& what) {
  const double atol = p.real("tol.atol"), rtol = p.real("tol.rtol");
  if (got.out.size() != want.out.size())
    return Verdict::fail(fmt::format("{}: {} sequences vs {}", what, got.out.size(), want.out.size()));
  double ratio = 0;
  for (size_t b = 0; b < want.out.size(); ++b) {
    const auto &g = got.out[b], &w = want.out[b];
    if (g.size() != w.size())
      return Verdict::fail(fmt::format("{}: sequence {} has {} outputs vs {}", what, b, g.size(), w.size()));
    const bool bounded = bound && b < bound->size() && (*bound)[b].size() == w.size();
    for (size_t i = 0; i < w.size(); ++i) {
      const double allowed = allowed_error(atol, rtol, std::fabs(w[i])) + (bounded ? (*bound)[b][i] : 0.0);
      const double err = std::fabs(g[i] - w[i]);
      // Non-finite values agree only with the same (same_nonfinite): NaN
      // with NaN, an infinity with itself (atol + rtol·inf would allow any
      // value next to an infinite `want`, and inf - inf is NaN).
      const bool finite = std::isfinite(g[i]) && std::isfinite(w[i]);
      if (finite ? !(err <= allowed) : !same_nonfinite(g[i], w[i]))
        return Verdict::fail(fmt::format("{}: {}: {} vs {} (error {:.3g} > allowed {:.3g})", what,
                                         locate(c, b, i), g[i], w[i], err, allowed),
                             {{"sequence", double(b)},
                              {"got", g[i]},
                              {"want", w[i]},
                              {"abs_error", err},
                              {"allowed", allowed}});
      if (finite) ratio = std::max(ratio, error_ratio(err, allowed));
    }
  }
  return Verdict::pass({{kErrorRatio, ratio}});
}

// agree() with a non-f64 case's floor: `times` × the floor on top of the
// tolerance (2: two target runs, each within the floor of the reference).
Verdict agree_t(T& t, const Result& got, const Result& want, const Values& p, double times,
                const std::string& what) {
  const Bound b = half_bound(t, p, times);
  return agree(t.input(), got, want, p, b.empty() ? nullptr : &b, what);
}

Verdict matches_reference(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& got = t.target();
  if (got.int8_cache)
    return agree(c, got, reference_dequantized(c), p, nullptr,
                 "target vs the reference on the dequantized int8 cache");
  if (c.dtype == DType::f64) return agree(c, got, t.reference(), p, nullptr, "target vs full recomputation");
  // Floor plus naive_k × the naive same-precision baseline's error, per element.
  // The naive error against the family's own reference (Trial::own_reference):
  // another oracle's difference from it is no rounding.
  const Result& ref = t.reference();
  const Result& own = t.own_reference();
  const Result base = naive(c);
  Bound b = half_bound(t, p, 1);
  const double k = p.real("naive_k");
  for (size_t s = 0; s < b.size() && s < base.out.size() && s < own.out.size(); ++s)
    for (size_t i = 0; i < b[s].size() && i < base.out[s].size() && i < own.out[s].size(); ++i) {
      const double e = std::fabs(base.out[s][i] - own.out[s][i]);
      if (std::isfinite(e)) b[s][i] += k * e;
    }
  return agree(
      c, got, ref, p, &b,
      fmt::format("target vs full recomputation ({}: derived floor + naive baseline)", dtype_name(c.dtype)));
}

Verdict int8_error_bound(T& t, const Values& p) {
  const Case& c = t.input();
  const Bound bound = add(int8_bound(c), half_bound(t, p, 1));
  return agree(c, t.target(), t.reference(), p, &bound, "target vs fp64 reference under the int8 bound");
}

// The case under another paged layout: page size and a pool in identity or reversed order.
Case relayout(Case c, int page, bool reversed) {
  c.page_size = page;
  c.pool.clear();
  c = fit_pool(std::move(c));
  if (reversed) std::reverse(c.pool.begin(), c.pool.end());
  return c;
}

// A run that keeps an int8 cache is held to the reference on the
// dequantized cache (matches_reference's check): the cache's values do not
// depend on the layout, so every layout must give that output to the
// tolerance. (Against the fp64 contiguous run under the int8 error bound,
// about ±0.75 of the value range for sharp attention, a layout bug passed.)
Verdict paged_matches_contiguous(T& t, const Values& p) {
  const Case& c = t.input();
  std::optional<Result> want, dequantized;  // each made when a run first needs it
  const Bound bound = half_bound(t, p, 2);
  const Bound* b = bound.empty() ? nullptr : &bound;
  auto check = [&](const Result& run, const std::string& layout) {
    if (!run.int8_cache) {
      if (!want) want = contiguous(c);
      return agree(c, run, *want, p, b, layout + " vs contiguous");
    }
    if (!dequantized) dequantized = reference_dequantized(c);
    return agree(c, run, *dequantized, p, nullptr,
                 layout + " vs the reference on the dequantized int8 cache");
  };
  Verdict v = check(t.target(), fmt::format("page {}, case pool", c.page_size));
  if (v.outcome == Outcome::fail) return v;
  int longest = 0;
  for (const Sequence& s : c.seqs) longest = std::max(longest, s.tokens());
  for (const auto& [page, reversed] : {std::pair{1, true}, std::pair{longest, false}}) {
    v = both(v, check(t.run_target(relayout(c, page, reversed)),
                      fmt::format("page {}, {} pool", page, reversed ? "reversed" : "identity")));
    if (v.outcome == Outcome::fail) return v;
  }
  return v;
}

Verdict chunked_matches_full_prefill(T& t, const Values& p) {
  const Case& c = t.input();
  int longest = 0;
  for (const Sequence& s : c.seqs) longest = std::max(longest, s.prompt);
  Case full = c;
  full.chunk = longest;
  const Result want = t.run_target(fit_pool(full));
  Verdict v = agree_t(t, t.target(), want, p, 2, fmt::format("chunk {} vs one-chunk prefill", c.chunk));
  if (v.outcome == Outcome::fail) return v;
  Case ones = c;
  ones.chunk = 1;
  return both(v, agree_t(t, t.run_target(fit_pool(ones)), want, p, 2, "chunk 1 vs one-chunk prefill"));
}

Verdict sequence_independence(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& batch = t.target();
  const Bound twice = half_bound(t, p, 2);
  Verdict v = Verdict::pass();
  for (size_t b = 0; b < c.seqs.size() && c.seqs.size() > 1; ++b) {
    Case alone = c;
    alone.seqs = {c.seqs[b]};
    Result one = t.run_target(alone);
    Result mine;
    mine.out = {batch.out.at(b)};
    const Bound mine_bound = twice.empty() ? Bound{} : Bound{twice.at(b)};
    v = both(v, agree(alone, mine, one, p, mine_bound.empty() ? nullptr : &mine_bound,
                      fmt::format("sequence {} in the batch vs alone", b)));
    if (v.outcome == Outcome::fail) return v;
  }
  Case other = c;
  other.poison = c.poison == Poison::nan ? Poison::huge : Poison::nan;
  return both(v, agree(c, t.run_target(other), batch, p, twice.empty() ? nullptr : &twice,
                       "poison swapped vs the case's poison"));
}

Verdict decode_matches_prefill(T& t, const Values& p) {
  const Case& c = t.input();
  Case prefilled = c, decoded = c;
  for (Sequence& s : prefilled.seqs) s = {s.tokens(), 0, s.arrive, s.seed};
  for (Sequence& s : decoded.seqs) s = {1, s.tokens() - 1, s.arrive, s.seed};
  const Result want = t.run_target(fit_pool(prefilled));
  Verdict v = agree_t(t, t.target(), want, p, 2, "case split vs every token prefilled");
  if (v.outcome == Outcome::fail) return v;
  return both(v, agree_t(t, t.run_target(fit_pool(decoded)), want, p, 2,
                         "one-token prompt then decode vs every token prefilled"));
}

// Attention averages values: every output lies within the visible values'
// range per channel (widened by half a per-channel int8 step for int8 caches,
// by the derived floor for f32/f16/bf16 cases).
Verdict output_in_value_hull(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  const size_t D = static_cast<size_t>(c.head_dim), Hq = static_cast<size_t>(c.q_heads());
  const size_t Hkv = static_cast<size_t>(c.kv_heads), g = static_cast<size_t>(c.group);
  const ChannelRanges s = r.int8_cache ? int8_scales(c) : ChannelRanges{};  // read for int8 caches only
  const double atol = p.real("tol.atol"), rtol = p.real("tol.rtol");
  const Bound floor = half_bound(t, p, 1);  // f32/f16/bf16 cases: f32 arithmetic and the output's store
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    const auto data = shared_stored_data(c, b);
    const Tensors& x = *data;
    std::vector<double> lo(Hkv * D, INFINITY), hi(Hkv * D, -INFINITY);
    for (size_t tok = 0; tok < static_cast<size_t>(c.seqs[b].tokens()); ++tok) {
      for (size_t i = 0; i < Hkv * D; ++i) {
        lo[i] = std::min(lo[i], x.v[tok * Hkv * D + i]);
        hi[i] = std::max(hi[i], x.v[tok * Hkv * D + i]);
      }
      for (size_t h = 0; h < Hq; ++h)
        for (size_t d = 0; d < D; ++d) {
          const size_t ch = h / g * D + d, i = (tok * Hq + h) * D + d;
          // Absolute part: half an int8 step (int8 caches) + atol.
          const double widen =
              allowed_error((r.int8_cache ? s.v[ch] / 2 : 0) + atol, rtol, std::max(-lo[ch], hi[ch])) +
              (floor.empty() ? 0.0 : floor[b][i]);
          const double o = r.out.at(b).at(i);
          if (!(o >= lo[ch] - widen && o <= hi[ch] + widen))
            return Verdict::fail(
                fmt::format("{}: output {:.17g} outside the visible values' range [{:.17g}, {:.17g}]",
                            locate(c, b, i), o, lo[ch], hi[ch]),
                {{"sequence", double(b)}, {"output", o}, {"min", lo[ch]}, {"max", hi[ch]}});
        }
    }
  }
  return Verdict::pass();
}

}  // namespace

void register_invariants(FamilyDef<Traits>& f) {
  f.invariant({"matches_reference",
               "every token's output equals full recomputation (int8 caches: on the dequantized K/V; "
               "f32/f16/bf16: within the derived floor + naive_k x the naive same-precision error)",
               kv_params(1e-10, 1e-10, kFp64, true)},
              matches_reference);
  f.invariant(
      {"int8_error_bound", "error against the fp64 reference within R_d tanh(eps) + sv[d]/2 (derived bound)",
       kv_params(1e-12, 1e-9, "slack for fp64 rounding on top of the bound")},
      int8_error_bound);
  f.invariant({"paged_matches_contiguous",
               "the case's, a 1-token reversed and a one-block-per-sequence layout all equal the contiguous "
               "cache (an int8 cache: the reference on the dequantized cache)",
               kv_params(1e-10, 1e-10, kFp64)},
              paged_matches_contiguous);
  f.invariant({"chunked_matches_full_prefill", "the case's chunk size and chunk 1 equal a one-chunk prefill",
               kv_params(1e-10, 1e-10, kFp64)},
              chunked_matches_full_prefill);
  f.invariant({"sequence_independence",
               "each sequence's output equals its output alone; the poison in unused slots changes nothing",
               kv_params(1e-10, 1e-10, kFp64)},
              sequence_independence);
  f.invariant({"decode_matches_prefill",
               "outputs do not depend on where the prompt ends: all-prefill and 1-token-prompt splits agree",
               kv_params(1e-10, 1e-10, kFp64)},
              decode_matches_prefill);
  f.invariant({"output_in_value_hull", "each output lies within the range of the values its token sees",
               kv_params(1e-12, 1e-12, "fp64 rounding of a convex combination")},
              output_in_value_hull);
}

}  // namespace kprop::kvcache
