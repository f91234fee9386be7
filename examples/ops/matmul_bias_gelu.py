"""GEMM with a fused bias + GELU epilogue in NumPy, tested by kprop as a declared op
(specs/ops/matmul_bias_gelu.yaml).

    prop_runner --spec specs/ops/matmul_bias_gelu.yaml --target "exec:/usr/bin/python3 examples/ops/matmul_bias_gelu.py"

y = gelu(x @ w + b), b one bias per output column, exact GELU
0.5 * z * (1 + erf(z / sqrt(2))), computed in the input's dtype (erf correctly
rounded to it: NumPy has no erf, so math.erf per element).

`--bug NAME` plants a realistic bug:
    bias_wrong_axis    the epilogue indexes the bias by row (b[m]) instead of by column (b[n])
    gelu_before_bias   gelu(x @ w) + b: the epilogue's two steps in the wrong order
    f16_accumulation   the products accumulated in float16 (a half-precision accumulator)
    f64_in_f32         f64 cases computed in float32 and widened back (a templated kernel whose
                       accumulator is float for every dtype)
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("bias_wrong_axis", "gelu_before_bias", "f16_accumulation", "f64_in_f32")
BUG = kprop_worker.planted_bug(BUGS)

_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(z):
    t = z.dtype.type
    erf = _erf((z / t(math.sqrt(2))).astype(np.float64)).astype(z.dtype)
    return t(0.5) * z * (t(1) + erf)


def matmul_bias_gelu(x, w, b, **_):
    if BUG == "f64_in_f32" and x.dtype == np.float64:
        y = matmul_bias_gelu(x.astype(np.float32), w.astype(np.float32), b.astype(np.float32))["y"]
        return {"y": y.astype(np.float64)}
    dt = x.dtype
    w, b = w.astype(dt), b.astype(dt)
    with np.errstate(over="ignore", invalid="ignore"):
        if BUG == "f16_accumulation":
            acc = np.zeros((x.shape[0], w.shape[1]), dtype=np.float16)
            for k in range(x.shape[1]):
                acc = (acc + (x[:, k, None] * w[None, k, :]).astype(np.float16)).astype(np.float16)
            z = acc.astype(dt)
        else:
            z = x @ w
        if BUG == "bias_wrong_axis":
            return {"y": gelu(z + np.resize(b, x.shape[0])[:, None])}  # b[m] for row m
        if BUG == "gelu_before_bias":
            return {"y": gelu(z) + b}
        return {"y": gelu(z + b)}


if __name__ == "__main__":
    kprop_worker.serve({"matmul_bias_gelu": matmul_bias_gelu})
