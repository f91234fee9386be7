// Pieces shared by the forward and backward invariants: parameters, derived
// cases for the metamorphic checks, and the workspace budget.
#pragma once

#include <optional>
#include <vector>

#include "kernels/attention/attention.h"
#include "kprop/family.h"

namespace kprop::attention {

// k (field::k) and floor_ulps of the tolerance policy (bounds.h).
Schema policy_params();

// Other tilings of the same case: one tile, unit tiles (small cases), Bq and
// Bk swapped, and a tiling that does not divide N where this one does.
std::vector<Case> other_tilings(const Case& c);

// Every key of (b, kv head) shifted by one vector, rounded to the dtype.
Case keys_shifted(const Case& c);

// f16/bf16: the shift nearest `want` (toward 0) that moves every key's
// element d exactly: a multiple of the column's finest ulp, small enough
// that no sum needs more bits than the dtype has and far below its largest
// finite value (0 when the column has no room). f32/f64: `want` rounded.
double exact_key_shift(const Case& c, int d, double want);

// Jointly permuted keys/values and queries (masks moved along), or nothing
// when the mask is positional (causal). Key permutations keep every padded
// prefix in place. `key_perm[p]` is the old key at new position p.
struct Permutation {
  Case c;
  std::vector<int> keys, queries;
};
std::optional<Permutation> permutation_of(const Case& c);
// The discard of an invariant over permutations when permutation_of(c) is none.
Verdict no_permutation(const Case& c);

// The tensors of a result reordered as the permuted case would lay them out.
std::vector<double> permute_rows(const std::vector<double>& t, const Shape& s, int heads, int length,
                                 int width, const std::vector<int>& perm);

// Workspace budget: tile_factor × sizeof(dtype) × (Bq·Bk + (Bq + Bk)·D + Nq + Nk)
// with Bq, Bk clamped to Nq, Nk.
Schema workspace_params();
Verdict check_workspace(const Case& c, const ImplInfo& target, size_t peak_bytes, const Values& params);
// The invariant workspace_bounded of attention.fwd and attention.bwd alike.
template <typename Traits>
void register_workspace_bounded(FamilyDef<Traits>& f) {
  f.invariant(
      {"workspace_bounded", "the Workspace high-water mark stays within a budget of tiles (no Nq×Nk buffer)",
       workspace_params()},
      [](Trial<Traits>& t, const Values& p) {
        if (t.target().fixed_tiles)
          return Verdict::not_applicable(
              "the kernel's shared-memory tiles have a fixed size, not the case's");
        return check_workspace(t.input(), t.target_info(), t.target().workspace_peak, p);
      });
}

// InvariantInfo::needs of the invariants that only some domains let observe
// anything: a permutation that keeps the mask (not causal, Nq or Nk > 1),
// another tiling (Nq or Nk > 1), a fully masked row.
std::string needs_permutation(const Values& domain, const Values& params);
std::string needs_other_tiling(const Values& domain, const Values& params);
std::string needs_masked_rows(const Values& domain, const Values& params);
// o_rounded_to_nearest: an f16/bf16 dtype and a value kind with tied rows.
std::string needs_tied_half_rows(const Values& domain, const Values& params);

// γ_n = n·unit / (1 - n·unit): the relative error bound of n roundings of
// `unit` each (any order), for the derived bounds of the invariants.
inline double gamma_n(double n, double unit) {
  return n * unit / (1 - n * unit);
}

// Fully masked query rows as (b, i) pairs.
std::vector<std::pair<int, int>> fully_masked_rows(const Case& c);

}  // namespace kprop::attention
