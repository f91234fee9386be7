"""Cross-entropy with an ignore index in NumPy, a declared op of kprop (specs/ops/cross_entropy.yaml).

    prop_runner --spec specs/ops/cross_entropy.yaml \
        --target "exec:/usr/bin/python3 examples/ops/cross_entropy.py"

logits [N, C] arrive as float32 or float64, labels [N] as int32 or int64;
a label of -100 (PyTorch's ignore_index) ignores its row. Returns losses
[N] (logsumexp of the row minus the label's logit, 0 on an ignored row)
and loss, their mean over the rows not ignored (NaN when every row is
ignored, as PyTorch's reduction='mean').

`--bug NAME` plants a realistic bug:
    clamp_before_ignore  labels clamped to [0, C) (a bounds guard) before the ignore test: -100 reads
                         class 0, and no row is ever ignored
    mean_over_all_rows   the mean divides by N, ignored rows counted
    no_max_shift         exp(logits) without subtracting the row's max (overflows on large logits)
    global_max_shift     the whole batch's max subtracted instead of each row's (a row far below
                         another underflows to log(0))
    empty_mean_zero      a batch whose every row is ignored gives loss 0, not NaN (a guard against
                         0 / 0 that breaks the contract)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("clamp_before_ignore", "mean_over_all_rows", "no_max_shift", "global_max_shift", "empty_mean_zero")
BUG = kprop_worker.planted_bug(BUGS)
IGNORE_INDEX = -100


def cross_entropy(logits, labels, **_):
    if labels.dtype not in (np.int32, np.int64):
        raise TypeError("labels must be int32 or int64, got %s" % labels.dtype)
    x = logits
    n, c = x.shape
    labels = labels.astype(np.int64)
    if BUG == "clamp_before_ignore":
        labels = np.clip(labels, 0, c - 1)
    ignored = labels == IGNORE_INDEX
    safe = np.where(ignored, 0, labels)  # an ignored row gathers class 0, then is zeroed
    zero = x.dtype.type(0)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if BUG == "no_max_shift":
            m = np.zeros((n, 1), dtype=x.dtype)
        elif BUG == "global_max_shift":
            m = np.full((n, 1), x.max(), dtype=x.dtype)
        else:
            m = x.max(axis=-1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=-1))
        picked = np.take_along_axis(x, safe[:, None], axis=-1)[:, 0]
        losses = np.where(ignored, zero, lse - picked).astype(x.dtype)
        count = n if BUG == "mean_over_all_rows" else int((~ignored).sum())
        if BUG == "empty_mean_zero":
            count = max(count, 1)
        loss = losses.sum() / x.dtype.type(count)  # 0 / 0 = NaN when every row is ignored
    return {"losses": losses, "loss": np.asarray(loss, dtype=x.dtype)}


if __name__ == "__main__":
    kprop_worker.serve({"cross_entropy": cross_entropy})
