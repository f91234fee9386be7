// Ternary invariants. The quantizer checks recompute the contract's formulas
// from the case; the gradient checks build the dense gradients at the
// quantized point independently of any implementation's backward.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kprop/search.h"
#include "kprop/tolerance.h"
#include "properties/ternary/family.h"

namespace kprop::ternary {
namespace {

using T = Trial<Traits>;
constexpr double kF32Unit = 0x1p-24;  // unit roundoff of f32

bool is_integer(double v) {
  return std::isfinite(v) && v == std::nearbyint(v);
}

size_t at(int row, int cols, int col) {
  return static_cast<size_t>(row) * cols + col;
}

Verdict check_sizes(const Case& c, const Result& r) {
  const auto M = static_cast<size_t>(c.tokens), K = static_cast<size_t>(c.in_features),
             N = static_cast<size_t>(c.out_features);
  if (r.w_q.size() != N * K || r.x_q.size() != M * K || r.x_scale.size() != M || r.acc.size() != M * N ||
      r.y.size() != M * N || r.dx.size() != M * K || r.dw.size() != N * K)
    return Verdict::fail(fmt::format("result has the wrong sizes for tokens {}, in {}, out {}", M, K, N));
  return Verdict::pass();
}

Verdict weights_ternary(T& t, const Values&) {
  const Result& r = t.target();
  if (Verdict v = check_sizes(t.input(), r); v.outcome == Outcome::fail) return v;
  if (!(std::isfinite(r.w_scale) && r.w_scale > 0))
    return Verdict::fail(fmt::format("weight scale s = {} is not a positive finite number", r.w_scale),
                         {{"w_scale", r.w_scale}});
  if (!r.packing_problem.empty()) return Verdict::fail("packed weights: " + r.packing_problem);
  for (size_t i = 0; i < r.w_q.size(); ++i)
    if (!(r.w_q[i] == -1 || r.w_q[i] == 0 || r.w_q[i] == 1))
      return Verdict::fail(
          fmt::format("quantized weight {} is {}, not in {{-1, 0, +1}} (dequantized not in {{-s, 0, +s}})", i,
                      r.w_q[i]),
          {{"index", double(i)}, {"w_q", r.w_q[i]}});
  return Verdict::pass();
}

Verdict weight_scale_absmean(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  double sum = 0;
  for (double v : c.w) sum += std::fabs(v);
  const double mean = sum / static_cast<double>(c.w.size()), expected = std::max(mean, kEps);
  if (!within(r.w_scale, expected, 0, p.real("rtol")))
    return Verdict::fail(
        fmt::format("weight scale s = {:.17g}, expected max(mean|W|, eps) = max({:.17g}, {:g}) = {:.17g}",
                    r.w_scale, mean, kEps, expected),
        {{"w_scale", r.w_scale}, {"mean_abs_w", mean}, {"expected", expected}});
  return Verdict::pass();
}

Verdict activations_int8(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  if (Verdict v = check_sizes(c, r); v.outcome == Outcome::fail) return v;
  const int K = c.in_features;
  for (int tok = 0; tok < c.tokens; ++tok) {
    double amax = 0;
    for (int k = 0; k < K; ++k) amax = std::max(amax, std::fabs(c.x[at(tok, K, k)]));
    const double expected = 127.0 / std::max(amax, kEps), got = r.x_scale[static_cast<size_t>(tok)];
    if (!within(got, expected, 0, p.real("rtol")))
      return Verdict::fail(
          fmt::format("token {}: activation scale {:.17g}, expected 127 / max(max|x|, eps) = {:.17g}", tok,
                      got, expected),
          {{"token", double(tok)}, {"x_scale", got}, {"expected", expected}, {"absmax", amax}});
    double qmax = 0;
    for (int k = 0; k < K; ++k) {
      const double q = r.x_q[at(tok, K, k)];
      if (!(is_integer(q) && q >= -128 && q <= 127))
        return Verdict::fail(fmt::format("token {}: quantized activation {} is {}, not an int8", tok, k, q),
                             {{"token", double(tok)}, {"k", double(k)}, {"x_q", q}});
      qmax = std::max(qmax, std::fabs(q));
    }
    // The absmax entry lands on the end of the grid (absmax scaling uses the whole int8 range).
    if (amax >= kEps && qmax != 127)
      return Verdict::fail(
          fmt::format("token {}: max|x_q| = {}, the absmax entry must quantize to +-127", tok, qmax),
          {{"token", double(tok)}, {"max_abs_x_q", qmax}});
  }
  return Verdict::pass();
}

Verdict integer_part_exact(T& t, const Values&) {
  const Case& c = t.input();
  const Result& r = t.target();
  const Result& ref = t.reference();
  if (Verdict v = check_sizes(c, r); v.outcome == Outcome::fail) return v;
  const int K = c.in_features, N = c.out_features;
  struct Part {
    const char* name;
    const std::vector<double>& got;
    const std::vector<double>& want;
  };
  for (const Part& part :
       {Part{"w_q", r.w_q, ref.w_q}, Part{"x_q", r.x_q, ref.x_q}, Part{"acc", r.acc, ref.acc}})
    for (size_t i = 0; i < part.want.size(); ++i)
      if (!(part.got[i] == part.want[i]))
        return Verdict::fail(
            fmt::format("{}[{}] = {}, the reference has {}", part.name, i, part.got[i], part.want[i]),
            {{"index", double(i)}, {"got", part.got[i]}, {"reference", part.want[i]}});
  // The target's acc is the integer product of its own quantized operands.
  for (int tok = 0; tok < c.tokens; ++tok)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += r.x_q[at(tok, K, k)] * r.w_q[at(n, K, k)];
      if (!(r.acc[at(tok, N, n)] == acc))
        return Verdict::fail(
            fmt::format("acc[{}][{}] = {}, but x_q . w_q = {}", tok, n, r.acc[at(tok, N, n)], acc),
            {{"token", double(tok)}, {"out", double(n)}, {"acc", r.acc[at(tok, N, n)]}, {"expected", acc}});
    }
  return Verdict::pass();
}

Verdict output_matches_reference(T& t, const Values& p) {
  const Result& r = t.target();
  if (Verdict v = check_sizes(t.input(), r); v.outcome == Outcome::fail) return v;
  const std::vector<double>& want = t.reference().y;
  const ToleranceReport rep = compare_close(want, r.y, 0, p.real("rtol"));
  if (!rep.ok)
    return Verdict::fail("y " + rep.message,
                         {{"index", double(rep.worst_index)}, {"max_error", rep.target_error}});
  double ratio = 0;  // how close it came (kErrorRatio), over the finite elements
  for (size_t i = 0; i < want.size() && i < r.y.size(); ++i)
    if (std::isfinite(want[i]))
      ratio = std::max(ratio, error_ratio(std::fabs(r.y[i] - want[i]),
                                          allowed_error(0, p.real("rtol"), std::fabs(want[i]))));
  return Verdict::pass({{kErrorRatio, ratio}});
}

// Compares `got` with `want` where each entry's f32 error bound is
// k · u32 · (terms + 2) · magnitude (sum of |terms|).
Verdict within_f32_bound(const char* name, const std::vector<double>& got, const std::vector<double>& want,
                         const std::vector<double>& magnitude, int terms, double k) {
  double ratio = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double allowed = k * kF32Unit * (terms + 2) * magnitude[i];
    const double err = std::fabs(got[i] - want[i]);
    ratio = std::max(ratio, error_ratio(err, allowed));
    if (!(err <= allowed))
      return Verdict::fail(
          fmt::format(
              "{}[{}] = {:.9g}, the dense gradient at the quantized point is {:.9g} (error {:.3g} > {:.3g})",
              name, i, got[i], want[i], err, allowed),
          {{"index", double(i)}, {"got", got[i]}, {"dense", want[i]}, {"abs_error", err}});
  }
  return for_output(name, Verdict::pass({{kErrorRatio, ratio}}));
}

