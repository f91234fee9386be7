"""Top-p (nucleus) filter on logits in NumPy, tested by kprop as a declared op (specs/ops/top_p.yaml).

    prop_runner --spec specs/ops/top_p.yaml --target "exec:/usr/bin/python3 examples/ops/top_p.py"

Softmax over the last dim, then keep the most probable tokens until their
mass reaches p, renormalize, zero the rest. Ties: every token tied with the
boundary token is kept (token i is kept iff the mass of the tokens strictly
more probable than i is < p), as the spec defines. A sort-based kernel, in
the input's dtype: sort descending, exclusive cumulative mass, and for tied
tokens the mass before the first of their tie group.

`--bug NAME` plants a realistic bug:
    ties_by_index     the exclusive cumsum in sorted order used as is: tied tokens ranked by index,
                      so the boundary's tie group is cut in two
    no_renormalize    the kept probabilities are not divided by their sum
    inclusive_cumsum  keep iff the cumulative mass INCLUDING the token is < p (the top token always
                      kept): the token that crosses p is dropped, the kept mass never reaches p
    no_max_shift      softmax as exp(logits) / sum(exp(logits)), without subtracting the row max:
                      inf / inf = NaN once a logit passes exp's overflow (88.7 in f32, 709.8 in f64)
    candidates_32     the filter runs over a fixed buffer of the 32 most probable tokens (a
                      top-k pre-filter sized for peaked distributions): a flat row that needs
                      more than 32 tokens to reach p keeps only 32, and a tie group crossing
                      the buffer's end is cut by index
    tile_carry_128    the cumulative mass scanned per tile of 128 tokens, the carry from the
                      tiles before lost: past the first tile, masses restart from 0
    mass_f32          (precision) the cumulative mass accumulated in float32 for an f64 row (a
                      float accumulator): a decision within ~1e-7 of p goes the wrong way
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("ties_by_index", "no_renormalize", "inclusive_cumsum", "no_max_shift", "candidates_32", "tile_carry_128", "mass_f32")
BUG = kprop_worker.planted_bug(BUGS)


def top_p(logits, p, **_):
    p = logits.dtype.type(p)
    v = logits.shape[-1]
    if BUG == "no_max_shift":
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(logits)
    else:
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    with np.errstate(invalid="ignore"):
        prob = e / e.sum(axis=-1, keepdims=True)
    order = np.argsort(-logits, axis=-1, kind="stable")  # descending, ties by index
    ls = np.take_along_axis(logits, order, axis=-1)
    ps = np.take_along_axis(prob, order, axis=-1)
    incl = np.cumsum(ps, axis=-1)
    if BUG == "mass_f32":
        incl = np.cumsum(ps.astype(np.float32), axis=-1).astype(ps.dtype)
    if BUG == "tile_carry_128":
        incl = np.concatenate([np.cumsum(ps[:, i:i + 128], axis=-1) for i in range(0, v, 128)], axis=-1)
    excl = np.concatenate([np.zeros_like(incl[:, :1]), incl[:, :-1]], axis=-1)
    if BUG == "ties_by_index":
        above = excl
    else:
        # The mass strictly above a token: the exclusive cumsum at the first
        # position of its tie group.
        first = np.ones(ls.shape, dtype=bool)
        first[:, 1:] = ls[:, 1:] != ls[:, :-1]
        start = np.maximum.accumulate(np.where(first, np.arange(v), 0), axis=-1)
        above = np.take_along_axis(excl, start, axis=-1)
    if BUG == "inclusive_cumsum":
        keep_sorted = incl < p
        keep_sorted[:, 0] = True
    else:
        keep_sorted = above < p
    if BUG == "candidates_32":
        keep_sorted &= np.arange(v) < 32
    keep = np.empty_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    kept = np.where(keep, prob, 0).astype(logits.dtype)
    if BUG == "no_renormalize":
        return {"y": kept}
    return {"y": kept / kept.sum(axis=-1, keepdims=True)}


if __name__ == "__main__":
    kprop_worker.serve({"top_p": top_p})
