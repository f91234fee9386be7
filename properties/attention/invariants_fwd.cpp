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

using T = Trial<FwdTraits>;

std::vector<int> o_dims(const Shape& s) {
  return {s.batch, s.heads_q, s.nq, s.dim};
}
std::vector<int> lse_dims(const Shape& s) {
  return {s.batch, s.heads_q, s.nq};
}

// O and LSE of `got` against `expected` (the reference, possibly rearranged),
// with `naive` computed on the same inputs as `got`.
Verdict compare_outputs(const Case& c, const std::string& what, const FwdResult& expected,
                        const FwdResult& got, const FwdResult& naive, const ErrorScales& f, const Values& p) {
  const double k = p.real("k");
  return both(
      for_output("o", compare_tensor(what + "O", o_dims(c.shape), expected.o, got.o, naive.o, k, f.o)),
      for_output("lse", compare_tensor(what + "LSE", lse_dims(c.shape), expected.lse, got.lse, naive.lse, k,
                                       f.lse)));
}

// The case's naive baseline and floors, computed once per trial.
const FwdResult& naive(T& t) {
  return t.once<naive_forward>();
}
ErrorScales case_floors(T& t, const Values& p) {
  return floors(t.input(), t.once<forward_scales>(), false, p.real("floor_ulps"));
}

Verdict matches_reference(T& t, const Values& p) {
  const Case& c = t.input();
  return compare_outputs(c, "", t.reference(), t.target(), naive(t), case_floors(t, p), p);
}

// Another tiling changes rounding only: each pair of tilings may differ by
// what two results within the policy may (2 × (k × naive error + floor)).
Verdict tile_size_invariance(T& t, const Values& p) {
  const Case& c = t.input();
  const FwdResult& a = t.target();
  const FwdResult& ref = t.reference();
  const FwdResult& baseline = naive(t);
  const ErrorScales f = case_floors(t, p);
  const double k = p.real("k");
  const std::vector<Case> others = other_tilings(c);
  if (others.empty()) return Verdict::discard("Nq = Nk = 1: no other tiling");
  for (const Case& other : others) {
    const FwdResult b = t.run_target(other);
    struct Part {
      const char* name;
      const std::vector<double>& x;
      const std::vector<double>& y;
      const std::vector<double>& n;
      const std::vector<double>& r;
      double floor;
    };
    for (const Part& part : {Part{"O", a.o, b.o, baseline.o, ref.o, f.o},
                             Part{"LSE", a.lse, b.lse, baseline.lse, ref.lse, f.lse}}) {
      const double naive_error = max_error(part.r, part.n);
      const ToleranceReport r = compare_close(part.x, part.y, 2 * (k * naive_error + part.floor), 0);
      if (!r.ok)
        return Verdict::fail(fmt::format("tiles {}x{} vs {}x{}: {} {}", c.block_q, c.block_k, other.block_q,
                                         other.block_k, part.name, r.message),
                             {{"other_block_q", double(other.block_q)},
                              {"other_block_k", double(other.block_k)},
                              {"difference", r.target_error},
                              {"allowed", r.allowed}});
    }
  }
  return Verdict::pass();
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
                        element_name(i, std::string(name) == "O" ? o_dims(t.input().shape)
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
  return compare_tensor("O after shifting every key ", o_dims(c.shape), t.reference().o, got.o,
                        shifted_naive.o, p.real("k"), floors(shifted, false, p.real("floor_ulps")).o);
}

// Permuting keys with their values (and queries) permutes nothing but the
// output rows.
Verdict permutation_equivariance(T& t, const Values& p) {
  const Case& c = t.input();
  const auto perm = permutation_of(c);
  if (!perm) return no_permutation(c);
  const Shape& s = c.shape;
  const FwdResult& ref = t.reference();
  FwdResult expected;
  expected.o = permute_rows(ref.o, s, s.heads_q, s.nq, s.dim, perm->queries);
  expected.lse = permute_rows(ref.lse, s, s.heads_q, s.nq, 1, perm->queries);
  return compare_outputs(c, "permuted keys and queries: ", expected, t.run_target(perm->c),
                         naive_forward(perm->c), case_floors(t, p), p);
}

}  // namespace

void register_forward_invariants(FamilyDef<FwdTraits>& f) {
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
  register_workspace_bounded(f);
}

}  // namespace kprop::attention
