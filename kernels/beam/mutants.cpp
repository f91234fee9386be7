// Mutants: each is the reference search (search(), reference.cpp) with
// exactly one Semantics switch (beam.h) flipped to a known bug.
#include "kernels/beam/beam.h"

namespace kprop::beam {
namespace {

// The reference search with the one Semantics switch Flag set to Value.
template <bool Semantics::*Flag, bool Value>
Result flipped(const Case& c) {
  Semantics s;
  s.*Flag = Value;
  return search(c, s);
}

// Token ids written through uint16 output buffers (a kernel written for
// vocabularies below 2^16): an id of 65536 or more wraps (vocabularies of
// 128k; specs/beam.yaml, profile large).
Result tokens_u16(const Case& c) {
  Result r = batched(c);
  auto wrap = [](Hypothesis& h) {
    for (int& t : h.tokens) t = static_cast<uint16_t>(t);
  };
  for (Beams& b : r.prompts) {
    for (Hypothesis& h : b.hypotheses) wrap(h);
    for (auto& pool : b.pools)
      for (Hypothesis& h : pool) wrap(h);
  }
  return r;
}

}  // namespace

const std::vector<Mutant>& mutants() {
  static const std::vector<Mutant> table = {
      {"drop_finished", "finished (EOS) beams leave the pool instead of competing at later steps",
       flipped<&Semantics::retain_finished, false>},
      {"penalty_compounding", "length penalty applied to the running (already normalised) score every step",
       flipped<&Semantics::compound_penalty, true>},
      {"penalty_counts_prompt", "length penalty divides by (prompt + generated length)^alpha",
       flipped<&Semantics::penalty_counts_prompt, true>},
      {"expand_finished", "finished beams are expanded like unfinished ones (tokens appended after EOS)",
       flipped<&Semantics::expand_finished, true>},
      {"batch_pool_leak", "one top-(K x batch) pool shared by every prompt of the batch",
       flipped<&Semantics::shared_pool, true>},
      {"stop_at_first_eos", "search stops as soon as any beam in the pool has finished",
       flipped<&Semantics::stop_at_first_eos, true>},
      {"ties_keep_later_token",
       "pruning breaks an exact score tie toward the later token sequence (a descending or unstable top-k), "
       "not the contract's lexicographic order; the kept beams are then sorted correctly",
       flipped<&Semantics::ties_keep_later, true>},
      {"done_one_step_late",
       "a prompt is reported done one step after its pool became all finished (next_done from the pool "
       "before the step): the search runs a step too many, or to L",
       flipped<&Semantics::done_late, true>},
      {"token_ids_u16", "batched search writes token ids through uint16 buffers: an id >= 65536 wraps",
       tokens_u16},
      {"ties_by_flat_index",
       "batched top-k breaks an exact score tie by the candidate's flat (slot, token) index, as torch.topk "
       "over beam x vocab does: the parents' pool order, not the contract's lexicographic order",
       batched_flat_ties},
      {"finished_first_on_ties",
       "on an exact score tie a finished beam kept from an earlier step ranks before a new expansion (a "
       "sort key with a 'kept' flag above the tokens), not by the contract's lexicographic order",
       flipped<&Semantics::finished_first_on_ties, true>},
      {"finished_lose_ties",
       "on an exact score tie at the pruning boundary a finished beam kept from an earlier step loses to a "
       "new expansion (a sort key with a 'kept' flag below the expansions), and is dropped; the kept "
       "beams are then sorted by the contract's order",
       flipped<&Semantics::finished_last_on_ties, true>},
      {"lse_first_32_lanes",
       "log_softmax's normaliser sums only the first 32 logits (a warp-per-row kernel, one logit per lane, "
       "with no loop past lane 32): wrong log-probs for vocabularies above 32",
       flipped<&Semantics::lse_first_32, true>},
      {"lse_no_max",
       "log_softmax as x - log(sum(exp(x))), without subtracting the row's max first: exp overflows (or "
       "every term underflows) once the logits pass about +-709, and the log-probs become -inf or +inf",
       flipped<&Semantics::lse_no_max, true>},
      {"log_of_softmax",
       "log-probs as log(softmax(x)): a probability that underflows (a token ~745 below the row's max, "
       "a banned token's -1e4) gives -inf instead of x - logsumexp(x)",
       flipped<&Semantics::log_of_softmax, true>},
      {"score_f32_keys",
       "pruning and the result's order use float32(score) as the sort key (a GPU top-k's keys): "
       "hypotheses float32 cannot tell apart are ordered by tokens, not by their scores",
       flipped<&Semantics::f32_keys, true>},
  };
  return table;
}

}  // namespace kprop::beam
