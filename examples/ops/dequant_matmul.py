"""int8 per-channel dequantizing matmul in NumPy, tested by kprop as a declared op
(specs/ops/dequant_matmul.yaml).

    prop_runner --spec specs/ops/dequant_matmul.yaml --target "exec:/usr/bin/python3 examples/ops/dequant_matmul.py"

y = x @ ((w_q - zp) * scale): w_q [K, N] int8 values, zp and scale one per
output channel n. Dequantizes to the input's dtype, then multiplies.

`--bug NAME` plants a realistic bug:
    per_tensor_scale   one scale for the whole tensor (scale[0]): a per-tensor kernel fed per-channel scales
    zero_point_sign    (w_q + zp) * scale: the zero point added instead of subtracted
    scale_wrong_axis   scale indexed by the input channel k (row of w_q) instead of the output channel n
    f64_in_f32         f64 cases computed in float32 and widened back (a templated kernel whose
                       accumulator is float for every dtype)
    int8_arithmetic    w_q - zp computed in int8, the inputs' own type, not widened first: it wraps
                       where the difference leaves [-128, 127] (127 - (-1) = -128)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("per_tensor_scale", "zero_point_sign", "scale_wrong_axis", "f64_in_f32", "int8_arithmetic")
BUG = kprop_worker.planted_bug(BUGS)


def dequant_matmul(x, w_q, zp, scale, **_):
    if BUG == "f64_in_f32" and x.dtype == np.float64:
        y = dequant_matmul(x.astype(np.float32), w_q, zp, scale.astype(np.float32))["y"]
        return {"y": y.astype(np.float64)}
    dt = x.dtype
    # Integer arithmetic on w_q - zp, as an int8 kernel does, widened to
    # int32 first: w_q and zp arrive as int8, and 127 - (-128) leaves int8.
    wide = np.int8 if BUG == "int8_arithmetic" else np.int32
    q = w_q.astype(wide)
    z = zp.astype(wide)
    s = scale.astype(dt)
    centered = (q + z) if BUG == "zero_point_sign" else (q - z)  # exact in int32
    if BUG == "per_tensor_scale":
        s = np.full_like(s, s[0])
    if BUG == "scale_wrong_axis":
        k = q.shape[0]
        w = centered.astype(dt) * np.resize(s, k)[:, None]  # scale[k] per row
    else:
        w = centered.astype(dt) * s[None, :]
    return {"y": x @ w}


if __name__ == "__main__":
    kprop_worker.serve({"dequant_matmul": dequant_matmul})
