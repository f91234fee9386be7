"""beam.step in NumPy, tested by kprop through the worker protocol.

    prop_runner --spec specs/beam.yaml --target "exec:python3 examples/python/beam_search.py"

One beam search step for the whole batch, as a serving engine runs it
(include/kprop/abi/beam.h): kprop owns the model and drives the steps; each
call gets every prompt's pool and the logits of every pool entry and returns
the new pool as (parent slot, appended token) per slot with its log-probs,
scores and a per-prompt `done` flag. Vectorized: one log_softmax over
[B, K, V], every candidate scored at once, one lexsort per prompt.

`--bug NAME` plants one of the real bugs of kprop's beam mutants:
    drop_finished          finished beams leave the pool instead of competing
    penalty_compounding    the penalty divides the running (already penalised) score
    penalty_counts_prompt  the penalty counts the prompt in the length
    expand_finished        finished beams are expanded (tokens after EOS)
    batch_pool_leak        one top-(B*K) over every prompt's candidates
    stop_at_first_eos      a prompt is done as soon as any beam has finished
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("drop_finished", "penalty_compounding", "penalty_counts_prompt",
        "expand_finished", "batch_pool_leak", "stop_at_first_eos")
BUG = (sys.argv[sys.argv.index("--bug") + 1:] or [""])[0] if "--bug" in sys.argv else None
if BUG is not None and BUG not in BUGS:
    sys.exit("beam_search.py: unknown bug %r (one of: %s)" % (BUG, ", ".join(BUGS)))


def log_softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def best_first(cand_tokens, cand_score, cand_ok):
    """Indices sorting the last axis: usable candidates first, then higher
    score, then lexicographically smaller tokens (padding -1 sorts a prefix
    before its extensions). Leading axes are independent selections."""
    keys = [cand_tokens[..., j] for j in reversed(range(cand_tokens.shape[-1]))]
    keys += [-cand_score, (~cand_ok).astype(np.int8)]  # lexsort: the last key is the primary one
    return np.lexsort(keys, axis=-1)


def beam_step(tokens, lengths, logprob, score, finished, valid, logits, prompt_lengths, done,
              eos, alpha, **_):
    batch, width, max_len = tokens.shape
    vocab = logits.shape[-1]
    valid, finished, done = valid != 0, finished != 0, done != 0
    lp = log_softmax(logits)  # [B, K, V]; rows of empty slots are never used

    # Candidates per slot: V expansions, then the slot kept as it is.
    expands = valid & (~finished | (BUG == "expand_finished"))
    kept = valid & finished & (BUG not in ("drop_finished", "expand_finished"))
    length = lengths + 1 + (prompt_lengths[:, None] if BUG == "penalty_counts_prompt" else 0)
    penalty = np.power(length.astype(np.float64), alpha)[..., None]
    running = score if BUG == "penalty_compounding" else logprob
    cand_logprob = np.concatenate([logprob[..., None] + lp, logprob[..., None]], axis=-1)
    cand_score = np.concatenate([(running[..., None] + lp) / penalty, score[..., None]], axis=-1)
    cand_ok = np.concatenate([np.repeat(expands[..., None], vocab, axis=-1), kept[..., None]], axis=-1)
    # The generated tokens of every candidate, [B, K, V + 1, L].
    cand_tokens = np.repeat(tokens[:, :, None, :], vocab + 1, axis=2)
    appended = np.arange(max_len) == lengths[..., None, None]  # [B, K, 1, L]
    cand_tokens[:, :, :vocab] = np.where(appended, np.arange(vocab)[:, None], cand_tokens[:, :, :vocab])

    per_slot = vocab + 1
    groups = 1 if BUG == "batch_pool_leak" else batch  # independent selections
    per_group = batch * width * per_slot // groups
    order = best_first(cand_tokens.reshape(groups, per_group, max_len), cand_score.reshape(groups, per_group),
                       cand_ok.reshape(groups, per_group))[:, :batch * width // groups]
    chosen = (order + np.arange(groups)[:, None] * per_group).reshape(batch, width)  # flat candidate index
    ok = cand_ok.reshape(-1)[chosen]
    parent = np.where(ok, chosen // per_slot, -1)
    choice = chosen % per_slot
    token = np.where(ok & (choice < vocab), choice, -1)
    next_logprob = cand_logprob.reshape(-1)[chosen]
    next_score = cand_score.reshape(-1)[chosen]
    now_finished = ok & np.where(token >= 0, token == eos, finished.reshape(-1)[np.maximum(parent, 0)])
    if BUG == "stop_at_first_eos":
        next_done = now_finished.any(axis=1)
    elif BUG == "batch_pool_leak":
        next_done = np.broadcast_to((now_finished | ~ok).all(), (batch,))
    else:
        next_done = (now_finished | ~ok).all(axis=1)

    # A prompt that is done stays as it is.
    slots = np.arange(batch * width).reshape(batch, width)
    carry = done[:, None]
    parent = np.where(carry, np.where(valid, slots, -1), parent)
    token = np.where(carry, -1, token)
    next_logprob = np.where(carry, logprob, next_logprob)
    next_score = np.where(carry, score, next_score)
    next_done = done | next_done
    return {"parent": parent, "token": token, "next_logprob": next_logprob,
            "next_score": next_score, "next_done": next_done}


if __name__ == "__main__":
    kprop_worker.serve({"beam.step": beam_step})
