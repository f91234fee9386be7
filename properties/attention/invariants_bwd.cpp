// attention.bwd invariants: gradients against the fp64 reference under the
// dtype policy, against fp64 finite differences of the contract's loss
// Σ dO ⊙ O, and the identities of the softmax gradient.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "kprop/rng.h"
#include "kprop/search.h"
#include "kprop/tolerance.h"
#include "properties/attention/bounds.h"
#include "properties/attention/checks.h"
#include "properties/attention/family.h"

namespace kprop::attention {
namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace bwd {

using T = Trial<BwdTraits>;

struct Grad {
  const char* name;
  const char* output;  // its tensor name (target.dq, ...): the per-output ratio's key
  std::vector<double> BwdResult::*field;
  double ErrorScales::*scale;
  bool query_side;
};
const Grad kGrads[] = {{"dQ", "dq", &BwdResult::dq, &ErrorScales::dq, true},
                       {"dK", "dk", &BwdResult::dk, &ErrorScales::dk, false},
                       {"dV", "dv", &BwdResult::dv, &ErrorScales::dv, false}};

Verdict compare_grads(const Case& c, const std::string& what, const BwdResult& expected, const BwdResult& got,
                      const BwdResult& naive, const Scales& f, const Values& p) {
  const double k = p.real("k");
  Verdict all = Verdict::pass();
  for (const Grad& g : kGrads) {
    all = both(std::move(all),
               for_output(g.output,
                          compare_tensor(what + g.name, g.query_side ? q_dims(c.shape) : kv_dims(c.shape),
                                         expected.*g.field, got.*g.field, naive.*g.field, k, f.of(g.scale))));
    if (all.outcome != Outcome::pass) return all;
  }
  return all;
}

// The case's naive baseline and floors, computed once per trial.
const BwdResult& naive(T& t) {
  return t.once<naive_backward>();
}
Scales case_floors(T& t, const Values& p) {
  return floors(t.input(), t.once<backward_scales>(), true, p.real("floor_ulps"));
}

// f16/bf16: a case where a value a correct kernel stores in the half type
// (dS before its products, dQ, dK, dV) can pass the dtype's largest finite
// value has no representable answer: the kernel stores ±inf there, and
// inf - inf = NaN further on. Such a case is outside what the storage
// contract can check, so the gradient comparisons discard it instead of
// failing a correct kernel. "Can pass": the exact value plus the most a
// correct kernel may be off by (the floors of dQ, dK, dV; for dS, D's floor,
// since |δdS| <= P |δD| <= |δD|, plus dP's f32 rounding D·eps·Σ|dO||v|,
// doubled). dP itself stays in f32 (attention.h, "Precision"). The
// generator keeps such cases out (dO shrinks as V grows); the targeted
// search can climb into them.
// Computed once per trial (it reads the case and the reference only), where
// every gradient invariant asks: scanning the case and the reference for each
// was 5% of an attention_bwd run at its default domain.
std::optional<Verdict> half_range_verdict(T& t) {
  const Case& c = t.input();
  if (!is_half(c.dtype)) return std::nullopt;
  const ErrorScales& e = t.once<backward_scales>().all;
  // The f32 terms at 64 ulps, past any spec's floor_ulps default (8): what a
  // correct kernel may be off by, whatever tolerance an invariant is given.
  const ErrorScales f = largest_floors(c, t.once<backward_scales>(), true, 64);
  const double largest = max_finite(c.dtype);
  auto discard = [&](const char* what) {
    return Verdict::discard(fmt::format("{} may pass {}'s largest finite value {}: no representable answer",
                                        what, dtype_name(c.dtype), largest));
  };
  if (e.ds_max + f.d + 2 * c.shape.dim * epsilon(c.dtype) * e.dp_abs_max >= largest) return discard("dS");
  for (const Grad& g : kGrads) {
    double m = 0;
    for (double x : t.reference().*g.field) m = std::max(m, std::fabs(x));
    if (m + f.*g.scale >= largest) return discard(g.name);
  }
  return std::nullopt;
}
const std::optional<Verdict>& beyond_half_range(T& t) {
  return t.once_with_oracles<half_range_verdict>();
}

Verdict matches_reference(T& t, const Values& p) {
  if (const auto& v = beyond_half_range(t)) return *v;
  const Case& c = t.input();
  std::optional<BwdResult> recentred;
  return compare_grads(c, "", t.reference(), t.target(), oracle_baseline(t, naive(t), kGrads, recentred),
                       case_floors(t, p), p);
}

// ---- finite differences of L = Σ dO ⊙ O, in fp64 straight from the contract
//
// Rounding error of one evaluation of a row's loss (u = eps/2, first order,
// every γ_n = n·u rounded up to n·eps):
//   s_j = scale·Σ_d q_d k_jd          |Δs_j| <= D·eps·scale·Σ_d |q_d k_jd|
//   m   = max_j s_j                   |Δm|   <= max_j |Δs_j|
//   e_j = exp(s_j - m)                rel    <= |Δs_j| + |Δm| + eps·(|s_j - m| + 2)   =: ρ_j
//   l   = Σ_j e_j                     rel    <= max_j ρ_j + Nk·eps
//   p_j = e_j / l                     rel    <= 2·max_j ρ_j + (Nk + 1)·eps            =: π
//   T_j = Σ_d dO_d v_jd               |ΔT_j| <= D·eps·A_j,  A_j = Σ_d |dO_d v_jd|
//   L   = Σ_j p_j T_j                 |ΔL|   <= Σ_j p_j A_j · (π + (Nk + D + 1)·eps)
//                                            <= Σ_j p_j A_j · (π + (Nk·D + 1)·eps)
// (the last since Nk + D <= Nk·D + 1). The bound follows the magnitude of
// the summands, not of L: when they cancel (a gradient of 3e-8 made of terms
// of size 3) eps·|L| is far too small. Summing R rows adds R·eps·Σ|L_row|.
// Twice the first-order bound covers the second-order terms.
// Gradual underflow: a product, quotient or exp whose result is below the
// normal range also errs by up to η = denorm_min/2 absolutely (sums of
// subnormals are exact). That adds (scale·D + 1)·η to |Δs_j|, 2η to p_j (its
// exp and its division; l >= 1), D·η to T_j and η to each p_j·T_j, so
//   |ΔL| += Σ_j (2η·|T_j| + p_j·D·η + η) <= 2η·Σ_j A_j + (D + Nk)·η.
// It is what bounds L when dO or V are subnormal: a difference of two losses
// that underflow (dO = 5e-324 moves L by 5e-328) is then not held to 0.
// η above, rounded up to a double: denorm_min / 2 itself rounds to 0.
constexpr double kUnderflow = std::numeric_limits<double>::denorm_min();

struct Loss {
  double value = 0;
  double rounding = 0;  // bound on |computed - exact|, derived above
};

// What a row's loss is made of, per key j: s_j and its bound |Δs_j| (-inf
// and 0 where j is not visible), T_j and A_j. Moving one element of key j
// (of K or of V) changes key j's entries only, and recomputing them alone
// gives the same numbers as recomputing the row (the same operations in the
// same order): with rest_of, a finite difference of K or V costs O(Nk) per
// row and sample, and per evaluation O(D) (the moved key's dot) plus O(1).
struct RowParts {
  int b = 0, h = 0, i = 0;
  std::vector<double> s, ds, t, a;
  int dim = 0;
  // e_j = exp(s_j - e_max) as row_loss last computed them: rest_of sums the
  // unmoved keys' from them, so a finite difference of K costs one exp per
  // row and evaluation, not Nk. NaN: none computed yet.
  std::vector<double> e;
  double e_max = std::numeric_limits<double>::quiet_NaN();
};

size_t q_row(const Shape& s, int b, int h, int i) {
  return (size_t(b) * s.heads_q + h) * s.nq + i;
}
size_t kv_base(const Shape& s, int b, int h) {
  return (size_t(b) * s.heads_kv + h / s.group()) * s.nk;
}

// Σ_d x_d y_d and Σ_d |x_d y_d|, summed in order d = 0, 1, ...
std::pair<double, double> dot_abs(const double* x, const double* y, int n) {
  double dot = 0, abs_dot = 0;
  for (int d = 0; d < n; ++d) {
    const double term = x[d] * y[d];
    dot += term;
    abs_dot += std::fabs(term);
  }
  return {dot, abs_dot};
}

// Key j's s_j and |Δs_j| in r's row.
std::pair<double, double> score_of(const Case& c, const RowParts& r, int j) {
  const Shape& s = c.shape;
  const double scale = effective_scale(c), eps = std::numeric_limits<double>::epsilon();
  if (!visible(c, r.b, r.i, j)) return {-std::numeric_limits<double>::infinity(), 0};
  const size_t row = q_row(s, r.b, r.h, r.i), kv = kv_base(s, r.b, r.h);
  const auto [dot, abs_dot] = dot_abs(&c.q[row * s.dim], &c.k[(kv + j) * s.dim], s.dim);
  return {scale * dot, s.dim * eps * scale * abs_dot + (scale * s.dim + 1) * kUnderflow};
}

// Key j's T_j and A_j in r's row.
std::pair<double, double> value_of(const Case& c, const RowParts& r, int j) {
  const Shape& s = c.shape;
  const size_t row = q_row(s, r.b, r.h, r.i), kv = kv_base(s, r.b, r.h);
  return dot_abs(&c.d_out[row * s.dim], &c.v[(kv + j) * s.dim], s.dim);
}

// Fills r's parts for its row (r.b, r.h, r.i), reusing its buffers.
void fill_parts(const Case& c, RowParts& r) {
  for (auto* v : {&r.s, &r.ds, &r.t, &r.a}) v->resize(size_t(c.shape.nk));
  r.dim = c.shape.dim;
  for (int j = 0; j < c.shape.nk; ++j) {
    std::tie(r.s[size_t(j)], r.ds[size_t(j)]) = score_of(c, r, j);
    std::tie(r.t[size_t(j)], r.a[size_t(j)]) = value_of(c, r, j);
  }
}

RowParts row_parts(const Case& c, int b, int h, int i) {
  RowParts r{b, h, i, {}, {}, {}, {}, c.shape.dim};
  fill_parts(c, r);
  return r;
}

// The row's loss, from its parts; keeps its e_j and their max in r.
Loss row_loss(RowParts& r) {
  const double eps = std::numeric_limits<double>::epsilon();
  const size_t nk = r.s.size();
  double m = -std::numeric_limits<double>::infinity(), dm = 0;
  for (size_t j = 0; j < nk; ++j) m = std::max(m, r.s[j]), dm = std::max(dm, r.ds[j]);
  std::vector<double>& e = r.e;
  if (m == -std::numeric_limits<double>::infinity()) {
    e.assign(nk, 0.0), r.e_max = m;  // rest_of reads them; no key moved from here is at the max
    return {};
  }
  e.resize(nk);
  for (size_t j = 0; j < nk; ++j) e[j] = std::exp(r.s[j] - m);
  r.e_max = m;
  double l = 0, rho = 0;
  for (size_t j = 0; j < nk; ++j) {
    l += e[j];
    if (std::isfinite(r.s[j])) rho = std::max(rho, r.ds[j] + dm + eps * (std::fabs(r.s[j] - m) + 2));
  }
  const double pi = 2 * rho + (double(nk) + 1) * eps;
  double loss = 0, weighted = 0, a_sum = 0;
  for (size_t j = 0; j < nk; ++j) {
    a_sum += r.a[j];
    const double pj = e[j] / l;
    if (pj == 0) continue;
    loss += pj * r.t[j];
    weighted += pj * r.a[j];
  }
  const double underflow = (2 * a_sum + r.dim + double(nk)) * kUnderflow;
  return {loss, weighted * (pi + (double(nk) * r.dim + 1) * eps) + underflow};
}

// A row's sums over every key but one (the key a sample of K or V moves),
// at the unmoved case, with the e_j of the row's max M there: a loss after
// only that key moved is then O(1) beyond that key's parts (row_loss_moved),
// not O(Nk).
struct Rest {
  double M = 0;  // the unmoved row's max score, which the e_j are relative to
  double m = -std::numeric_limits<double>::infinity();  // max over the other keys' s_j
  double dm = 0;                                        // ... of their |Δs_j|
  double base = 0;  // ... of |Δs_j| + eps·(|s_j - M| + 2), over finite s_j (ρ_j less |Δm|)
  double l = 0, et = 0, ea = 0, a = 0;  // Σ e_j, Σ e_j T_j, Σ e_j A_j, Σ A_j
};

Rest rest_of(RowParts& r, int key) {
  if (r.e.size() != r.s.size() || std::isnan(r.e_max)) row_loss(r);  // the e_j, at the row's max
  const double eps = std::numeric_limits<double>::epsilon();
  Rest x;
  x.M = r.e_max;
  for (size_t j = 0; j < r.s.size(); ++j) {
    if (int(j) == key) continue;
    x.m = std::max(x.m, r.s[j]), x.dm = std::max(x.dm, r.ds[j]);
    if (std::isfinite(r.s[j])) x.base = std::max(x.base, r.ds[j] + eps * (std::fabs(r.s[j] - x.M) + 2));
    x.l += r.e[j], x.a += r.a[j];
    if (r.e[j] == 0) continue;  // as row_loss skips p_j = 0
    x.et += r.e[j] * r.t[j], x.ea += r.e[j] * r.a[j];
  }
  return x;
}

// What moving one element of K or V leaves of a key's parts.
struct KeyParts {
  double s, ds, t, a;
};

// row_loss of the unmoved row r after only `key` moved (its parts now
// `moved`), from x = rest_of(r, key): while the
// row's max is still x.M, L = (Σ_{j≠key} e_j T_j + e_key T_key) / l with
// l = Σ_{j≠key} e_j + e_key. The same roundings as row_loss's Σ_j p_j T_j
// (the sums in another order, one division for Nk): per term e_j (ρ_j) and
// T_j (D·eps·A_j), the product and the sum of Nk terms (Nk·eps), l (max ρ +
// Nk·eps) and the division (eps), so |ΔL| <= Σ_j p_j A_j·(2·max ρ + (2·Nk + D
// + 1)·eps), inside row_loss's π + (Nk·D + 1)·eps = 2·max ρ + (Nk + 1 + Nk·D
// + 1)·eps; underflow as there (l >= 1). Otherwise (the key is or becomes
// the max) row_loss of a copy of r with the key moved, made in `scratch`.
Loss row_loss_moved(const RowParts& r, const Rest& x, int key, const KeyParts& moved, RowParts& scratch) {
  const double eps = std::numeric_limits<double>::epsilon();
  const size_t k = size_t(key), nk = r.s.size();
  const double sk = moved.s, dsk = moved.ds;
  if (!std::isfinite(sk) || std::max(x.m, sk) != x.M) {
    scratch = r;
    scratch.s[k] = moved.s, scratch.ds[k] = moved.ds, scratch.t[k] = moved.t, scratch.a[k] = moved.a;
    return row_loss(scratch);
  }
  // A V move leaves s_key: its e_key is the unmoved row's (x.M is r's max).
  const double ek = sk == r.s[k] ? r.e[k] : std::exp(sk - x.M), l = x.l + ek;
  const double rho = std::max(x.dm, dsk) + std::max(x.base, dsk + eps * (std::fabs(sk - x.M) + 2));
  const double pi = 2 * rho + (double(nk) + 1) * eps;
  const double loss = (x.et + (ek == 0 ? 0 : ek * moved.t)) / l;
  const double weighted = (x.ea + (ek == 0 ? 0 : ek * moved.a)) / l;
  const double underflow = (2 * (x.a + moved.a) + r.dim + double(nk)) * kUnderflow;
  return {loss, weighted * (pi + (double(nk) * r.dim + 1) * eps) + underflow};
}

// A query row's dot products with every key without the term of the one
// element d of Q a sample moves: a loss after q_d moved then recomputes each
// s_j from it in O(1), not O(D). Σ_d in another order (d last) has the same
// bound, D·eps·Σ_d |q_d k_jd| (score_of's).
struct QueryRest {
  std::vector<double> dot, abs, k_d;  // per key: Σ_{d'≠d} q_d' k_jd', Σ_{d'≠d} |q_d' k_jd'|, k_jd
  std::vector<char> visible;
};

void query_rest(const Case& c, const RowParts& r, size_t d, QueryRest& x) {
  const Shape& s = c.shape;
  const size_t nk = size_t(s.nk), row = q_row(s, r.b, r.h, r.i), kv = kv_base(s, r.b, r.h);
  for (auto* v : {&x.dot, &x.abs, &x.k_d}) v->assign(nk, 0.0);
  x.visible.assign(nk, 0);
  for (size_t j = 0; j < nk; ++j) {
    x.visible[j] = visible(c, r.b, r.i, int(j));
    const double* q = &c.q[row * s.dim];
    const double* k = &c.k[(kv + j) * s.dim];
    for (size_t e = 0; e < size_t(s.dim); ++e) {
      if (e == d) continue;
      const double term = q[e] * k[e];
      x.dot[j] += term, x.abs[j] += std::fabs(term);
    }
    x.k_d[j] = k[d];
  }
}

// score_of of every key of r after q_d became `q_d`, from x = query_rest, into r.
void scores_moved(const Case& c, RowParts& r, const QueryRest& x, double q_d) {
  const Shape& s = c.shape;
  const double scale = effective_scale(c), eps = std::numeric_limits<double>::epsilon();
  for (size_t j = 0; j < x.dot.size(); ++j) {
    if (!x.visible[j]) continue;  // -inf and 0, as fill_parts left them
    const double term = q_d * x.k_d[j];
    r.s[j] = scale * (x.dot[j] + term);
    r.ds[j] = s.dim * eps * scale * (x.abs[j] + std::fabs(term)) + (scale * s.dim + 1) * kUnderflow;
  }
}

Verdict finite_differences(T& t, const Values& p) {
  Case c = t.input();
  c.dtype = DType::f64;  // the same values, through the target's fp64 path
  // ... and the same softmax scale: the case's, rounded to its dtype's
  // compute type (f32 for f32 and the halves), given explicitly, so that the
  // fp64 copy's scores are the case's and so are its error scales: their dQ,
  // dK and dV fields (all that is read here) depend on the dtype only through
  // the scale (u and τ enter only the storage fields, sdq and the like). The
  // fp64 path of the default scale 1/√D is what an f64 case's run checks.
  c.scale = effective_scale(t.input());
  const Shape& s = c.shape;
  // An f64 case is that path already: its (cached) run, not a second one.
  std::optional<BwdResult> rerun;
  if (t.input().dtype != DType::f64) rerun = t.run_target(c);
  const BwdResult& got = rerun ? *rerun : t.target();
  const BwdResult& ref = t.reference();
  const Scales& scales = t.once<backward_scales>();
  // Per tensor and head (bounds.h: dQ per query head, dK and dV per kv
  // head): the kernel's floor scale and the largest reference entry; an
  // element is judged against its own head's.
  std::vector<double> kernel_scale[3], magnitude[3];
  auto group_of = [&](int w, size_t i) {
    const size_t size = (ref.*kGrads[w].field).size(), groups = kernel_scale[w].size();
    return std::min(i / std::max<size_t>(1, size / groups), groups - 1);
  };
  for (int w = 0; w < 3; ++w) {
    kernel_scale[w] = scales.of(kGrads[w].scale);
    magnitude[w].assign(kernel_scale[w].size(), 0.0);
    const std::vector<double>& r = ref.*kGrads[w].field;
    for (size_t i = 0; i < r.size(); ++i) {
      double& m = magnitude[w][group_of(w, i)];
      m = std::max(m, std::fabs(r[i]));
    }
  }
  const size_t nq_all = c.q.size(), nkv = c.k.size(), total = nq_all + 2 * nkv;
  const int64_t samples = std::min<int64_t>(p.integer("samples"), int64_t(total));
  const double eps = std::numeric_limits<double>::epsilon();
  // Every row's parts on the unmoved case, made when a sample first needs
  // them and kept for the others (unless that would take more than 64 MB).
  const size_t all_rows = size_t(s.batch) * s.heads_q * s.nq;
  const bool keep = double(all_rows) * s.nk * 4 * sizeof(double) <= 64e6;
  std::vector<std::optional<RowParts>> kept(keep ? all_rows : 0);
  // rows[0, used): the rows whose loss depends on the sampled element. They
  // live across samples so that their buffers are reused, not reallocated.
  std::vector<RowParts> rows;
  size_t used = 0;
  // A sample of K or V: the unmoved rows (kept or in rows) and their sums
  // over the other keys; of Q: its one row's dots without q_d.
  std::vector<RowParts*> unmoved;
  std::vector<Rest> rests;
  RowParts scratch;
  QueryRest qrest;
  auto use_row = [&](int b, int h, int i) -> RowParts& {
    if (rows.size() <= used) rows.resize(used + 1);
    RowParts& r = rows[used++];
    r.b = b, r.h = h, r.i = i, r.e_max = std::numeric_limits<double>::quiet_NaN();
    return r;
  };
  for (int64_t n = 0; n < samples; ++n) {
    const size_t flat =
        samples == int64_t(total) ? size_t(n) : size_t(rng::hash(0xfd, 0, uint64_t(n)) % total);
    const int which = flat < nq_all ? 0 : flat < nq_all + nkv ? 1 : 2;
    const size_t at = which == 0 ? flat : which == 1 ? flat - nq_all : flat - nq_all - nkv;
    std::vector<double>& x = which == 0 ? c.q : which == 1 ? c.k : c.v;
    const Grad& g = kGrads[which];
    // The rows whose loss depends on this element, the key it moves, and
    // how fast it moves their scores: |∂s_j/∂x| <= sensitivity (scale·|k_jd|
    // for q_d, scale·|q_d| for k_jd; V moves no score, and L is linear in it).
    used = 0;
    unmoved.clear();
    int key = -1;
    const size_t d = at % size_t(s.dim);
    double sensitivity = 0;
    if (which == 0) {
      const size_t row = at / size_t(s.dim);
      RowParts& r = use_row(int(row / size_t(s.heads_q * s.nq)), int(row / size_t(s.nq) % size_t(s.heads_q)),
                            int(row % size_t(s.nq)));
      const size_t kv = kv_base(s, r.b, r.h);
      for (int j = 0; j < s.nk; ++j)
        sensitivity = std::max(sensitivity, std::fabs(c.k[(kv + j) * s.dim + d]));
      fill_parts(c, r);  // its value parts: Q moves only its scores
      query_rest(c, r, d, qrest);
    } else {
      const size_t bh = at / size_t(s.dim) / size_t(s.nk);
      const int b = int(bh / size_t(s.heads_kv)), kvh = int(bh % size_t(s.heads_kv));
      key = int(at / size_t(s.dim) % size_t(s.nk));
      for (int h = kvh * s.group(); h < (kvh + 1) * s.group(); ++h)
        for (int i = 0; i < s.nq; ++i) {
          if (which == 1) sensitivity = std::max(sensitivity, std::fabs(c.q[q_row(s, b, h, i) * s.dim + d]));
          // A row that does not see the key has the same loss at every
          // offset (its s_j is -inf, so p_j = 0): it adds nothing to the
          // differences and is left out of them and of their rounding.
          if (!visible(c, b, i, key)) continue;
          if (!keep) {
            fill_parts(c, use_row(b, h, i));
            continue;
          }
          // The unmoved row's parts and e_j, made once and read in place.
          auto& slot = kept[q_row(s, b, h, i)];
          if (!slot) {
            slot = row_parts(c, b, h, i);
            row_loss(*slot);
          }
          unmoved.push_back(&*slot);
        }
      for (size_t k = 0; k < used; ++k) unmoved.push_back(&rows[k]);  // rows no longer grows
      // Each row's sums over the keys that stay put, once per sample.
      rests.clear();
      for (RowParts* r : unmoved) rests.push_back(rest_of(*r, key));
    }
    const double x0 = x[at];
    // The loss at x0 + offset, with the bound on its rounding error (row_loss
    // plus the sum over rows, doubled for the second-order terms).
    auto loss_at = [&](double offset) {
      x[at] = x0 + offset;
      Loss sum;
      double abs_rows = 0;
      auto add = [&](const Loss& l) {
        sum.value += l.value;
        sum.rounding += l.rounding;
        abs_rows += std::fabs(l.value);
      };
      if (which == 0) {
        scores_moved(c, rows[0], qrest, x[at]);
        add(row_loss(rows[0]));
      }
      for (size_t k = 0; k < unmoved.size(); ++k) {
        const RowParts& r = *unmoved[k];
        KeyParts moved{r.s[size_t(key)], r.ds[size_t(key)], r.t[size_t(key)], r.a[size_t(key)]};
        if (which == 1) std::tie(moved.s, moved.ds) = score_of(c, r, key);
        if (which == 2) std::tie(moved.t, moved.a) = value_of(c, r, key);
        add(row_loss_moved(r, rests[k], key, moved, scratch));
      }
      const size_t rows_summed = which == 0 ? 1 : unmoved.size();
      sum.rounding = 2 * (sum.rounding + double(rows_summed) * eps * abs_rows);
      x[at] = x0;
      return sum;
    };
    sensitivity *= effective_scale(c);
    // The step: `step` relative to max(1, |x0|), but moving no score by more
    // than `step` (the loss varies on the scale of a unit change of a score:
    // a key of 2e4 stepped by 2 would move its score by several units,
    // where the differences say nothing of the derivative).
    const double h = p.real("step") * std::min(std::max(1.0, std::fabs(x0)), 1 / sensitivity);
    // The steps taken: x0 ± h rounds, so each difference divides by the
    // exact distance between its two points (x0 ± h and x0 are within a
    // factor 2 of each other, so the subtractions are exact). What rounding
    // leaves is the asymmetry of the two sides, at most ulp(x0), which adds
    // ulp(x0)/2·|f''| to a central difference: relative to f', about
    // eps·|x0|·sensitivity, far inside rtol.
    const double up1 = (x0 + h) - x0, down1 = x0 - (x0 - h), up2 = (x0 + h / 2) - x0,
                 down2 = x0 - (x0 - h / 2);
    const Loss l1p = loss_at(up1), l1m = loss_at(-down1), l2p = loss_at(up2), l2m = loss_at(-down2);
    const double fd1 = (l1p.value - l1m.value) / (up1 + down1), fd2 = (l2p.value - l2m.value) / (up2 + down2);
    const double estimate = (4 * fd2 - fd1) / 3;  // Richardson: O(h⁴)
    // Rounding of the differences: |Δfd1| <= (δ1p + δ1m) / (up1 + down1), |Δfd2| <=
    // (δ2p + δ2m) / (up2 + down2), and the estimate (4·fd2 - fd1) / 3 carries (4·|Δfd2| + |Δfd1|) / 3.
    const double roundoff =
        (4 * (l2p.rounding + l2m.rounding) / (up2 + down2) + (l1p.rounding + l1m.rounding) / (up1 + down1)) /
        3;
    // Truncation: fd1 = f' + h²·f'''/6 + O(h⁴) and fd2 = f' + h²·f'''/24 + O(h⁴); Richardson
    // removes the h² term and leaves O(h⁴), which |fd2 - fd1| (= h²·|f'''|/8 + O(h⁴)) bounds
    // with room while h is inside the function's scale; 4 × that for safety. |fd2 - fd1|
    // also carries rounding noise, which only widens the bound.
    const double truncation = 4 * std::fabs(fd2 - fd1);
    // The kernel's own fp64 rounding (bounds.h) on top of the difference's error.
    const size_t group = group_of(which, at);
    const double kernel = p.real("floor_ulps") * eps * kernel_scale[which][group];
    const double allowed =
        p.real("rtol") * (magnitude[which][group] + std::fabs(estimate)) + truncation + roundoff + kernel;
    const double value = (got.*g.field)[at];
    if (!(std::fabs(value - estimate) <= allowed))
      return Verdict::fail(
          fmt::format("{}{} = {} (fp64 path) but finite differences give {} (allowed error {:.3g})", g.name,
                      element_name(at, which == 0 ? q_dims(s) : kv_dims(s)), value, estimate, allowed),
          {{"gradient", value}, {"finite_difference", estimate}, {"allowed", allowed}});
  }
  return Verdict::pass();
}

// ---- identities
Verdict d_identity(T& t, const Values& p) {
  const Case& c = t.input();
  const Shape& s = c.shape;
  return compare_tensor("D (rowsum(P ⊙ dP) = rowsum(dO ⊙ O)) ", {s.batch, s.heads_q, s.nq}, t.reference().d,
                        t.target().d, naive(t).d, p.real("k"), case_floors(t, p).of(&ErrorScales::d));
}

// ---- D to the compute precision
// D stays in the compute precision T (f32 for f16/bf16: attention.h), so a
// correct kernel's D is one of the contract's two sums over the forward its
// gradients were taken from (BwdResult::o and ::lse: its own forward, or the
// one an external backward was given), rounded only by T's arithmetic
// (u = T's unit roundoff, γ_n = n·u / (1 - n·u), any summation order):
//   A = Σ_d dO_d O_d        |D - A| <= γ_D Σ_d |dO_d O_d|
//   B = Σ_j P_j dP_j, P_j = exp(s_j - LSE), s_j = scale·Σ_d q_d k_jd, dP_j = Σ_d dO_d v_jd:
//       s_j errs by (γ_D + 2u)·scale·Σ_d |q_d k_jd| (the dot, the scale's
//       rounding and product), P_j relatively by that + u·|s_j - LSE| + 2u
//       (the subtraction, exp); a kernel that forms P as exp(s_j - m) / l
//       from the forward's m and l (FlashAttention 1, a materialized
//       softmax), not from the stored LSE = m + log l, is off by that
//       rounding too, u·(|LSE| + log n) + 4u more; dP_j by γ_D Σ_d |dO_d v_jd|, each product P_j dP_j
//       by u, and the sum over the visible keys by γ_n Σ_j P_j |dP_j|:
//       |D - B| <= Σ_j P_j (ρ_j |dP_j| + γ_D Σ_d |dO_d v_jd| + u |dP_j|) + γ_n Σ_j P_j |dP_j|.
// Twice these cover the second-order terms; A and B themselves are computed
// here in fp64, which adds the same bounds with u = 2^-53; a product or exp
// below T's normal range adds up to denorm_min(T) each. The tolerance
// policy's floor is a u of the storage type (2^-11, 2^-8) wider than this
// for half cases: a D rounded to f16/bf16 (the mutant d_in_storage) passes
// it and fails here. Fully masked rows: O = 0 and P = 0, so D must be 0.
Verdict d_from_own_forward(T& t, const Values&) {
  if (const auto& v = beyond_half_range(t)) return *v;
  const Case& c = t.input();
  const Shape& s = c.shape;
  const BwdResult& r = t.target();
  const size_t rows = size_t(s.batch) * s.heads_q * s.nq;
  if (r.d.size() != rows || r.o.size() != rows * size_t(s.dim) || r.lse.size() != rows)
    return Verdict::discard("the target reports no O, LSE or D of every row");
  const double u = unit_roundoff(c.dtype == DType::f64 ? DType::f64 : DType::f32), u64 = 0x1p-53;
  const double tiny = denorm_min(c.dtype == DType::f64 ? DType::f64 : DType::f32);
  const double scale = effective_scale(c);
  std::vector<double> pj(size_t(s.nk)), dpj(size_t(s.nk)), dpabs(size_t(s.nk)), sj(size_t(s.nk)),
      sabs(size_t(s.nk));
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h)
      for (int i = 0; i < s.nq; ++i) {
        const size_t row = q_row(s, b, h, i), kv = kv_base(s, b, h);
        const double* d_out = &c.d_out[row * s.dim];
        const double* q = &c.q[row * s.dim];
        const double got = r.d[row], lse = r.lse[row];
        // A, from the reported O.
        double a = 0, a_abs = 0;
        for (int d = 0; d < s.dim; ++d)
          a += d_out[d] * r.o[row * s.dim + d], a_abs += std::fabs(d_out[d] * r.o[row * s.dim + d]);
        const double bound_a = (2 * gamma_n(s.dim, u) + gamma_n(s.dim, u64)) * a_abs + 2 * s.dim * tiny;
        // Only a finite A judges: an inf in the reported O makes bound_a inf,
        // which would allow any D (the B check below still can).
        if (std::isfinite(a_abs) && std::fabs(got - a) <= bound_a) continue;
        // B, from the reported LSE.
        double bsum = 0, bound_b = 0;
        if (lse != -std::numeric_limits<double>::infinity()) {
          int n = 0;
          double p_dp_abs = 0, terms = 0, terms64 = 0;
          for (int j = 0; j < s.nk; ++j) {
            if (!visible(c, b, i, j)) continue;
            ++n;
            // Plain variables, not structured bindings: the lambda below
            // captures them (clang before 16 cannot capture a binding).
            double qk = 0, qk_abs = 0, dp = 0, dp_abs = 0;
            std::tie(qk, qk_abs) = dot_abs(q, &c.k[(kv + j) * s.dim], s.dim);
            std::tie(dp, dp_abs) = dot_abs(d_out, &c.v[(kv + j) * s.dim], s.dim);
            const double sc = scale * qk, p = std::exp(sc - lse);
            // The first-order bound of term j with unit roundoff `w` (above).
            auto term = [&](double w) {
              const double rho = (gamma_n(s.dim, w) + 2 * w) * scale * qk_abs +
                                 w * (std::fabs(sc - lse) + std::fabs(lse) + std::log(double(s.nk)) + 6);
              return p * (rho * std::fabs(dp) + gamma_n(s.dim, w) * dp_abs + w * std::fabs(dp));
            };
            bsum += p * dp;
            p_dp_abs += p * std::fabs(dp);
            terms += term(u) + tiny * std::fabs(dp);
            terms64 += term(u64);
          }
          bound_b = 2 * (terms + gamma_n(n, u) * p_dp_abs) + terms64 + gamma_n(n, u64) * p_dp_abs;
        }
        if (std::fabs(got - bsum) <= bound_b) continue;
        return Verdict::fail(
            fmt::format("D{} = {} is neither rowsum(dO ⊙ O) = {} (allowed {:.3g}) nor rowsum(P ⊙ dP) = {} "
                        "(allowed {:.3g}) of its own forward to {} rounding",
                        element_name(row, {s.batch, s.heads_q, s.nq}), got, a, bound_a, bsum, bound_b,
                        c.dtype == DType::f64 ? "f64" : "f32"),
            {{"d", got}, {"rowsum_do_o", a}, {"rowsum_p_dp", bsum}, {"allowed", bound_a}});
      }
  return Verdict::pass();
}

// Σ_j over keys of one (batch, kv head), per d.
std::vector<double> key_sums(const Shape& s, const std::vector<double>& t) {
  std::vector<double> out(size_t(s.batch) * s.heads_kv * s.dim, 0.0);
  for (size_t bh = 0; bh < size_t(s.batch) * s.heads_kv; ++bh)
    for (int j = 0; j < s.nk; ++j)
      for (int d = 0; d < s.dim; ++d) out[bh * s.dim + d] += t[(bh * s.nk + j) * s.dim + d];
  return out;
}

Verdict dk_sums_to_zero(T& t, const Values& p) {
  if (const auto& v = beyond_half_range(t)) return *v;
  const Case& c = t.input();
  const Shape& s = c.shape;
  const std::vector<double> zero(size_t(s.batch) * s.heads_kv * s.dim, 0.0);
  return compare_tensor("Σ_j dK_j ", {s.batch, s.heads_kv, s.dim}, zero, key_sums(s, t.target().dk),
                        key_sums(s, naive(t).dk), p.real("k"), case_floors(t, p).of(&ErrorScales::dk_sum));
}

Verdict dv_sums_to_do(T& t, const Values& p) {
  if (const auto& v = beyond_half_range(t)) return *v;
  const Case& c = t.input();
  const Shape& s = c.shape;
  std::vector<double> expected(size_t(s.batch) * s.heads_kv * s.dim, 0.0);
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.nq; ++i) {
      if (row_fully_masked(c, b, i)) continue;
      for (int h = 0; h < s.heads_q; ++h)
        for (int d = 0; d < s.dim; ++d)
          expected[(size_t(b) * s.heads_kv + h / s.group()) * s.dim + d] +=
              c.d_out[((size_t(b) * s.heads_q + h) * s.nq + i) * s.dim + d];
    }
  return compare_tensor("Σ_j dV_j vs Σ_i dO_i over rows not fully masked ", {s.batch, s.heads_kv, s.dim},
                        expected, key_sums(s, t.target().dv), key_sums(s, naive(t).dv), p.real("k"),
                        case_floors(t, p).of(&ErrorScales::dv_sum));
}

