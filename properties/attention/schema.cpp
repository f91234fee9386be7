// The attention families' domain: its schema, in_domain and the size of a case.
#include <fmt/format.h>

#include "properties/attention/family_parts.h"

namespace kprop::attention {

const Choices& dtype_choices() {
  static const Choices choices = {"f32", "f64", "f16", "bf16"};
  return choices;
}
const Choices& mask_choices() {
  static const Choices choices = {"none", "causal", "key_padding", "boolean"};
  return choices;
}

namespace {
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
//   masked_peaks   the keys the mask hides from a batch's first query row
//                  (padding, the causal future, a boolean row's hidden keys;
//                  a quarter of the keys when nothing is masked) score
//                  10^log10_peak_score above the others, as padding holding
//                  garbage does: a mask applied as an additive -1e4 (or any
//                  finite bias) lets them through, -inf does not.
//   tied_scores    every key of a (batch, kv head) the same: a row's visible
//                  scores all tie, P = 1/n for its n visible keys, and O is
//                  the mean of n values of the dtype. Where n is a power of
//                  two, that mean is exact in f32 and needs up to log2(n)
//                  bits more than a half type holds: the store alone decides
//                  O's last bit (o_rounded_to_nearest).
//   pinned_grads   scores tied while the keys differ (Q zero past its first
//                  channel, every key of a head sharing that channel), V
//                  integers in [-3, 3], dO one signed power of two per row,
//                  a power-of-two softmax scale (1 to 1/8 where the drawn
//                  one is not): over 2^t visible keys O and dS are exact in
//                  the dtype, so the stores alone decide dQ's and dK's last
//                  bits (dq_dk_rounded_to_nearest).
// Values are rounded to the case's dtype, never past its largest finite value.
const Choices& value_choices() {
  static const Choices choices = {"normal",       "large", "growing_keys", "integer",     "constant_rows",
                                  "near_uniform", "wide",  "masked_peaks", "tied_scores", "pinned_grads"};
  return choices;
}
}  // namespace

template <bool B>
Schema CaseTraits<B>::domain_schema() {
  return {
      field::int_range("batch", {1, 2}, 1, 1 << 16, "batch size B"),
      field::int_range("heads_kv", {1, 3}, 1, 1 << 10, "kv heads Hkv"),
      field::int_range("group", {1, 3}, 1, 1 << 10, "query heads per kv head g (Hq = g·Hkv; g > 1 is GQA)"),
      field::int_range("nq", {1, 40}, 1, 1 << 24, "query length Nq"),
      field::int_range("nk", {1, 40}, 1, 1 << 24, "key length Nk"),
      field::real("same_length_rate", 0.25, 0, 1, "probability that Nk = Nq (otherwise drawn on its own)"),
      field::int_range("dim", {1, 24}, 1, 1 << 16, "head dimension D (odd ones included)"),
      field::int_range("block_q", {1, 32}, 1, 1 << 24,
                       "query tile Bq; drawn as a divisor of Nq, a non-divisor, >= Nq, or 1"),
      field::int_range("block_k", {1, 32}, 1, 1 << 24, "key tile Bk; drawn like block_q against Nk"),
      field::choices("dtypes", dtype_choices(), dtype_choices(), "precisions to draw (the case's dtype)"),
      field::choices("masks", mask_choices(), mask_choices(), "mask kinds to draw"),
      field::real("empty_batch_rate", 0.2, 0, 1, "key_padding: probability that a batch has key length 0"),
      field::real_range("mask_density", {0.1, 0.9}, 0, 1, "boolean: probability that a key is visible"),
      field::real("empty_row_rate", 0.15, 0, 1, "boolean: probability that a query row is fully masked"),
      field::choices("values", value_choices(), value_choices(), "value distributions to draw"),
      field::real_range("large_magnitude", {6, 30}, 1, 1e4, "large: scale of Q and K entries"),
      field::real_range("key_growth", {20, 400}, 0, 1e6,
                        "growing_keys: score rise from the first key to the last (values past a dtype's "
                        "range saturate: f16 65504)"),
      field::real_range("log10_peak_score", {3, 6}, 0, 9,
                        "masked_peaks: log10 of how far the peak keys score above the rest"),
      field::real("custom_scale_rate", 0.2, 0, 1, "probability of a scale other than 1/sqrt(D)"),
  };
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
// While a metamorphic relation or another tiling runs, also a derived case
// (Q, K, V) and its result, and the implementation running: its Q, K, V and
// output in its dtype (≤ 8 bytes), then its output widened: 5 Q-sized and 4
// K-sized more. The backward's results hold O beside dQ (3 Q-sized more),
// its derived case dO and its result dQ too (2), the implementation running
// dO (1): 6 Q-sized more. bench/case_memory.py measures the peak against this.
double attention_bytes(double batch, double heads_kv, double group, double nq, double nk, double dim,
                       bool backward) {
  const double q = batch * heads_kv * group * nq * dim, kv = batch * heads_kv * nk * dim;
  const double scores = batch * heads_kv * group * nq * nk;
  return 8 * (2 * q + 2 * kv + 3 * (q + 2 * kv + batch * heads_kv * group * nq) + 4 * scores) +
         8 * (5 * q + 4 * kv) + (backward ? 8 * 6 * q : 0) + batch * nq * nk;
}
}  // namespace

template <bool B>
double CaseTraits<B>::case_bytes(const Case& c) {
  const Shape& s = c.shape;
  return attention_bytes(s.batch, s.heads_kv, s.group(), s.nq, s.nk, s.dim, B);
}

template <bool B>
CaseSize CaseTraits<B>::max_case_bytes(const Values& d) {
  const auto hi = [&](const char* key) { return d.int_range(key).hi; };
  CaseSize size{attention_bytes(double(hi("batch")), double(hi("heads_kv")), double(hi("group")),
                                double(hi("nq")), double(hi("nk")), double(hi("dim")), B),
                fmt::format("B {} x Hkv {} x group {} x Nq {} x Nk {} x D {}", hi("batch"), hi("heads_kv"),
                            hi("group"), hi("nq"), hi("nk"), hi("dim")),
                "batch, heads_kv, group, nq, nk or dim"};
  // The named tensors' dims (tensors.cpp) at that case, for the spec's expression invariants.
  size.extents = {{"B", double(hi("batch"))},
                  {"Hkv", double(hi("heads_kv"))},
                  {"Hq", double(hi("heads_kv") * hi("group"))},
                  {"Nq", double(hi("nq"))},
                  {"Nk", double(hi("nk"))},
                  {"D", double(hi("dim"))}};
  return size;
}

// The members defined here, for both families (not the whole class: once
// files share a translation unit, KPROP_UNITY, each member is instantiated once).
template Schema CaseTraits<false>::domain_schema();
template std::string CaseTraits<false>::in_domain(const Case&, const Values&);
template double CaseTraits<false>::case_bytes(const Case&);
template CaseSize CaseTraits<false>::max_case_bytes(const Values&);
template Schema CaseTraits<true>::domain_schema();
template std::string CaseTraits<true>::in_domain(const Case&, const Values&);
template double CaseTraits<true>::case_bytes(const Case&);
template CaseSize CaseTraits<true>::max_case_bytes(const Values&);

}  // namespace kprop::attention
