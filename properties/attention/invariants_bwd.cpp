// attention.bwd invariants: gradients against the fp64 reference under the
// dtype policy, against fp64 finite differences of the contract's loss
// Σ dO ⊙ O, and the identities of the softmax gradient.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "kprop/rng.h"
#include "kprop/tolerance.h"
#include "properties/attention/bounds.h"
#include "properties/attention/checks.h"
#include "properties/attention/family.h"

namespace kprop::attention {
namespace {

using T = Trial<BwdTraits>;

std::vector<int> q_dims(const Shape& s) {
  return {s.batch, s.heads_q, s.nq, s.dim};
}
std::vector<int> kv_dims(const Shape& s) {
  return {s.batch, s.heads_kv, s.nk, s.dim};
}

struct Grad {
  const char* name;
  std::vector<double> BwdResult::*field;
  double ErrorScales::*scale;
  bool query_side;
};
const Grad kGrads[] = {{"dQ", &BwdResult::dq, &ErrorScales::dq, true},
                       {"dK", &BwdResult::dk, &ErrorScales::dk, false},
                       {"dV", &BwdResult::dv, &ErrorScales::dv, false}};

Verdict compare_grads(const Case& c, const std::string& what, const BwdResult& expected, const BwdResult& got,
                      const BwdResult& naive, const ErrorScales& e, const Values& p) {
  const double floor = p.real("floor_ulps") * epsilon(c.dtype), k = p.real("k");
  for (const Grad& g : kGrads) {
    Verdict v = compare_tensor(what + g.name, g.query_side ? q_dims(c.shape) : kv_dims(c.shape),
                               expected.*g.field, got.*g.field, naive.*g.field, k, floor * (e.*g.scale));
    if (v.outcome != Outcome::pass) return v;
  }
  return Verdict::pass();
}

Verdict matches_reference(T& t, const Values& p) {
  const Case& c = t.input();
  return compare_grads(c, "", t.reference(), t.target(), naive_backward(c), error_scales(c, true), p);
}

// ---- finite differences of L = Σ dO ⊙ O, in fp64 straight from the contract
double row_loss(const Case& c, int b, int h, int i) {
  const Shape& s = c.shape;
  const double scale = effective_scale(c);
  const size_t row = (size_t(b) * s.heads_q + h) * s.nq + i;
  const size_t kv = (size_t(b) * s.heads_kv + h / s.group()) * s.nk;
  std::vector<double> sc(size_t(s.nk), -std::numeric_limits<double>::infinity());
  double m = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < s.nk; ++j)
    if (visible(c, b, i, j)) {
      double dot = 0;
      for (int d = 0; d < s.dim; ++d) dot += c.q[row * s.dim + d] * c.k[(kv + j) * s.dim + d];
      m = std::max(m, sc[size_t(j)] = scale * dot);
    }
  if (m == -std::numeric_limits<double>::infinity()) return 0;
  double l = 0, loss = 0;
  for (int j = 0; j < s.nk; ++j) l += std::exp(sc[size_t(j)] - m);
  for (int j = 0; j < s.nk; ++j) {
    const double pj = std::exp(sc[size_t(j)] - m) / l;
    if (pj == 0) continue;
    for (int d = 0; d < s.dim; ++d) loss += pj * c.d_out[row * s.dim + d] * c.v[(kv + j) * s.dim + d];
  }
  return loss;
}

Verdict finite_differences(T& t, const Values& p) {
  Case c = t.input();
  c.dtype = DType::f64;  // the same values, through the target's fp64 path
  const Shape& s = c.shape;
  const BwdResult got = t.run_target(c);
  const BwdResult& ref = t.reference();
  const ErrorScales scales = error_scales(c, true);
  const size_t nq_all = c.q.size(), nkv = c.k.size(), total = nq_all + 2 * nkv;
  const int64_t samples = std::min<int64_t>(p.integer("samples"), int64_t(total));
  for (int64_t n = 0; n < samples; ++n) {
    const size_t flat =
        samples == int64_t(total) ? size_t(n) : size_t(rng::hash(0xfd, 0, uint64_t(n)) % total);
    const int which = flat < nq_all ? 0 : flat < nq_all + nkv ? 1 : 2;
    const size_t at = which == 0 ? flat : which == 1 ? flat - nq_all : flat - nq_all - nkv;
    std::vector<double>& x = which == 0 ? c.q : which == 1 ? c.k : c.v;
    const Grad& g = kGrads[which];
    // The rows whose loss depends on this element.
    std::vector<std::array<int, 3>> rows;
    if (which == 0) {
      const size_t row = at / size_t(s.dim);
      rows.push_back({int(row / size_t(s.heads_q * s.nq)), int(row / size_t(s.nq) % size_t(s.heads_q)),
                      int(row % size_t(s.nq))});
    } else {
      const size_t bh = at / size_t(s.dim) / size_t(s.nk);
      const int b = int(bh / size_t(s.heads_kv)), kvh = int(bh % size_t(s.heads_kv));
      for (int h = kvh * s.group(); h < (kvh + 1) * s.group(); ++h)
        for (int i = 0; i < s.nq; ++i) rows.push_back({b, h, i});
    }
    const double x0 = x[at];
    auto loss_at = [&](double value) {
      x[at] = value;
      double sum = 0;
      for (auto [b, h, i] : rows) sum += row_loss(c, b, h, i);
      x[at] = x0;
      return sum;
    };
    const double h = p.real("step") * std::max(1.0, std::fabs(x0));
    const double l1p = loss_at(x0 + h), l1m = loss_at(x0 - h), l2p = loss_at(x0 + h / 2),
                 l2m = loss_at(x0 - h / 2);
    const double fd1 = (l1p - l1m) / (2 * h), fd2 = (l2p - l2m) / h;
    // Rounding in the losses, amplified by 1/h.
    const double roundoff = 64 * std::numeric_limits<double>::epsilon() *
                            (std::fabs(l1p) + std::fabs(l1m) + std::fabs(l2p) + std::fabs(l2m) + 1e-300) / h;
    const double estimate = (4 * fd2 - fd1) / 3;  // Richardson: O(h⁴)
    const std::vector<double>& ref_t = ref.*g.field;
    double magnitude = 0;
    for (double r : ref_t) magnitude = std::max(magnitude, std::fabs(r));
    // The kernel's own fp64 rounding (bounds.h) on top of the difference's error.
    const double kernel = p.real("floor_ulps") * std::numeric_limits<double>::epsilon() * (scales.*g.scale);
    const double allowed =
        p.real("rtol") * (magnitude + std::fabs(estimate)) + 4 * std::fabs(fd2 - fd1) + roundoff + kernel;
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
                        t.target().d, naive_backward(c).d, p.real("k"),
                        p.real("floor_ulps") * epsilon(c.dtype) * error_scales(c, true).d);
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
  const Case& c = t.input();
  const Shape& s = c.shape;
  const std::vector<double> zero(size_t(s.batch) * s.heads_kv * s.dim, 0.0);
  return compare_tensor("Σ_j dK_j ", {s.batch, s.heads_kv, s.dim}, zero, key_sums(s, t.target().dk),
                        key_sums(s, naive_backward(c).dk), p.real("k"),
                        p.real("floor_ulps") * epsilon(c.dtype) * error_scales(c, true).dk_sum);
}

Verdict dv_sums_to_do(T& t, const Values& p) {
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
                        expected, key_sums(s, t.target().dv), key_sums(s, naive_backward(c).dv), p.real("k"),
                        p.real("floor_ulps") * epsilon(c.dtype) * error_scales(c, true).dv_sum);
}

