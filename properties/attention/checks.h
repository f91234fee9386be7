// Pieces shared by the forward and backward invariants: parameters, derived
// cases for the metamorphic checks, and the workspace budget.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention/attention.h"
#include "kprop/family.h"
#include "kprop/tolerance.h"
#include "properties/attention/bounds.h"

namespace kprop::attention {

// k (field::k) and floor_ulps of the tolerance policy (bounds.h).
Schema policy_params();

// Other tilings (block_q, block_k) of the same case: one tile, unit tiles (small cases), Bq and
// Bk swapped, and a tiling that does not divide N where this one does.
std::vector<std::pair<int, int>> other_tilings(const Case& c);

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

// Rows of `x` ([outer, n, inner] row-major) reordered: new row r is old row
// perm[r]. What permutes a case's tensors and a result's.
template <typename T>
std::vector<T> permute_rows(const std::vector<T>& x, size_t outer, int n, size_t inner,
                            const std::vector<int>& perm) {
  std::vector<T> out(x.size());
  for (size_t o = 0; o < outer; ++o)
    for (int r = 0; r < n; ++r)
      std::copy_n(x.begin() + static_cast<long>((o * n + perm[size_t(r)]) * inner), inner,
                  out.begin() + static_cast<long>((o * n + r) * inner));
  return out;
}
// A result's tensors as the permuted case lays them out (the outputs a
// correct kernel gives on p.c).
FwdResult permuted(const FwdResult& r, const Shape& s, const Permutation& p);
BwdResult permuted(const BwdResult& r, const Shape& s, const Permutation& p);

// The naive baseline `naive` of the trial's case as the policy reads it
// against the run's oracle: itself, or, with another oracle than the
// family's reference (--reference, reference=), re-centred on it
// (kprop/tolerance.h recentred) in `storage`, each of `outputs`.
template <typename Traits, typename Outputs>
const typename Traits::Result& oracle_baseline(Trial<Traits>& t, const typename Traits::Result& naive,
                                               const Outputs& outputs,
                                               std::optional<typename Traits::Result>& storage) {
  if (t.oracle_is_own()) return naive;
  storage = naive;
  for (const auto& out : outputs)
    (*storage).*out.field =
        recentred(naive.*out.field, t.own_reference().*out.field, t.reference().*out.field);
  return *storage;
}

// Another tiling changes rounding only: the target's result on each of
// other_tilings(c) may differ from its result on c by what two results
// within the policy may (2 × (k × naive error + floor)), per head as every
// comparison (bounds.h). `outputs`: what to compare,
// each with name, field (of Result) and scale (its ErrorScales floor).
template <typename Traits, typename Outputs>
Verdict tilings_agree(Trial<Traits>& t, const typename Traits::Result& naive, const Scales& f, double k,
                      const Outputs& outputs) {
  const Case& c = t.input();
  const std::vector<std::pair<int, int>> others = other_tilings(c);
  if (others.empty()) return Verdict::discard("Nq = Nk = 1: no other tiling");
  const auto& a = t.target();
  const auto& ref = t.reference();
  // Per output and group, what any tiling is allowed: 2 × (k × the naive
  // baseline's error + floor), the same for every tiling, so computed once.
  struct Allowed {
    bool grouped;
    size_t len;
    std::vector<double> allowed;  // per group
    double whole;                 // one group: the largest floor
  };
  std::vector<Allowed> allowed;
  for (const auto& out : outputs) {
    const std::vector<double> floor = f.of(out.scale);
    const std::span<const double> x = a.*out.field, r = ref.*out.field, n = naive.*out.field;
    // Equal groups where the lengths allow; else one, at the largest floor.
    // (The other tiling's result is checked to have x's length below.)
    const bool grouped = r.size() == x.size() && n.size() == x.size() && x.size() % floor.size() == 0;
    const size_t groups = grouped ? floor.size() : 1, len = x.size() / groups;
    const double largest_floor = *std::max_element(floor.begin(), floor.end());
    Allowed& o = allowed.emplace_back(Allowed{grouped, len, {}, 2 * (k * max_error(r, n) + largest_floor)});
    for (size_t g = 0; grouped && g < groups; ++g) {
      const auto part = [&](std::span<const double> v) { return v.subspan(g * len, len); };
      o.allowed.push_back(2 * (k * max_error(part(r), part(n)) + floor[g]));
    }
  }
  // One copy of the case (a tiling's case is the whole case), retiled.
  Case other = c;
  for (const auto& [block_q, block_k] : others) {
    other.block_q = block_q;
    other.block_k = block_k;
    const auto b = t.run_target(other);
    size_t i = 0;
    for (const auto& out : outputs) {
      const Allowed& o = allowed[i++];
      const std::span<const double> x = a.*out.field, y = b.*out.field;
      const bool grouped = o.grouped && y.size() == x.size();
      const size_t groups = grouped ? o.allowed.size() : 1;
      for (size_t g = 0; g < groups; ++g) {
        auto part = [&](std::span<const double> v) { return grouped ? v.subspan(g * o.len, o.len) : v; };
        const double allow = grouped ? o.allowed[g] : o.whole;
        const ToleranceReport rep = compare_close(part(x), part(y), allow, 0, grouped ? g * o.len : 0);
        if (!rep.ok)
          return Verdict::fail(fmt::format("tiles {}x{} vs {}x{}: {} {}", c.block_q, c.block_k, other.block_q,
                                           other.block_k, out.name, rep.message),
                               {{"other_block_q", double(other.block_q)},
                                {"other_block_k", double(other.block_k)},
                                {"difference", rep.target_error},
                                {"allowed", rep.allowed}});
      }
    }
  }
  return Verdict::pass();
}

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
// o_rounded_to_nearest, dv_rounded_to_nearest: an f16/bf16 dtype and a value
// kind with tied rows.
std::string needs_tied_half_rows(const Values& domain, const Values& params);
// dq_dk_rounded_to_nearest: an f16/bf16 dtype and the value kind pinned_grads.
std::string needs_pinned_grads(const Values& domain, const Values& params);

// How far, relatively, a value may lie from a power of two and still round
// to it in `dtype`: 2^-(p+1), p the dtype's significant bits (the gap below a
// power of two is the narrower one). The tied-row invariants' P = 2^-t lands
// on its exact value when rounded to the half type within this.
inline double power_of_two_snap(DType dtype) {
  return std::ldexp(1.0, -(precision_bits(dtype) + 1));
}

// γ_n = n·unit / (1 - n·unit): the relative error bound of n roundings of
// `unit` each (any order), for the derived bounds of the invariants.
inline double gamma_n(double n, double unit) {
  return n * unit / (1 - n * unit);
}

// A query row whose visible scores all tie, and how far an arithmetic of unit
// roundoff u (2u per step for adders that truncate) may take its softmax from
// the exact P = 1/n (derivation: invariants_fwd.cpp, o_rounded_to_nearest).
struct TiedRow {
  double n = 0;        // visible keys
  double dim = 0;      // D, the dot products' length
  double score = 0;    // |s|, the common scaled score
  double abs_dot = 0;  // |scale| · max_j Σ_d |q_d k_jd|
  struct Bounds {
    double delta = 0;  // Δ: how far a computed score may be from s
    double eps = 0;    // ε: how far an exponential or a rescale factor may be from 1
    double theta = 0;  // θ: relative error of a key's weight in O, and of the row sum l
  };
  Bounds bounds(double u) const;
};
// Row (b, h, i) of an attention case when its visible keys `keys` (not
// empty) all score the same in fp64; none otherwise.
std::optional<TiedRow> tied_row(const Case& c, int b, int h, int i, const std::vector<int>& keys);
// Why a pinned-store invariant of `output` cannot judge this trial: the
// reference keeps its outputs in fp64 (n/a), and an f32/f64 case stores in
// its own arithmetic's type (discard).
std::optional<Verdict> pinned_store_unobservable(const ImplInfo& target, DType dtype, const char* output);
// A store pinned by tied rows (o_rounded_to_nearest, dv_rounded_to_nearest,
// dq_dk_rounded_to_nearest): the kernel held the element within `bound` of
// `exact` (`bound` includes the error of `exact` itself) before storing it
// in `dtype`. When no rounding boundary lies within reach, round-to-nearest
// gives one value: checks `stored` against it (++checked) and returns the
// failure. Nothing when it holds or when the element is too near a boundary
// to tell. `describe` is called for a failure only (the checks run on every
// element of a case): the element's name ("dV[0,1,2,3]"), how its exact
// value is known, and the measured values to report.
struct PinnedElement {
  std::string element, why;
  std::vector<Measured> measured;
};
std::optional<Verdict> pinned_store_failure(DType dtype, double stored, double exact, double bound,
                                            PinnedElement described);
template <typename Describe>
std::optional<Verdict> check_pinned_store(DType dtype, double stored, double exact, double bound,
                                          size_t& checked, Describe&& describe) {
  if (!(rounding_margin(dtype, exact) > bound)) return std::nullopt;
  ++checked;
  if (stored == round_to(dtype, exact)) return std::nullopt;
  return pinned_store_failure(dtype, stored, exact, bound, describe());
}
// The keys row (b, i) sees, in order.
void visible_keys(const Case& c, int b, int i, std::vector<int>& keys);

// Fully masked query rows as (b, i) pairs.
std::vector<std::pair<int, int>> fully_masked_rows(const Case& c);

}  // namespace kprop::attention
