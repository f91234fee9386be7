// attention.fwd invariants. Comparisons use the dtype policy of bounds.h:
// the fp64 reference is the oracle and the naive materialized computation in
// the target's precision sets the allowed error.
#include <fmt/format.h>

#include <cmath>

#include "kprop/search.h"
#include "kprop/tolerance.h"
#include "properties/attention/bounds.h"
#include "properties/attention/checks.h"
#include "properties/attention/family.h"

namespace kprop::attention {
namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace fwd {

using T = Trial<FwdTraits>;

// O and LSE of `got` against `expected` (the reference, possibly rearranged),
// with `naive` computed on the same inputs as `got`.
Verdict compare_outputs(const Case& c, const std::string& what, const FwdResult& expected,
                        const FwdResult& got, const FwdResult& naive, const Scales& f, const Values& p) {
  const double k = p.real("k");
  return both(for_output("o", compare_tensor(what + "O", q_dims(c.shape), expected.o, got.o, naive.o, k,
                                             f.of(&ErrorScales::o))),
              for_output("lse", compare_tensor(what + "LSE", lse_dims(c.shape), expected.lse, got.lse,
                                               naive.lse, k, f.of(&ErrorScales::lse))));
}

// The case's naive baseline and floors, computed once per trial.
const FwdResult& naive(T& t) {
  return t.once<naive_forward>();
}
Scales case_floors(T& t, const Values& p) {
  return floors(t.input(), t.once<forward_scales>(), false, p.real("floor_ulps"));
}

struct Output {
  const char* name;
  std::vector<double> FwdResult::*field;
  double ErrorScales::*scale;
};
const Output kOutputs[] = {{"O", &FwdResult::o, &ErrorScales::o},
                           {"LSE", &FwdResult::lse, &ErrorScales::lse}};

Verdict matches_reference(T& t, const Values& p) {
  const Case& c = t.input();
  std::optional<FwdResult> recentred;
  return compare_outputs(c, "", t.reference(), t.target(), oracle_baseline(t, naive(t), kOutputs, recentred),
                         case_floors(t, p), p);
}

Verdict tile_size_invariance(T& t, const Values& p) {
  std::optional<FwdResult> recentred;
  return tilings_agree(t, oracle_baseline(t, naive(t), kOutputs, recentred), case_floors(t, p), p.real("k"),
                       kOutputs);
}

Verdict masked_rows_zero(T& t, const Values&) {
  const Case& c = t.input();
  const Shape& s = c.shape;
  const auto masked = fully_masked_rows(c);
  if (masked.empty()) return Verdict::discard("no fully masked row");
  const FwdResult& r = t.target();
  for (auto [b, i] : masked)
    for (int h = 0; h < s.heads_q; ++h) {
      const size_t row = (size_t(b) * s.heads_q + h) * s.nq + i;
      if (r.lse[row] != -INFINITY)
        return Verdict::fail(
            fmt::format("fully masked row [b={},h={},i={}] has LSE {} (expected -inf)", b, h, i, r.lse[row]),
            {{"batch", double(b)}, {"head", double(h)}, {"row", double(i)}, {"lse", r.lse[row]}});
      for (int d = 0; d < s.dim; ++d)
        if (r.o[row * s.dim + d] != 0)
          return Verdict::fail(
              fmt::format("fully masked row [b={},h={},i={}] has O[{}] = {} (expected 0)", b, h, i, d,
                          r.o[row * s.dim + d]),
              {{"batch", double(b)}, {"head", double(h)}, {"row", double(i)}, {"o", r.o[row * s.dim + d]}});
    }
  return Verdict::pass();
}

Verdict finite_outputs(T& t, const Values&) {
  const FwdResult& r = t.target();
  const FwdResult& ref = t.reference();
  for (auto [name, got, want] : {std::tuple{"O", &r.o, &ref.o}, std::tuple{"LSE", &r.lse, &ref.lse}})
    for (size_t i = 0; i < want->size() && i < got->size(); ++i)
      if (std::isfinite((*want)[i]) && !std::isfinite((*got)[i]))
        return Verdict::fail(
            fmt::format("{}{} is {} where the reference has {}", name,
                        element_name(i, std::string(name) == "O" ? q_dims(t.input().shape)
                                                                 : lse_dims(t.input().shape)),
                        (*got)[i], (*want)[i]),
            {{"index", double(i)}, {"value", (*got)[i]}, {"reference", (*want)[i]}});
  return Verdict::pass();
}

// Adding one vector to every key adds a constant to each score row: O is
// unchanged. The target on shifted keys must match the reference on the
// original ones, up to the naive error on the shifted inputs.
Verdict shift_invariance(T& t, const Values& p) {
  const Case& c = t.input();
  const Case shifted = keys_shifted(c);
  const FwdResult got = t.run_target(shifted), shifted_naive = naive_forward(shifted);
  return compare_tensor("O after shifting every key ", q_dims(c.shape), t.reference().o, got.o,
                        shifted_naive.o, p.real("k"),
                        floors(shifted, false, p.real("floor_ulps")).of(&ErrorScales::o));
}

// Permuting keys with their values (and queries) permutes nothing but the
// output rows. The naive baseline is the case's, permuted as the reference
// is: the same-precision evaluation of the permuted case with its keys
// summed in the case's order, as naive an evaluation as any (the policy's
// yardstick does not fix an order), and one run fewer per case.
Verdict permutation_equivariance(T& t, const Values& p) {
  const Case& c = t.input();
  const auto perm = permutation_of(c);
  if (!perm) return no_permutation(c);
  std::optional<FwdResult> recentred;
  return compare_outputs(
      c, "permuted keys and queries: ", permuted(t.reference(), c.shape, *perm), t.run_target(perm->c),
      permuted(oracle_baseline(t, naive(t), kOutputs, recentred), c.shape, *perm), case_floors(t, p), p);
}

// o_rounded_to_nearest: on rows whose visible scores all tie over a power-of-
// two number of keys, O's exact value is known to f32 accuracy, so the one
// stored value round-to-nearest allows is known where O is clear of a
// rounding boundary. A store by truncation (toward zero) differs from it on
// about half of such elements; the policy's floor, which must also budget P
// rounded to the half type on every other row, lets a one-ulp store through.
//
// Derivation, for a row (b, h, i) with n visible keys, n = 2^t, whose fp64
// scores s_j are all equal (s), in an f32 kernel (u = 2^-24) with any
// summation order, online softmax over any tiling, exp or exp2, P or the
// unnormalized e rounded to the half type before P·V or not:
//   1. each computed score is within Δ = γ_D(2u)·|scale|·Σ_d|q_d k_jd| + u·|s|
//      of s (an f32 dot product, 2u per step for tensor cores' truncating
//      adders, and the scale), so two differ by at most 2Δ and the running
//      max is one of them;
//   2. each exponential (of s_j - m, or exp2 of log2(e)-scaled operands) and
//      each rescale factor exp(m_old - m_new) is 1 within
//      ε = 2Δ + 2u(|s| + 2Δ + 1) + 4u: an argument within 2Δ of 0, the
//      rounding of the operands it is formed from, and 4 ulps of the exp
//      itself (room for approximate hardware exp);
//   3. the weight v_j gets is P_j(1 + θ_j) with
//      |θ_j| <= θ = 2(n + 2)ε + γ_2n(2u) + 4u: at most n rescales of the
//      accumulator and of l (one per key tile), the n-term row sum, and the
//      final division (2u: an approximate reciprocal). γ with 2u, not u,
//      covers adders that truncate (tensor cores accumulate that way);
//   4. a P (or e) rounded to the half type is within θ of its exact value
//      1/n (or 1), a power of two: while θ < 2^-(p+1) (p: the type's
//      significant bits; the gap below a power of two is the narrower one)
//      the rounding lands on that value and adds nothing. Rows with larger θ
//      are skipped;
//   5. the P·V sum adds γ_n(2u)·Σ_j|w_j v_jd| <= γ_n(2u)(1 + θ)·A_d, with
//      A_d = (1/n)Σ_j|v_jd|.
// So the f32 O before its store is within δ_d = (θ + γ_n(2u)(1 + θ))·A_d of
// O_d = (1/n)Σ_j v_jd, which the fp64 reference gives to γ_{n+2}(2^-53)·A_d.
// Where rounding_margin(dtype, reference O_d) exceeds the sum of the two,
// every value the kernel may hold rounds to the same r = round_to(dtype, O_d)
// (a correct store rounds to nearest even once, from f32), and the stored O
// must be r exactly.
Verdict o_rounded_to_nearest(T& t, const Values&) {
  const Case& c = t.input();
  if (auto v = pinned_store_unobservable(t.target_info(), c.dtype, "O")) return *v;
  const Shape& s = c.shape;
  const double u = 0x1.0p-24, u64 = 0x1.0p-53;
  const double snap = power_of_two_snap(c.dtype);
  const FwdResult* got = nullptr;
  const FwdResult* ref = nullptr;
  size_t checked = 0, rows = 0;
  std::vector<int> keys;
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.nq; ++i) {
      visible_keys(c, b, i, keys);
      const size_t n = keys.size();
      if (n == 0 || (n & (n - 1)) != 0) continue;
      for (int h = 0; h < s.heads_q; ++h) {
        const size_t row = ((size_t(b) * s.heads_q + h) * s.nq + i) * s.dim;  // of Q and O
        const int kvh = h / s.group();
        auto kv_at = [&](int j) { return ((size_t(b) * s.heads_kv + kvh) * s.nk + j) * s.dim; };
        const std::optional<TiedRow> tie = tied_row(c, b, h, i, keys);
        if (!tie) continue;
        const double theta = tie->bounds(u).theta;
        if (theta >= snap) continue;
        ++rows;
        if (!got) got = &t.target(), ref = &t.reference();
        for (int d = 0; d < s.dim; ++d) {
          double a_d = 0;
          for (int j : keys) a_d += std::fabs(c.v[kv_at(j) + d]);
          a_d /= double(n);
          const double bound =
              (theta + gamma_n(double(n), 2 * u) * (1 + theta)) * a_d + gamma_n(double(n) + 2, u64) * a_d;
          if (auto fail = check_pinned_store(c.dtype, got->o[row + d], ref->o[row + d], bound, checked, [&] {
                return PinnedElement{
                    "O" + element_name(row + d, q_dims(s)),
                    fmt::format("the row's {} visible scores tie, so O is the mean of {} values of V", n, n),
                    {{"index", double(row + d)}, {"keys", double(n)}}};
              }))
            return *fail;
        }
      }
    }
  if (rows == 0)
    return Verdict::discard("no row whose visible scores all tie over a power-of-two number of keys");
  if (checked == 0) return Verdict::discard("no element of the tied rows clear of a rounding boundary");
  return Verdict::pass();
}

}  // namespace fwd
}  // namespace

