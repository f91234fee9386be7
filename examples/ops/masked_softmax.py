"""Masked softmax in NumPy, tested by kprop as a declared op (specs/ops/masked_softmax.yaml).

    prop_runner --spec specs/ops/masked_softmax.yaml \
        --target "exec:/usr/bin/python3 examples/ops/masked_softmax.py"

Computes in the logits' dtype, over the last axis: masked entries 0, a row
with no valid entry all 0. The mask arrives as uint8 (kprop's bool dtype).

`--bug NAME` plants a realistic bug:
    mask_after_softmax   softmax over every entry, then the masked ones zeroed (not renormalized)
    no_max_subtraction   exp(x) without subtracting the row max (overflows on large logits)
    empty_row_nan        a row with no valid entry is 0/0 = NaN (PyTorch's masked_fill(-inf) + softmax)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("mask_after_softmax", "no_max_subtraction", "empty_row_nan")
BUG = kprop_worker.planted_bug(BUGS)


def masked_softmax(x, mask, **_):
    valid = np.broadcast_to(mask.astype(bool), x.shape)
    zero = x.dtype.type(0)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if BUG == "mask_after_softmax":
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            y = e / e.sum(axis=-1, keepdims=True)
            return {"y": np.where(valid, y, zero)}
        m = np.where(valid, x, -np.inf).max(axis=-1, keepdims=True)
        if BUG == "no_max_subtraction":
            m = np.zeros_like(m)
        e = np.where(valid, np.exp(x - m), zero)
        s = e.sum(axis=-1, keepdims=True)
        if BUG == "empty_row_nan":
            return {"y": e / s}
        # Masked entries 0 whatever the logits; a row with no valid entry all 0.
        return {"y": np.where(valid, e / np.where(s != 0, s, 1), zero).astype(x.dtype)}


if __name__ == "__main__":
    kprop_worker.serve({"masked_softmax": masked_softmax})