Verdict ste_matches_dense(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  const Result& ref = t.reference();
  if (Verdict v = check_sizes(c, r); v.outcome == Outcome::fail) return v;
  const int M = c.tokens, K = c.in_features, N = c.out_features;
  // The quantized point: x̃ = x_q / a_t, W̃ = s · w_q (the reference's, checked elsewhere).
  std::vector<double> xt(ref.x_q.size()), wt(ref.w_q.size());
  for (int tok = 0; tok < M; ++tok)
    for (int k = 0; k < K; ++k)
      xt[at(tok, K, k)] = ref.x_q[at(tok, K, k)] / ref.x_scale[static_cast<size_t>(tok)];
  for (size_t i = 0; i < wt.size(); ++i) wt[i] = ref.w_scale * ref.w_q[i];
  // Dense gradients of y = x̃ W̃ᵀ: dx̃ = dy W̃, dW̃ = dyᵀ x̃.
  std::vector<double> dx(xt.size()), dx_mag(xt.size()), dw(wt.size()), dw_mag(wt.size());
  for (int tok = 0; tok < M; ++tok)
    for (int n = 0; n < N; ++n) {
      const double g = c.dy[at(tok, N, n)];
      for (int k = 0; k < K; ++k) {
        dx[at(tok, K, k)] += g * wt[at(n, K, k)];
        dx_mag[at(tok, K, k)] += std::fabs(g * wt[at(n, K, k)]);
        dw[at(n, K, k)] += g * xt[at(tok, K, k)];
        dw_mag[at(n, K, k)] += std::fabs(g * xt[at(tok, K, k)]);
      }
    }
  return both(within_f32_bound("dx", r.dx, dx, dx_mag, N, p.real("k")),
              within_f32_bound("dW", r.dw, dw, dw_mag, M, p.real("k")));
}