void register_forward_invariants(FamilyDef<FwdTraits>& f) {
  using namespace fwd;
  f.invariant(
      {"matches_reference",
       "O and LSE within k × the naive same-precision error + floor of the fp64 reference", policy_params()},
      matches_reference);
  f.invariant(
      {"tile_size_invariance", "other tilings (one tile, unit, swapped, uneven) agree within the policy",
       policy_params(), needs_other_tiling},
      tile_size_invariance);
  f.invariant(
      {"masked_rows_zero", "a fully masked row gives O = 0 and LSE = -inf exactly", {}, needs_masked_rows},
      masked_rows_zero);
  f.invariant({"finite_outputs", "no NaN or inf where the reference has none", {}}, finite_outputs);
  f.invariant({"shift_invariance", "adding one vector to every key leaves O unchanged", policy_params()},
              shift_invariance);
  f.invariant({"permutation_equivariance",
               "permuting unmasked keys with their values leaves O unchanged; permuting queries permutes O",
               policy_params(), needs_permutation},
              permutation_equivariance);
  f.invariant({"o_rounded_to_nearest",
               "f16/bf16: where a row's visible scores tie over 2^t keys (P = 2^-t exactly), O is stored "
               "rounded to nearest: the one value within reach of the exact mean",
               {},
               needs_tied_half_rows},
              o_rounded_to_nearest)
      .observing("dtypes", {"f16", "bf16"});  // an f32/f64 case stores O in its own type
  register_workspace_bounded(f);
}

}  // namespace kprop::attention
