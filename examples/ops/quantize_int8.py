"""int8 per-channel quantization in NumPy, tested by kprop as a declared op
with an integer output (specs/ops/quantize_int8.yaml).

    prop_runner --spec specs/ops/quantize_int8.yaml --target "exec:/usr/bin/python3 examples/ops/quantize_int8.py"

scale = max|w| / 127 per row (1 for an all-zero row), q = clip(rint(w / scale),
-127, 127) as int8, computed in the input's dtype (f32 or f64).

`--bug NAME` plants a realistic bug:
    ties_away         np.round's ties to even replaced by C's round(): ties away from zero
    truncate          w / scale cast to int8 directly (truncation toward zero)
    max_not_abs       scale from max(w), not max|w|: rows led by a negative value clip
    per_tensor        one scale for the whole tensor (max|w| over every row)
    zero_row_scale_0  an all-zero row keeps scale 0 (0/0 codes: NaN cast to int8)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUG = kprop_worker.planted_bug(("ties_away", "truncate", "max_not_abs", "per_tensor", "zero_row_scale_0"))


def quantize_int8(w, **_):
    t = w.dtype.type
    if BUG == "max_not_abs":
        amax = np.maximum(np.max(w, axis=-1, keepdims=True), t(0))
    elif BUG == "per_tensor":
        amax = np.full((w.shape[0], 1), np.max(np.abs(w)), dtype=w.dtype)
    else:
        amax = np.max(np.abs(w), axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = amax / t(127)
        if BUG != "zero_row_scale_0":
            scale = np.where(amax == 0, t(1), scale)
        x = w / scale
        if BUG == "ties_away":
            x = np.sign(x) * np.floor(np.abs(x) + t(0.5))
        elif BUG == "truncate":
            x = np.trunc(x)
        else:
            x = np.rint(x)
        x = np.nan_to_num(np.clip(x, -127, 127), nan=0.0)
    if BUG == "zero_row_scale_0":
        x = np.where(amax == 0, t(-128), x)  # what a NaN cast to int8 gives on x86
    return {"q": x.astype(np.int8), "scale": scale[:, 0]}


if __name__ == "__main__":
    kprop_worker.serve({"quantize_int8": quantize_int8})