// <dy, y> = <dx, x̃> = <dW, W̃> for the target's own quantized point: the
// backward is the adjoint of the forward it computed.
Verdict ste_adjoint(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  if (Verdict v = check_sizes(c, r); v.outcome == Outcome::fail) return v;
  const int M = c.tokens, K = c.in_features, N = c.out_features;
  double dyy = 0, dxx = 0, dww = 0, mag = 0;
  for (int tok = 0; tok < M; ++tok)
    for (int n = 0; n < N; ++n) {
      dyy += c.dy[at(tok, N, n)] * r.y[at(tok, N, n)];
      for (int k = 0; k < K; ++k)
        mag += std::fabs(c.dy[at(tok, N, n)] * r.x_q[at(tok, K, k)] / r.x_scale[static_cast<size_t>(tok)] *
                         r.w_scale * r.w_q[at(n, K, k)]);
    }
  for (int tok = 0; tok < M; ++tok)
    for (int k = 0; k < K; ++k)
      dxx += r.dx[at(tok, K, k)] * r.x_q[at(tok, K, k)] / r.x_scale[static_cast<size_t>(tok)];
  for (size_t i = 0; i < r.dw.size(); ++i) dww += r.dw[i] * r.w_scale * r.w_q[i];
  const double allowed = p.real("k") * kF32Unit * (M + N + K + 4) * mag;
  double ratio = 0;
  for (auto [name, v] : {std::pair{"<dx, x~>", dxx}, std::pair{"<dW, W~>", dww}}) {
    if (!(std::fabs(v - dyy) <= allowed))
      return Verdict::fail(
          fmt::format("{} = {:.9g} but <dy, y> = {:.9g} (allowed difference {:.3g})", name, v, dyy, allowed),
          {{"dy_dot_y", dyy}, {"inner", v}, {"allowed", allowed}});
    ratio = std::max(ratio, error_ratio(std::fabs(v - dyy), allowed));
  }
  return Verdict::pass({{kErrorRatio, ratio}});
}

// Every output finite; zero weights give zero outputs and dx; a zero token
// gives a zero quantized row and a zero output row; zero dy gives zero grads.
Verdict zeros_not_nan(T& t, const Values&) {
  const Case& c = t.input();
  const Result& r = t.target();
  if (Verdict v = check_sizes(c, r); v.outcome == Outcome::fail) return v;
  const int M = c.tokens, K = c.in_features, N = c.out_features;
  struct Out {
    const char* name;
    const std::vector<double>& v;
  };
  for (const Out& o : {Out{"w_q", r.w_q}, Out{"x_scale", r.x_scale}, Out{"x_q", r.x_q}, Out{"acc", r.acc},
                       Out{"y", r.y}, Out{"dx", r.dx}, Out{"dW", r.dw}})
    for (size_t i = 0; i < o.v.size(); ++i)
      if (!std::isfinite(o.v[i]))
        return Verdict::fail(fmt::format("{}[{}] = {} from finite inputs", o.name, i, o.v[i]),
                             {{"index", double(i)}});
  if (!std::isfinite(r.w_scale))
    return Verdict::fail(fmt::format("weight scale {} from finite weights", r.w_scale));
  auto all_zero = [](auto first, auto last) {
    return std::all_of(first, last, [](double v) { return v == 0; });
  };
  if (all_zero(c.w.begin(), c.w.end()) &&
      !(all_zero(r.w_q.begin(), r.w_q.end()) && all_zero(r.y.begin(), r.y.end()) &&
        all_zero(r.dx.begin(), r.dx.end())))
    return Verdict::fail("all-zero weights give nonzero w_q, y or dx");
  for (int tok = 0; tok < M; ++tok) {
    const auto row = c.x.begin() + static_cast<long>(tok) * K;
    if (!all_zero(row, row + K)) continue;
    const auto q = r.x_q.begin() + static_cast<long>(tok) * K;
    const auto y = r.y.begin() + static_cast<long>(tok) * N;
    if (!(all_zero(q, q + K) && all_zero(y, y + N)))
      return Verdict::fail(fmt::format("token {} is all zero but its x_q or y row is not", tok),
                           {{"token", double(tok)}});
  }
  if (all_zero(c.dy.begin(), c.dy.end()) &&
      !(all_zero(r.dx.begin(), r.dx.end()) && all_zero(r.dw.begin(), r.dw.end())))
    return Verdict::fail("all-zero dy gives nonzero dx or dW");
  return Verdict::pass();
}

