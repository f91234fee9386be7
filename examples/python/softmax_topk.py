"""softmax + top-k in NumPy, tested by kprop through the worker protocol.

    prop_runner --spec specs/softmax_topk.yaml --target "exec:/usr/bin/python3 examples/python/softmax_topk.py"

Two passes in the logits' dtype (f16 and bf16 logits, bf16 as ml_dtypes
arrays or raw uint16 bits, in float32, as GPU kernels do; the worker rounds
the probabilities to the case's dtype) (max, then the normaliser), then a stable
sort by logit: the contract's order is the exact logit order, equal logits
by ascending index, -inf last. A row of all -inf has probabilities 0.

`--bug NAME` plants one of the family's mutants:
    k_capped_32             at most 32 winners; slots past 32 stay (index 0, p 0)
    no_max_subtraction      exp(x) / sum(exp(x)), without subtracting the row max
    tie_high_index          equal logits rank the higher index first
    neg_inf_selected_early  ranks by the rounded probability, so a -inf logit ties with
                            (and at a lower index beats) a logit whose probability underflowed
    unsorted_output         the K winners returned in index order
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("k_capped_32", "no_max_subtraction", "tie_high_index", "neg_inf_selected_early", "unsorted_output",
        "probs_scaled")
BUG = kprop_worker.planted_bug(BUGS)


def softmax(logits):
    """Row-wise softmax in the logits' dtype; an all -inf row gives 0."""
    m = logits.max(axis=-1, keepdims=True)
    if BUG == "no_max_subtraction":
        m = np.zeros_like(m)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(logits - np.where(m == -np.inf, 0, m))
        z = e.sum(axis=-1, keepdims=True)
        return np.where(z > 0, e / np.where(z > 0, z, 1), 0).astype(logits.dtype, copy=False)


def ranking(logits, probs):
    """Indices of each row, best first."""
    index = np.broadcast_to(np.arange(logits.shape[-1]), logits.shape)
    if BUG == "tie_high_index":
        return np.lexsort((-index, -logits), axis=-1)  # last key is the primary one
    key = -probs if BUG == "neg_inf_selected_early" else -logits
    return np.argsort(key, axis=-1, kind="stable")  # -(-inf) = +inf sorts last


def softmax_topk(logits, k, **_):
    logits = kprop_worker.as_float32(logits)
    probs = softmax(logits)
    top = ranking(logits, probs)[:, :k]
    if BUG == "unsorted_output":
        top = np.sort(top, axis=-1)
    if BUG == "k_capped_32":
        top[:, 32:] = 0
    top_probs = np.take_along_axis(probs, top, axis=-1)
    if BUG == "k_capped_32":
        top_probs[:, 32:] = 0
    if BUG == "probs_scaled":  # the right ranking, the probabilities 1.5x (a lost normalisation)
        top_probs = top_probs * 1.5
    return {"probs": top_probs, "indices": top}


if __name__ == "__main__":
    kprop_worker.serve({"softmax_topk": softmax_topk})