Verdict masked_rows_zero(T& t, const Values&) {
  const Case& c = t.input();
  const Shape& s = c.shape;
  const auto masked = fully_masked_rows(c);
  bool unseen_key = false;
  for (int b = 0; b < s.batch && !unseen_key; ++b)
    for (int j = 0; j < s.nk && !unseen_key; ++j) {
      bool seen = false;
      for (int i = 0; i < s.nq && !seen; ++i) seen = visible(c, b, i, j);
      unseen_key = !seen;
    }
  if (masked.empty() && !unseen_key) return Verdict::discard("no fully masked row and no unseen key");
  const BwdResult& r = t.target();
  for (auto [b, i] : masked)
    for (int h = 0; h < s.heads_q; ++h) {
      const size_t row = (size_t(b) * s.heads_q + h) * s.nq + i;
      for (int d = 0; d < s.dim; ++d)
        if (r.dq[row * s.dim + d] != 0)
          return Verdict::fail(
              fmt::format("fully masked row [b={},h={},i={}] has dQ[{}] = {} (expected 0)", b, h, i, d,
                          r.dq[row * s.dim + d]),
              {{"batch", double(b)}, {"head", double(h)}, {"row", double(i)}, {"dq", r.dq[row * s.dim + d]}});
    }
  // Keys no query of the batch sees get no gradient at all.
  for (int b = 0; b < s.batch; ++b)
    for (int j = 0; j < s.nk; ++j) {
      bool seen = false;
      for (int i = 0; i < s.nq && !seen; ++i) seen = visible(c, b, i, j);
      if (seen) continue;
      for (int kvh = 0; kvh < s.heads_kv; ++kvh)
        for (int d = 0; d < s.dim; ++d) {
          const size_t at = ((size_t(b) * s.heads_kv + kvh) * s.nk + j) * s.dim + d;
          if (r.dk[at] != 0 || r.dv[at] != 0)
            return Verdict::fail(
                fmt::format("key [b={},kv={},j={}] is visible to no query but has dK = {}, dV = {}", b, kvh,
                            j, r.dk[at], r.dv[at]),
                {{"batch", double(b)}, {"key", double(j)}, {"dk", r.dk[at]}, {"dv", r.dv[at]}});
        }
    }
  return Verdict::pass();
}

