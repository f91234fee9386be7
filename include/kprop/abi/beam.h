/* beam (docs/FAMILIES.md; kernels/beam/beam.h). Included by kprop/abi.h, or on its own.
 *
 * The kernel under test is one beam search STEP, as a serving engine runs it:
 * kprop owns the language model (a table LM no external code can reproduce)
 * and drives the steps t = 1..L; each step sends the whole batch's pool and
 * the model's next-token logits of every pool entry, and the step returns the
 * new pool. kprop rebuilds the hypotheses and the per-step pool trace from the
 * parents and tokens the step chose, with the log-probs and scores the step
 * reported, so every invariant of specs/beam.yaml checks the step's own
 * decisions and arithmetic.
 *
 * Contract of one step (the same as kprop's reference search):
 *   - lp = log_softmax(logits[b][i]) over the vocabulary (the step normalises:
 *     logits may carry any per-entry constant, see logit_shift_invariant, of
 *     a thousand or more, past exp's range; a masked token's logit may lie
 *     thousands below the row's max, and its lp must stay finite: x - max -
 *     log(sum(exp(x - max))), not log(softmax(x))). Scores are ranked in
 *     fp64: some differ by less than float32 can tell apart.
 *   - Candidates of prompt b: every finished beam of b's pool, kept as it is,
 *     and every one-token expansion (parent i, token v) of every unfinished
 *     beam: logprob = logprob[b][i] + lp[v], generated length
 *     n = lengths[b][i] + 1, score = logprob / n^alpha. The prompt never counts
 *     in n; the penalty applies to the total log-prob, never to a score.
 *   - The new pool of b is b's K best candidates, best first: higher score;
 *     exactly equal scores are ordered by the generated tokens,
 *     lexicographically smaller first, a prefix before its extensions (this
 *     decides real cases: a model with scale 0 ties every non-EOS token).
 *     Fewer than K candidates leave the last slots empty (parent -1).
 *     A prompt's candidates compete only among themselves.
 *   - next_done[b] = 1 when every beam of b's new pool is finished, 0 while
 *     one is not (empty slots aside): finished_retained compares it with the
 *     pool at every step, in both directions. A prompt
 *     that is done (done[b] = 1 in the request) is carried as it is: slot i
 *     gets parent b*K + i and token -1 where valid, parent -1 where not, the
 *     same logprob and score, next_done[b] = 1.
 * kprop stops after the step that leaves every prompt done, or after step L.
 * A beam finishes when its last token is EOS. A step that picks an empty slot
 * as a parent, or a token outside [-1, V), breaks the protocol: the case is
 * saved and the run exits 3.
 */
#ifndef KPROP_ABI_BEAM_H
#define KPROP_ABI_BEAM_H

/* The tensor, status and dtype types; this header is complete on its own. */
#include "kprop/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Op "beam.step", entry point kprop_beam_step. B prompts, beam width K, at
 * most L new tokens, vocabulary V. Slot (b, i) is entry i of prompt b's pool,
 * flat index b*K + i. At step 1 each prompt's pool is its empty root in slot
 * (b, 0) (length 0, logprob 0, score 0, unfinished); later pools are the
 * previous step's output, as kprop rebuilt it. */
typedef struct kprop_beam_step_args {
  kprop_tensor tokens;         /* [B, K, L] i32: generated tokens of each slot, -1 past its length */
  kprop_tensor lengths;        /* [B, K] i32: generated tokens so far (EOS included) */
  kprop_tensor logprob;        /* [B, K] f64: sum of the generated log-probs, as the step reported it */
  kprop_tensor score;          /* [B, K] f64: the beam's score, as the step reported it */
  kprop_tensor finished;       /* [B, K] u8: the last token is EOS */
  kprop_tensor valid;          /* [B, K] u8: the slot holds a beam. Empty slots (a pool smaller than K)
                                  hold placeholders (length 0, logprob and score -inf, logits 0) and must
                                  be ignored: select by `valid`, not by -inf scores */
  kprop_tensor logits;         /* [B, K, V] f64: the model's next-token logits after prompt ++ tokens of
                                  each valid slot. Finished slots have rows too (the model's logits after
                                  EOS): a correct step never reads them */
  kprop_tensor prompt_lengths; /* [B] i32: prompt lengths (positions; the penalty must not count them) */
  kprop_tensor done;           /* [B] u8: the prompt's search ended at an earlier step: carry it as is */
  int32_t beam_width;          /* K */
  int32_t max_new_tokens;      /* L */
  int32_t step;                /* t, 1..L: the beams grow to at most t tokens */
  int32_t eos;                 /* EOS token id */
  double alpha;                /* length penalty exponent (any sign) */
  kprop_tensor parent;         /* out: [B, K] i32: flat slot b'*K + i' each new beam comes from, -1 for an
                                  empty slot. Flat so that a batched kernel's real bugs (a selection
                                  across prompts) stay expressible; a correct step has b' = b. A beam
                                  keeps the prompt of its root wherever it moves */
  kprop_tensor token;          /* out: [B, K] i32: the appended token, -1 for a finished beam kept as is */
  kprop_tensor next_logprob;   /* out: [B, K] f64: the new beam's log-prob (any value for empty slots) */
  kprop_tensor next_score;     /* out: [B, K] f64: the new beam's score (any value for empty slots) */
  kprop_tensor next_done;      /* out: [B] u8: the prompt's search is over after this step */
} kprop_beam_step_args;
typedef int (*kprop_beam_step_fn)(const kprop_beam_step_args* args, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* KPROP_ABI_BEAM_H */
