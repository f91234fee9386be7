// attention.bwd invariants on the f16/bf16 stores of dQ, dK and dV: where a
// case pins a gradient's exact value (rows whose visible scores tie over 2^t
// keys), the stored value must be that value rounded to nearest. The policy's
// floor cannot tell a store by truncation from one by rounding (it budgets
// one half-type rounding of P and dS on every row); these can, where they see.
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <vector>

#include "properties/attention/bounds.h"
#include "properties/attention/checks.h"
#include "properties/attention/family.h"

namespace kprop::attention {
namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace stores {

using T = Trial<BwdTraits>;

// dv_rounded_to_nearest: dV_j = Σ_i P_ij dO_i over the query rows i that see
// key j (over the heads of j's group). Where every such row's visible scores
// tie over n_i = 2^t keys, P_ij = 1/n_i exactly, so dV_j is known to f32
// accuracy and the one stored value round-to-nearest allows is known where
// dV_j is clear of a rounding boundary. A store by truncation (toward zero)
// misses it on about half of such elements; matches_reference's floor, which
// must also budget P and dS rounded to the half type on every other row,
// lets a one-ulp store through. dV only: dK and dQ go through D, which a
// correct kernel forms from its own O, already rounded to the half type.
//
// Derivation, per row with Δ, ε, θ of o_rounded_to_nearest (invariants_fwd.cpp,
// steps 1-3: TiedRow), for the kernel's f32 (u = 2^-24, 2u per step for
// truncating adders) and for the fp64 reference (u = 2^-53):
//   1. the forward's row sum is l = n(1 + θ_l), |θ_l| <= θ, and its running
//      max m is one of the computed scores, within Δ of s; its
//      LSE = m + ln l, stored in f32, is within
//      λ = Δ + 2θ + 8u(ln n + 1) + u(|s| + Δ + ln n + 1) of s + ln n
//      (|ln(1 + x)| <= 2|x| for |x| <= 1/2; 4 ulps for an approximate log,
//      4 more for log2 scaled by ln 2; the sum's rounding);
//   2. the backward recomputes a score within Δ of s and P = exp(s' - LSE),
//      whose argument is within κ = Δ + λ + 4u(|s| + ln n + Δ + λ + 1) of
//      -ln n (the subtraction, u; log2(e), rounded, folded into both
//      operands for an exp2, 1.45u per operand and 1.45u for the constant),
//      so P = (1/n)(1 + φ) with |φ| <= φ̄ = expm1(κ) + 4u·exp(κ)
//      (4 ulps of the exp);
//   3. P rounded to the half type before Pᵀ·dO lands on 1/n, a power of two,
//      while φ̄ < 2^-(p+1) (p: the type's significant bits): no error added.
//      Rows with larger φ̄ make key j unchecked;
//   4. dV_jd = Σ_i P_ij dO_id over m terms (tiles, rows and the group's heads
//      in any order): |error| <= φ̄_max·A + γ_m(2u)(1 + φ̄_max)·A with
//      A = Σ_i |dO_id| / n_i, plus m·2^-149 for products below f32's normal
//      range (a bf16 dO can be subnormal in f32 too). dO itself is exact in
//      f32 (a half value).
// The fp64 reference's dV is within the same expression at u = 2^-53 (and
// 2^-1074 per underflowing product). Where rounding_margin(dtype, reference)
// exceeds the two bounds' sum, every value the kernel may hold rounds to the
// same r = round_to(dtype, dV_jd), and the stored dV_jd must be r exactly.
double tied_p_error(const TiedRow& row, double u) {
  const TiedRow::Bounds r = row.bounds(u);
  const double ln_n = std::log(row.n);
  const double lambda = r.delta + 2 * r.theta + 8 * u * (ln_n + 1) + u * (row.score + r.delta + ln_n + 1);
  const double kappa = r.delta + lambda + 4 * u * (row.score + ln_n + r.delta + lambda + 1);
  return std::expm1(kappa) + 4 * u * std::exp(kappa);
}

Verdict dv_rounded_to_nearest(T& t, const Values&) {
  const Case& c = t.input();
  if (auto v = pinned_store_unobservable(t.target_info(), c.dtype, "dV")) return *v;
  const Shape& s = c.shape;
  const double u = 0x1.0p-24, u64 = 0x1.0p-53;
  const double snap = power_of_two_snap(c.dtype);
  const double f32_underflow = 0x1.0p-149, f64_underflow = std::numeric_limits<double>::denorm_min();
  const BwdResult* got = nullptr;
  const BwdResult* ref = nullptr;
  size_t checked = 0, keys_tied = 0;
  struct RowTie {
    bool ok = false;
    double n = 0, phi = 0, phi64 = 0;
  };
  std::vector<RowTie> ties(size_t(s.heads_q) * s.nq);  // of one batch, by (h, i)
  std::vector<int> keys;
  for (int b = 0; b < s.batch; ++b) {
    for (int i = 0; i < s.nq; ++i) {
      visible_keys(c, b, i, keys);
      const size_t n = keys.size();
      for (int h = 0; h < s.heads_q; ++h) {
        RowTie& r = ties[size_t(h) * s.nq + i];
        r = {};
        if (n == 0 || (n & (n - 1)) != 0) continue;
        const std::optional<TiedRow> tie = tied_row(c, b, h, i, keys);
        if (!tie) continue;
        r = {true, double(n), tied_p_error(*tie, u), tied_p_error(*tie, u64)};
        r.ok = r.phi < snap;
      }
    }
    for (int kvh = 0; kvh < s.heads_kv; ++kvh)
      for (int j = 0; j < s.nk; ++j) {
        double m = 0, phi = 0, phi64 = 0;
        bool all_tied = true;
        for (int h = kvh * s.group(); h < (kvh + 1) * s.group() && all_tied; ++h)
          for (int i = 0; i < s.nq && all_tied; ++i) {
            if (!visible(c, b, i, j)) continue;
            const RowTie& r = ties[size_t(h) * s.nq + i];
            all_tied = r.ok;
            m += 1, phi = std::max(phi, r.phi), phi64 = std::max(phi64, r.phi64);
          }
        if (!all_tied || m == 0) continue;
        ++keys_tied;
        if (!got) got = &t.target(), ref = &t.reference();
        const size_t at = ((size_t(b) * s.heads_kv + kvh) * s.nk + j) * s.dim;  // of K, V, dK, dV
        for (int d = 0; d < s.dim; ++d) {
          double a = 0;
          for (int h = kvh * s.group(); h < (kvh + 1) * s.group(); ++h)
            for (int i = 0; i < s.nq; ++i)
              if (visible(c, b, i, j))
                a += std::fabs(c.d_out[((size_t(b) * s.heads_q + h) * s.nq + i) * s.dim + d]) /
                     ties[size_t(h) * s.nq + i].n;
          const double bound = (phi + gamma_n(m, 2 * u) * (1 + phi)) * a + m * f32_underflow +
                               (phi64 + gamma_n(m, u64) * (1 + phi64)) * a + m * f64_underflow;
          if (auto fail = check_pinned_store(c.dtype, got->dv[at + d], ref->dv[at + d], bound, checked, [&] {
                return PinnedElement{
                    "dV" + element_name(at + d, kv_dims(s)),
                    fmt::format("every row that sees key {} has tied scores over 2^t keys, so "
                                "P = 2^-t there and dV is Σ dO / 2^t over {} rows",
                                j, m),
                    {{"index", double(at + d)}, {"rows", m}}};
              }))
            return *fail;
        }
      }
  }
  if (keys_tied == 0)
    return Verdict::discard(
        "no key whose every query row has tied scores over a power-of-two number of visible keys");
  if (checked == 0) return Verdict::discard("no element of the tied keys' dV clear of a rounding boundary");
  return Verdict::pass();
}

// dq_dk_rounded_to_nearest: dS_ij = P_ij (dP_ij - D_i) goes into dQ = σ dS K
// and dK = σ dSᵀ Q, and a kernel rounds dS to the half type before those
// products (FlashAttention does), so dQ and dK are known to f32 accuracy
// only where dS itself is exact in the dtype. The value kind pinned_grads
// makes it so: a row's visible scores tie while the keys differ (Q is zero
// where they differ), V holds small integers and dO one power of two. Over
// n = 2^t visible keys, P = 1/n, O* = (1/n)Σ_j v_j is exact in the dtype,
// and with dP*_j = dO·v_j, D* = dO·O*, x*_j = dP*_j - D* (computed in fp64
// and checked exact: every product and sum error-free), dS*_j = x*_j / n
// is exact too. The check needs σ to be a power of two: a kernel may fold σ
// into dS before rounding it, which is exact only then.
//
// Derivation, per row, for an f32 kernel (u = 2^-24, 2u per step for adders
// that truncate, η = 2^-149 per operation whose result may underflow), with
// θ, φ̄ of o_rounded_to_nearest and dv_rounded_to_nearest (TiedRow), both
// below 2^-(p+1) (p: the dtype's significant bits) or the row is not pinned:
//   1. the forward's O before its store is within δ_d = (θ + γ_n(2u)(1 + θ))·A_d
//      + nη of O*_d (A_d = (1/n)Σ_j|v_jd|); where O*_d is a value of the
//      dtype and δ_d is below rounding_margin(dtype, O*_d), the stored O_d
//      is O*_d exactly, elsewhere within ω_d = δ_d + 2^-p(|O*_d| + δ_d) +
//      denorm_min(dtype)/2 of it;
//   2. D from the stored O (Σ_d dO_d O_d) or from P and dP (Σ_j P_j dP_j,
//      P_j = (1/n)(1 + φ_j), |φ_j| <= φ̄, in f32 or rounded to the half type,
//      which lands on 1/n): with B_j = Σ_d|dO_d v_jd| and B̄ = (1/n)Σ_j B_j
//      (>= Σ_d|dO_d O*_d| and >= |D*|),
//      |D - D*| <= E_D = B̄(φ̄ + (1 + φ̄)(γ_D(2u) + γ_{n+1}(2u)(1 + γ_D(2u))))
//      + Σ_d |dO_d| ω_d (the stored O's part, 0 where it is exact) + (D + n + 1)η;
//   3. dP_j within γ_D(2u)B_j + Dη of dP*_j, so dP_j - D is within
//      E_x = γ_D(2u)B_j + Dη + E_D of x*_j before its own rounding;
//   4. dS_j = P_j(dP_j - D), or P_j dP_j - P_j D, each step rounded (2u):
//      with g = (1 + φ̄)(1 + 2u)² - 1, |dS_j - dS*_j| <= E_S =
//      (g(B_j + B̄) + (1 + g)E_x)/n + 2η (B_j + B̄ bounds the operands of
//      either form);
//   4'. a kernel that holds dP, D or dP - D in the dtype (materialized) rounds
//      them once more: where dP*_j, D* and x*_j are values of the dtype
//      whose rounding margins exceed the f32 errors of steps 2-3, that
//      rounding lands on the exact value and adds nothing; rows where they
//      are not are not pinned;
//   5. rounded to the half type: where dS*_j is a value of the dtype and
//      E_S < rounding_margin(dtype, dS*_j), the rounding lands on dS*_j, so
//      the dS a kernel multiplies by is within ε_j = E_S of dS*_j whether it
//      rounds dS or not; otherwise within ε_j = E_S + 2^-p(|dS*_j| + E_S) +
//      denorm_min(dtype)/2 (a rounding of it; a half-type error, which
//      leaves the elements it reaches unchecked);
//   6. dK_jd = σ Σ_i dS_ij q_id over the m rows (the group's heads) that see
//      key j, every one of them pinned; dQ_id = σ Σ_j dS_ij k_jd over the n
//      keys of row i. With W = Σ(|dS*| + ε)|x| over the terms (x: q_id or
//      k_jd, half values, so a product with a half dS is exact in f32) the
//      f32 result is within |σ|(Σ ε|x| + (γ_{m+3}(2u) + 4u)W) + (m + 3)η of
//      σ Σ dS* x: m - 1 sums, the products, σ applied per term, per tile or
//      at the end, the tiles' partial sums added, and 4 ulps for a σ a
//      kernel computes itself (1/sqrt(D) by an approximate rsqrt);
//   7. σ Σ dS* x in fp64 (the value checked against) errs by at most
//      γ_{2m+1}(2^-53)|σ|Σ|dS* x| + (2m + 1)·2^-1074.
// Where rounding_margin(dtype, σ Σ dS* x) exceeds the sum of 6 and 7, the
// stored dK_jd (dQ_id) must be round_to(dtype, σ Σ dS* x) exactly.
constexpr double kF32Tiny = 0x1.0p-149;

// acc += x when the fp64 sum is exact (TwoSum's error term is 0).
bool add_exact(double& acc, double x) {
  const double s = acc + x, bb = s - acc, err = (acc - (s - bb)) + (x - bb);
  if (err != 0 || !std::isfinite(s)) return false;
  acc = s;
  return true;
}
// p = a·b when the fp64 product is exact (the fma residual is 0, and no
// product so small that a nonzero residual could round to 0).
bool mul_exact(double a, double b, double& p) {
  p = a * b;
  if (!std::isfinite(p)) return false;
  if (p == 0) return a == 0 || b == 0;
  return std::fabs(p) >= 0x1.0p-960 && std::fma(a, b, -p) == 0;
}

// One query row's pinned softmax gradient, per key of its head: dS*_j (0
// where j is not visible) and ε_j (step 5).
struct PinnedRow {
  bool ok = false;
  std::vector<double> ds, eps;
};

// Steps 1-5 for row (b, h, i) with visible keys `keys`; r.ok when pinned.
void pin_row(const Case& c, int b, int h, int i, const std::vector<int>& keys, PinnedRow& r) {
  r.ok = false;
  const Shape& s = c.shape;
  const size_t n = keys.size();
  if (n == 0 || (n & (n - 1)) != 0) return;
  const std::optional<TiedRow> tie = tied_row(c, b, h, i, keys);
  if (!tie) return;
  const double u = 0x1.0p-24, nn = double(n), dim = double(s.dim);
  const double snap = power_of_two_snap(c.dtype);
  const double theta = tie->bounds(u).theta, phi = tied_p_error(*tie, u);
  if (theta >= snap || phi >= snap) return;
  const double* d_out = &c.d_out[((size_t(b) * s.heads_q + h) * s.nq + i) * s.dim];
  const size_t kv = (size_t(b) * s.heads_kv + h / s.group()) * s.nk;
  auto v = [&](int j) { return &c.v[(kv + size_t(j)) * s.dim]; };
  double d_star = 0, o_error = 0;  // D* = dO·O*, and Σ_d |dO_d|·|stored O_d - O*_d|
  for (int d = 0; d < s.dim; ++d) {
    double sum = 0, a = 0;
    for (int j : keys) {
      if (!add_exact(sum, v(j)[d])) return;
      a += std::fabs(v(j)[d]);
    }
    const double o = sum / nn, delta = (theta + gamma_n(nn, 2 * u) * (1 + theta)) * (a / nn) + nn * kF32Tiny;
    double p = 0;
    if (o * nn != sum || !mul_exact(d_out[d], o, p) || !add_exact(d_star, p)) return;
    if (round_to(c.dtype, o) != o || !(rounding_margin(c.dtype, o) > delta))
      o_error += std::fabs(d_out[d]) *
                 (delta + unit_roundoff(c.dtype) * (std::fabs(o) + delta) + denorm_min(c.dtype) / 2);
  }
  // A kernel may also hold dP, D or dP - D in the dtype (a materialized dP,
  // as PyTorch's f16 backward keeps it): each must then be a value of the
  // dtype its f32 error cannot round away from, so that such a rounding
  // lands on the exact value and adds nothing.
  const auto pins = [&](double x, double error) {
    return round_to(c.dtype, x) == x && rounding_margin(c.dtype, x) > error;
  };
  r.ds.assign(size_t(s.nk), 0);
  r.eps.assign(size_t(s.nk), 0);
  double b_bar = 0;
  for (int j : keys) {  // dP*_j into ds, B_j into eps, for now
    double dp = 0, b_j = 0;
    for (int d = 0; d < s.dim; ++d) {
      double p = 0;
      if (!mul_exact(d_out[d], v(j)[d], p) || !add_exact(dp, p)) return;
      b_j += std::fabs(p);
    }
    r.ds[size_t(j)] = dp, r.eps[size_t(j)] = b_j, b_bar += b_j;
  }
  b_bar /= nn;
  const double g_d = gamma_n(dim, 2 * u), g = (1 + phi) * (1 + 2 * u) * (1 + 2 * u) - 1;
  const double e_d = b_bar * (phi + (1 + phi) * (g_d + gamma_n(nn + 1, 2 * u) * (1 + g_d))) + o_error +
                     (dim + nn + 1) * kF32Tiny;
  if (!pins(d_star, e_d)) return;
  for (int j : keys) {
    const double dp = r.ds[size_t(j)], b_j = r.eps[size_t(j)];
    const double e_dp = g_d * b_j + dim * kF32Tiny, e_x = e_dp + e_d;
    double x = dp;
    if (!pins(dp, e_dp) || !add_exact(x, -d_star) || !pins(x, e_x)) return;
    const double ds = x / nn;
    if (ds * nn != x) return;  // the division underflowed
    const double e_s = (g * (b_j + b_bar) + (1 + g) * e_x) / nn + 2 * kF32Tiny;
    r.ds[size_t(j)] = ds;
    r.eps[size_t(j)] =
        pins(ds, e_s) ? e_s : e_s + unit_roundoff(c.dtype) * (std::fabs(ds) + e_s) + denorm_min(c.dtype) / 2;
  }
  r.ok = true;
}

// Steps 6-7 over the terms dS*_t·x_t (t < terms.size()): the value σ Σ dS* x
// and the bound on how far the kernel's f32 result and that fp64 value lie
// from the exact one.
struct Term {
  double ds, eps, x;
};
std::pair<double, double> pinned_sum(const std::vector<Term>& terms, double sigma) {
  const double u = 0x1.0p-24, u64 = 0x1.0p-53, m = double(terms.size());
  double sum = 0, abs = 0, slack = 0, w = 0;
  for (const Term& t : terms) {
    sum += t.ds * t.x;
    abs += std::fabs(t.ds * t.x);
    slack += t.eps * std::fabs(t.x);
    w += (std::fabs(t.ds) + t.eps) * std::fabs(t.x);
  }
  const double a = std::fabs(sigma);
  const double kernel = a * (slack + (gamma_n(m + 3, 2 * u) + 4 * u) * w) + (m + 3) * kF32Tiny;
  const double fp64 =
      gamma_n(2 * m + 1, u64) * a * abs + (2 * m + 1) * std::numeric_limits<double>::denorm_min();
  return {sigma * sum, kernel + fp64};
}

// A softmax scale that is not a power of two: a discard on the case's
// header alone (InvariantInfo::discards_header), so a run drawing only for
// this check leaves such cases' values out (kprop/focus.h).
bool scale_not_power_of_two(const Case& c) {
  int exponent = 0;
  return std::frexp(effective_scale(c), &exponent) != 0.5;
}

Verdict dq_dk_rounded_to_nearest(T& t, const Values&) {
  const Case& c = t.input();
  // Both discards read the header only (dtype, scale): a hollow case
  // (Family::build_hollow) reaches one of them.
  if (auto v = pinned_store_unobservable(t.target_info(), c.dtype, "dQ and dK")) return *v;
  const Shape& s = c.shape;
  const double sigma = effective_scale(c);
  if (scale_not_power_of_two(c))
    return Verdict::discard(fmt::format(
        "softmax scale {} is not a power of two: a kernel may fold it into dS before rounding dS", sigma));
  size_t checked = 0, pinned = 0;
  std::vector<PinnedRow> rows(size_t(s.heads_q) * s.nq);  // of one batch, by (h, i)
  std::vector<int> keys;
  std::vector<Term> terms;
  const std::vector<int> dq_dims = q_dims(s), dk_dims = kv_dims(s);
  // why(): how the element's exact value is known, for a failure only.
  const auto check = [&](const char* name, const std::vector<int>& dims, const std::vector<double>& stored,
                         size_t at, double count, const auto& why) -> std::optional<Verdict> {
    const auto [exact, bound] = pinned_sum(terms, sigma);
    return check_pinned_store(c.dtype, stored[at], exact, bound, checked, [&] {
      return PinnedElement{name + element_name(at, dims), why(), {{"index", double(at)}, {"terms", count}}};
    });
  };
  for (int b = 0; b < s.batch; ++b) {
    for (int i = 0; i < s.nq; ++i) {
      visible_keys(c, b, i, keys);
      for (int h = 0; h < s.heads_q; ++h) {
        PinnedRow& r = rows[size_t(h) * s.nq + i];
        pin_row(c, b, h, i, keys, r);
        if (!r.ok) continue;
        ++pinned;
        const size_t row = ((size_t(b) * s.heads_q + h) * s.nq + i) * s.dim;  // of Q, dO, dQ
        const size_t kv = (size_t(b) * s.heads_kv + h / s.group()) * s.nk;
        for (int d = 0; d < s.dim; ++d) {
          terms.clear();
          for (int j : keys)
            terms.push_back({r.ds[size_t(j)], r.eps[size_t(j)], c.k[(kv + size_t(j)) * s.dim + d]});
          if (auto fail = check("dQ", dq_dims, t.target().dq, row + d, double(keys.size()), [&] {
                return fmt::format(
                    "row {}'s {} visible scores tie and its O and dS are exact in the dtype, so dQ = σ Σ_j "
                    "dS_j k_j is known",
                    i, keys.size());
              }))
            return *fail;
        }
      }
    }
    for (int kvh = 0; kvh < s.heads_kv; ++kvh)
      for (int j = 0; j < s.nk; ++j) {
        bool all_pinned = true;
        double m = 0;
        for (int h = kvh * s.group(); h < (kvh + 1) * s.group() && all_pinned; ++h)
          for (int i = 0; i < s.nq && all_pinned; ++i)
            if (visible(c, b, i, j)) all_pinned = rows[size_t(h) * s.nq + i].ok, m += 1;
        if (!all_pinned || m == 0) continue;
        const size_t at = ((size_t(b) * s.heads_kv + kvh) * s.nk + j) * s.dim;  // of K, V, dK
        for (int d = 0; d < s.dim; ++d) {
          terms.clear();
          for (int h = kvh * s.group(); h < (kvh + 1) * s.group(); ++h)
            for (int i = 0; i < s.nq; ++i)
              if (visible(c, b, i, j)) {
                const PinnedRow& r = rows[size_t(h) * s.nq + i];
                terms.push_back({r.ds[size_t(j)], r.eps[size_t(j)],
                                 c.q[((size_t(b) * s.heads_q + h) * s.nq + i) * s.dim + d]});
              }
          if (auto fail = check("dK", dk_dims, t.target().dk, at + d, m, [&] {
                return fmt::format(
                    "every row that sees key {} ({} rows) ties with O and dS exact in the dtype, so dK = "
                    "σ Σ_i dS_i q_i is known",
                    j, m);
              }))
            return *fail;
        }
      }
  }
  if (pinned == 0)
    return Verdict::discard(
        "no query row with tied scores over 2^t keys whose O and dS are exact in the dtype");
  if (checked == 0)
    return Verdict::discard("no element of the pinned dQ and dK clear of a rounding boundary");
  return Verdict::pass();
}

}  // namespace stores
}  // namespace

void register_backward_store_invariants(FamilyDef<BwdTraits>& f) {
  using namespace stores;
  f.invariant({"dv_rounded_to_nearest",
               "f16/bf16: where every query row that sees a key has tied scores over 2^t keys (P = 2^-t "
               "exactly), dV of that key is stored rounded to nearest: the one value within reach of the "
               "exact Σ dO / 2^t",
               {},
               needs_tied_half_rows},
              dv_rounded_to_nearest)
      .observing("dtypes", {"f16", "bf16"});  // pinned_store_unobservable: f32/f64 discarded
  f.invariant({"dq_dk_rounded_to_nearest",
               "f16/bf16: where rows' scores tie over 2^t keys with O and dS exact in the dtype (value kind "
               "pinned_grads), dQ and dK are stored rounded to nearest: the one value within reach of the "
               "exact σ Σ dS x",
               {},
               needs_pinned_grads},
              dq_dk_rounded_to_nearest)
      .observing("dtypes", {"f16", "bf16"})  // pinned_store_unobservable: f32/f64 discarded
      .discarding_header(scale_not_power_of_two);
}

}  // namespace kprop::attention