Verdict masked_rows_zero(T& t, const Values&) {
  const Case& c = t.input();
  const Shape& s = c.shape;
  const BwdResult& r = t.target();
  for (auto [b, i] : fully_masked_rows(c))
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
  const Case& c = t.input();
  const BwdResult& a = t.target();
  const BwdResult& ref = t.reference();
  const BwdResult naive = naive_backward(c);
  const ErrorScales e = error_scales(c, true);
  const double floor = p.real("floor_ulps") * epsilon(c.dtype), k = p.real("k");
  for (const Case& other : other_tilings(c)) {
    const BwdResult b = t.run_target(other);
    for (const Grad& g : kGrads) {
      const double naive_error = max_error(ref.*g.field, naive.*g.field);
      const ToleranceReport r =
          compare_close(a.*g.field, b.*g.field, 2 * (k * naive_error + floor * (e.*g.scale)), 0);
      if (!r.ok)
        return Verdict::fail(fmt::format("tiles {}x{} vs {}x{}: {} {}", c.block_q, c.block_k, other.block_q,
                                         other.block_k, g.name, r.message),
                             {{"other_block_q", double(other.block_q)},
                              {"other_block_k", double(other.block_k)},
                              {"difference", r.target_error},
                              {"allowed", r.allowed}});
    }
  }
  return Verdict::pass();
}