Verdict finite_outputs(T& t, const Values&) {
  if (const auto& v = beyond_half_range(t)) return *v;
  const Shape& s = t.input().shape;
  const BwdResult& r = t.target();
  const BwdResult& ref = t.reference();
  for (const Grad& g : kGrads) {
    const auto& got = r.*g.field;
    const auto& want = ref.*g.field;
    for (size_t i = 0; i < want.size() && i < got.size(); ++i)
      if (std::isfinite(want[i]) && !std::isfinite(got[i]))
        return Verdict::fail(
            fmt::format("{}{} is {} where the reference has {}", g.name,
                        element_name(i, g.query_side ? q_dims(s) : kv_dims(s)), got[i], want[i]),
            {{"index", double(i)}, {"value", got[i]}, {"reference", want[i]}});
  }
  return Verdict::pass();
}

Verdict tile_size_invariance(T& t, const Values& p) {
  if (const auto& v = beyond_half_range(t)) return *v;
  std::optional<BwdResult> recentred;
  return tilings_agree(t, oracle_baseline(t, naive(t), kGrads, recentred), case_floors(t, p), p.real("k"),
                       kGrads);
}

// dS is unchanged by a common key shift and Σ_j dS_ij = 0, so dQ, dK and dV
// are all unchanged.
Verdict shift_invariance(T& t, const Values& p) {
  if (const auto& v = beyond_half_range(t)) return *v;
  const Case& c = t.input();
  const Case shifted = keys_shifted(c);
  return compare_grads(c, "after shifting every key: ", t.reference(), t.run_target(shifted),
                       naive_backward(shifted), floors(shifted, true, p.real("floor_ulps")), p);
}