// Per-token activation scales: the last token run alone gives the same
// quantized row, integer row and output row.
Verdict token_independence(T& t, const Values&) {
  const Case& c = t.input();
  if (c.tokens == 1) return Verdict::discard("a single token: no other token to depend on");
  const Result& r = t.target();
  if (Verdict v = check_sizes(c, r); v.outcome == Outcome::fail) return v;
  const int last = c.tokens - 1, K = c.in_features, N = c.out_features;
  Case one = c;
  one.tokens = 1;
  one.x.assign(c.x.begin() + static_cast<long>(last) * K, c.x.end());
  one.dy.assign(c.dy.begin() + static_cast<long>(last) * N, c.dy.end());
  const Result alone = t.run_target(one);
  if (Verdict v = check_sizes(one, alone); v.outcome == Outcome::fail) return v;
  for (int k = 0; k < K; ++k)
    if (!(alone.x_q[static_cast<size_t>(k)] == r.x_q[at(last, K, k)]))
      return Verdict::fail(fmt::format("token {} quantizes to x_q[{}] = {} alone but {} in the batch", last,
                                       k, alone.x_q[static_cast<size_t>(k)], r.x_q[at(last, K, k)]));
  for (int n = 0; n < N; ++n)
    if (!(alone.acc[static_cast<size_t>(n)] == r.acc[at(last, N, n)] &&
          alone.y[static_cast<size_t>(n)] == r.y[at(last, N, n)]))
      return Verdict::fail(fmt::format("token {} gives y[{}] = {} alone but {} in the batch", last, n,
                                       alone.y[static_cast<size_t>(n)], r.y[at(last, N, n)]),
                           {{"alone", alone.y[static_cast<size_t>(n)]}, {"batch", r.y[at(last, N, n)]}});
  return Verdict::pass();
}

Schema k_param() {
  return {field::k(2, "allowed error: k x the f32 bound u32 x (terms + 2) x sum of |terms|")};
}

}  // namespace

void register_invariants(FamilyDef<Traits>& f) {
  f.invariant({"weights_ternary",
               "quantized weights are in {-1, 0, +1} (dequantized in {-s, 0, +s}); s > 0 and finite; packed "
               "weights pad a row's last byte with 00 codes",
               {}},
              weights_ternary);
  f.invariant({"weight_scale_absmean",
               "s = max(mean|W|, eps)",
               {field::rtol(1e-12, "relative tolerance (summation order only)")}},
              weight_scale_absmean);
  f.invariant({"activations_int8",
               "a_t = 127 / max(max|x_t|, eps); x_q are int8 and the absmax entry quantizes to +-127",
               {field::rtol(0, "relative tolerance on a_t (one division: exact)")}},
              activations_int8);
  f.invariant({"integer_part_exact", "w_q, x_q and acc equal the reference's exactly; acc = x_q . w_qᵀ", {}},
              integer_part_exact);
  f.invariant({"output_matches_reference",
               "y = acc s / a_t within the f32 scaling error of the reference",
               {field::rtol(0x1p-22,
                            "relative tolerance: 2 x the two f32 roundings of the scaling (2 x 2 x 2^-24)")}},
              output_matches_reference);
  f.invariant({"ste_matches_dense", "dx = dy W~ and dW = dyᵀ x~, the dense gradients at the quantized point",
               k_param()},
              ste_matches_dense);
  f.invariant({"ste_adjoint", "<dy, y> = <dx, x~> = <dW, W~> at the target's own quantized point", k_param()},
              ste_adjoint);
  f.invariant(
      {"zeros_not_nan", "finite outputs; zero weights, zero tokens and zero dy give zeros, never NaN", {}},
      zeros_not_nan);
  f.invariant({"token_independence",
               "a token's quantized row and output do not depend on the other tokens",
               {},
               [](const Values& d, const Values&) -> std::string {
                 if (d.int_range("tokens").hi >= 2) return "";
                 return "two tokens, but domain.tokens is [1, 1]; widen tokens or drop the invariant";
               }},
              token_independence);
}

}  // namespace kprop::ternary
