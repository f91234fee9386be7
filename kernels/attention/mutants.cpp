// Mutants: the tiled kernels with one bug switch compiled in (the template
// argument FwdBug / BwdBug of tiled_forward / tiled_backward, attention.h)
// or the causal offset moved, so each differs from `tiled` / `tiled_d` in
// exactly one place; materialized_scores is the correct materialized
// computation (naive_forward / naive_backward), which breaks only the
// workspace bound.
#include "kernels/attention/attention.h"
#include "kernels/attention/typed.h"

namespace kprop::attention {

using namespace typed;

namespace {

// The tiled forward with LSE staged in a 4096-row buffer per (batch, head),
// as a kernel sized for the old Nq cap of 4096 keeps it: row i lands in
// slot i mod 4096 and is read back from there, so past 4096 rows later rows
// overwrite earlier ones (specs/attention_fwd.yaml, profile large).
FwdResult lse_rows_4096(const Case& c) {
  constexpr size_t kSlots = 4096;
  FwdResult r = forward<FwdBug::none>(c);
  const size_t nq = size_t(c.shape.nq);
  for (size_t base = 0; base + nq <= r.lse.size(); base += nq) {
    for (size_t i = kSlots; i < nq; ++i) r.lse[base + i % kSlots] = r.lse[base + i];
    for (size_t i = kSlots; i < nq; ++i) r.lse[base + i] = r.lse[base + i % kSlots];
  }
  return r;
}

// The softmax scale passed as a kernel argument in the storage type (f16 or
// bf16) instead of f32: every score is off by the scale's rounding, a
// relative 2^-8 at most in bf16 (2^-11 in f16: the unit roundoff; exact where 1/sqrt(D) is a
// power of two, D = 1, 4, 16, 64, 256). A small effect on random inputs,
// where P's own rounding is as large; a large one where |S| is (large
// logits, the cases --search climbs toward). f32/f64 cases are unaffected.
Case with_scale_in_storage(const Case& c) {
  Case h = c;
  h.scale = round_to(c.dtype, effective_scale(c));
  return h;
}

}  // namespace

const std::vector<Mutant<FwdResult>>& forward_mutants() {
  static const std::vector<Mutant<FwdResult>> table = {
      {"rescale_inverted", "online-softmax correction exp(m_new - m_old) instead of exp(m_old - m_new)",
       forward<FwdBug::rescale_inverted>},
      {"nan_masked_tile", "no guard for a fully masked tile: exp(-inf - (-inf)) = NaN",
       forward<FwdBug::nan_masked_tile>},
      {"no_empty_row_guard", "O = acc / l with l = 0 on a fully masked row",
       forward<FwdBug::no_empty_row_guard>},
      {"causal_top_left", "causal mask aligned top-left (key j <= i) even when Nq != Nk",
       [](const Case& c) { return forward<FwdBug::none>(c, 0); }},
      {"causal_off_by_one", "causal mask excludes the diagonal (j < i + Nk - Nq)",
       [](const Case& c) { return forward<FwdBug::none>(c, contract_offset(c) - 1); }},
      {"drop_partial_tile", "the last, uneven KV tile is skipped", forward<FwdBug::drop_partial_tile>},
      {"gqa_head_map", "query head h reads kv head h % Hkv instead of h / (Hq / Hkv)",
       forward<FwdBug::gqa_head_map>},
      {"lse_missing_max", "LSE = log l, without the running max", forward<FwdBug::lse_missing_max>},
      {"additive_mask_1e4",
       "mask added to the scores as -1e4 (HuggingFace style) instead of -inf: a hidden key scoring 1e4 above "
       "the visible ones takes the row (fully masked rows still 0)",
       forward<FwdBug::additive_mask>},
      {"pv_in_storage", "f16/bf16: the P·V accumulator held in the storage type instead of f32",
       forward<FwdBug::pv_in_storage>},
      {"rowsum_in_storage", "f16/bf16: the running row sum l held in the storage type instead of f32",
       forward<FwdBug::rowsum_in_storage>},
      {"lse_in_storage", "f16/bf16: LSE stored in the storage type instead of f32",
       forward<FwdBug::lse_in_storage>},
      {"o_store_truncated",
       "f16/bf16: O converted to the storage type by truncation toward zero (a bf16 made by dropping the "
       "f32's low 16 bits) instead of round-to-nearest-even",
       forward<FwdBug::o_store_truncated>},
      {"scale_in_storage",
       "f16/bf16: the softmax scale rounded to the storage type instead of passed as f32 (small effect but "
       "on large logits)",
       [](const Case& c) { return forward<FwdBug::none>(with_scale_in_storage(c)); }},

      {"materialized_scores",
       "correct values from a materialized Nq×Nk score matrix (breaks workspace_bounded)", naive_forward},
      {"keys_capped_64",
       "keys past the 64th are never read (a loop bound or buffer fixed at 64 keys): rows that see more "
       "keys lose them",
       forward<FwdBug::keys_capped_64>},
      {"lse_rows_4096",
       "LSE staged in a 4096-row buffer (row i in slot i mod 4096): past Nq = 4096 later rows overwrite "
       "earlier ones",
       lse_rows_4096},
  };
  return table;
}

const std::vector<Mutant<BwdResult>>& backward_mutants() {
  using M = BwdMode;
  static const std::vector<Mutant<BwdResult>> table = {
      {"dsoftmax_wrong_axis", "dS = P ⊙ (dP - D) with D summed over the queries (per key) instead of per row",
       backward<M::single_pass_d, BwdBug::dsoftmax_wrong_axis>},
      {"dsoftmax_missing_p", "dS = dP - rowsum(P ⊙ dP), without the factor P",
       backward<M::single_pass_d, BwdBug::dsoftmax_missing_p>},
      {"dsoftmax_divide", "dS = P ⊙ dP / rowsum(P ⊙ dP)",
       backward<M::single_pass_d, BwdBug::dsoftmax_divide>},
      {"d_without_do", "D = rowsum(O) instead of rowsum(dO ⊙ O)",
       backward<M::single_pass_d, BwdBug::d_without_do>},
      {"dk_missing_scale", "dK = dSᵀ·Q without the softmax scale",
       backward<M::single_pass_d, BwdBug::dk_missing_scale>},
      {"masked_row_nan", "no guard for fully masked rows: P = exp(-inf - (-inf)) = NaN",
       backward<M::single_pass_d, BwdBug::masked_row_nan>},
      {"stale_tile_max", "P recomputed with the running max at each KV tile instead of the final LSE",
       backward<M::single_pass_d, BwdBug::stale_tile_max>},
      {"causal_skip_off_by_one",
       "causal tile skipping drops the query tile whose last row sees only the tile's first key",
       backward<M::single_pass_d, BwdBug::causal_skip_off_by_one>},
      // The forward (LSE) ran with the f32 scale; the backward recomputes
      // P = exp(scale'·QKᵀ - LSE) with scale' rounded to f16/bf16 (relative
      // error up to the unit roundoff, 2^-8 bf16, 2^-11 f16; none where 1/sqrt(D) is a power of
      // two) and scales dQ, dK by it: P off by a factor exp(δ·S), small on
      // random inputs, large on large logits.
      {"scale_in_storage",
       "f16/bf16: the backward's softmax scale rounded to the storage type (P recomputed with it no longer "
       "matches the forward's LSE)",
       backward<M::single_pass_d, BwdBug::scale_in_storage>},
      {"d_in_storage",
       "f16/bf16: D = rowsum(dO ⊙ O) rounded to the storage type before dS = P ⊙ (dP - D) (it stays in f32)",
       backward<M::single_pass_d, BwdBug::d_in_storage>},
      {"grads_store_truncated",
       "f16/bf16: dQ, dK and dV converted to the storage type by truncation toward zero (a bf16 made by "
       "dropping the f32's low 16 bits) instead of round-to-nearest-even",
       backward<M::single_pass_d, BwdBug::grads_store_truncated>},
      // FlashAttention-2 accumulates dQ in f32 across the key blocks and
      // converts it in a pass of its own; a truncating conversion there
      // leaves dK and dV right.
      {"dq_store_truncated",
       "f16/bf16: dQ alone converted to the storage type by truncation toward zero (its own conversion pass "
       "after the f32 accumulation); dK and dV round to nearest",
       backward<M::single_pass_d, BwdBug::dq_store_truncated>},
      {"materialized_scores", "correct gradients from materialized Nq×Nk matrices (breaks workspace_bounded)",
       naive_backward},
      {"d_rows_4096",
       "D staged in a 4096-row buffer (row i in slot i mod 4096): past Nq = 4096 rows use another row's D",
       backward<M::single_pass_d, BwdBug::d_rows_4096>},
  };
  return table;
}

}  // namespace kprop::attention