// dS is unchanged by a common key shift and Σ_j dS_ij = 0, so dQ, dK and dV
// are all unchanged.
Verdict shift_invariance(T& t, const Values& p) {
  const Case& c = t.input();
  const Case shifted = keys_shifted(c);
  return compare_grads(c, "after shifting every key: ", t.reference(), t.run_target(shifted),
                       naive_backward(shifted), error_scales(shifted, true), p);
}

Verdict permutation_equivariance(T& t, const Values& p) {
  const Case& c = t.input();
  const auto perm = permutation_of(c);
  if (!perm) return Verdict::pass();  // causal: no permutation keeps the mask
  const Shape& s = c.shape;
  const BwdResult& ref = t.reference();
  BwdResult expected;
  expected.dq = permute_rows(ref.dq, s, s.heads_q, s.nq, s.dim, perm->queries);
  expected.dk = permute_rows(ref.dk, s, s.heads_kv, s.nk, s.dim, perm->keys);
  expected.dv = permute_rows(ref.dv, s, s.heads_kv, s.nk, s.dim, perm->keys);
  return compare_grads(c, "permuted keys and queries: ", expected, t.run_target(perm->c),
                       naive_backward(perm->c), error_scales(c, true), p);
}

Verdict workspace_bounded(T& t, const Values& p) {
  return check_workspace(t.input(), t.target_info(), t.target().workspace_peak, p);
}

}  // namespace

void register_backward_invariants(FamilyDef<BwdTraits>& f) {
  f.invariant({"matches_reference",
               "dQ, dK, dV within k × the naive same-precision error + floor of the fp64 reference",
               tolerance_params()},
              matches_reference);
  f.invariant(
      {"finite_differences",
       "gradients of the fp64 path match central differences (Richardson) of Σ dO ⊙ O",
       {field::integer("samples", 32, 1, 1 << 20, "elements of Q, K, V checked per case (all when fewer)"),
        field::real("step", 1e-4, 1e-12, 1, "difference step, relative to max(1, |x|)"),
        field::real("rtol", 1e-6, 0, 1, "allowed error relative to the largest gradient entry"),
        field::real("floor_ulps", 8, 0, 1e12, "plus the kernel's fp64 rounding, as in matches_reference")}},
      finite_differences);
  f.invariant(
      {"D_identity", "the D the kernel used equals rowsum(P ⊙ dP) = rowsum(dO ⊙ O)", tolerance_params()},
      d_identity);
  f.invariant({"dk_sums_to_zero", "Σ_j dK_j = 0 per (batch, kv head): softmax gradients sum to zero",
               tolerance_params()},
              dk_sums_to_zero);
  f.invariant(
      {"dv_sums_to_do", "Σ_j dV_j = Σ_i dO_i over the rows that are not fully masked", tolerance_params()},
      dv_sums_to_do);
  f.invariant({"masked_rows_zero",
               "fully masked rows get dQ = 0 and keys no query sees get dK = dV = 0, exactly",
               {}},
              masked_rows_zero);
  f.invariant({"finite_outputs", "no NaN or inf in dQ, dK, dV where the reference has none", {}},
              finite_outputs);
  f.invariant({"tile_size_invariance", "other tilings agree within the policy", tolerance_params()},
              tile_size_invariance);
  f.invariant({"shift_invariance", "adding one vector to every key leaves dQ, dK and dV unchanged",
               tolerance_params()},
              shift_invariance);
  f.invariant({"permutation_equivariance",
               "permuting keys with values and queries with dO permutes the gradients", tolerance_params()},
              permutation_equivariance);
  f.invariant(
      {"workspace_bounded", "the Workspace high-water mark stays within a budget of tiles (no Nq×Nk buffer)",
       workspace_params()},
      workspace_bounded);
}

}  // namespace kprop::attention