// The naive baseline: the case's, permuted (as attention.fwd's).
Verdict permutation_equivariance(T& t, const Values& p) {
  if (const auto& v = beyond_half_range(t)) return *v;
  const Case& c = t.input();
  const auto perm = permutation_of(c);
  if (!perm) return no_permutation(c);
  std::optional<BwdResult> recentred;
  return compare_grads(
      c, "permuted keys and queries: ", permuted(t.reference(), c.shape, *perm), t.run_target(perm->c),
      permuted(oracle_baseline(t, naive(t), kGrads, recentred), c.shape, *perm), case_floors(t, p), p);
}

}  // namespace bwd
}  // namespace

void register_backward_invariants(FamilyDef<BwdTraits>& f) {
  using namespace bwd;
  f.invariant(
      {"matches_reference",
       "dQ, dK, dV within k × the naive same-precision error + floor of the fp64 reference", policy_params()},
      matches_reference);
  f.invariant(
      {"finite_differences",
       "gradients of the fp64 path match central differences (Richardson) of Σ dO ⊙ O",
       {field::integer("samples", 32, 1, 1 << 20, "elements of Q, K, V checked per case (all when fewer)"),
        field::real("step", 1e-4, 1e-12, 1,
                    "difference step, relative to max(1, |x|), and at most this much change of any score"),
        field::rtol(1e-6, "allowed error relative to the largest gradient entry"),
        field::real("floor_ulps", 8, 0, 1e12, "plus the kernel's fp64 rounding, as in matches_reference")}},
      finite_differences);
  f.invariant({"D_identity", "the D the kernel used equals rowsum(P ⊙ dP) = rowsum(dO ⊙ O)", policy_params()},
              d_identity);
  f.invariant({"D_from_own_forward",
               "D is rowsum(dO ⊙ O) or rowsum(P ⊙ dP) of the forward the gradients were taken from (its O, "
               "its LSE), rounded only by the compute precision (D is not stored in f16/bf16)",
               {}},
              d_from_own_forward);
  f.invariant({"dk_sums_to_zero", "Σ_j dK_j = 0 per (batch, kv head): softmax gradients sum to zero",
               policy_params()},
              dk_sums_to_zero);
  f.invariant(
      {"dv_sums_to_do", "Σ_j dV_j = Σ_i dO_i over the rows that are not fully masked", policy_params()},
      dv_sums_to_do);
  f.invariant({"masked_rows_zero",
               "fully masked rows get dQ = 0 and keys no query sees get dK = dV = 0, exactly",
               {},
               needs_masked_rows},
              masked_rows_zero);
  f.invariant({"finite_outputs", "no NaN or inf in dQ, dK, dV where the reference has none", {}},
              finite_outputs);
  f.invariant(
      {"tile_size_invariance", "other tilings agree within the policy", policy_params(), needs_other_tiling},
      tile_size_invariance);
  f.invariant(
      {"shift_invariance", "adding one vector to every key leaves dQ, dK and dV unchanged", policy_params()},
      shift_invariance);
  f.invariant(
      {"permutation_equivariance", "permuting keys with values and queries with dO permutes the gradients",
       policy_params(), needs_permutation},
      permutation_equivariance);
  register_backward_store_invariants(f);
  register_workspace_bounded(f);
}

}  // namespace kprop::attention
