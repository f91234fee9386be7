"""layernorm (forward, then backward) in NumPy, tested by kprop through the worker protocol.

    prop_runner --spec specs/layernorm.yaml --target "exec:/usr/bin/python3 examples/python/layernorm.py"

Computes in the inputs' dtype; f16 and bf16 inputs (bf16 as ml_dtypes
arrays or raw uint16 bits) are computed in float32, as GPU kernels do, and
the worker rounds the outputs to the case's dtype. As the contract says
(kernels/layernorm/layernorm.h, "Precision contract"), the xhat cache is
stored in the dtype and the backward (dx, dgamma) reads that rounded cache,
not the float32 xhat from before the store; y is computed from the float32
xhat. The statistics are taken of x shifted by its
first element, the textbook cure for a large mean: x - x[0] is exact near
the offset, so the variance never sees it (a plain x.var() in float32 loses
every digit of a row at 1e4 with spread 1e-2).

`--bug NAME` plants one of the family's mutants:
    naive_variance      var = E[x^2] - E[x]^2 over the raw x (clamped at 0)
    unbiased_variance   var = sum((x - mean)^2) / (D - 1)
    eps_outside_sqrt    rstd = 1 / (sqrt(var) + eps)
    missing_mean_term   dx = rstd * (g - xhat * mean(g * xhat))
    missing_proj_term   dx = rstd * (g - mean(g))
    dgamma_no_xhat      dgamma = sum_rows dy * x (the raw input instead of xhat)
    backward_unrounded_xhat  f16/bf16: the backward reads the float32 xhat from
                        before its store instead of the cache rounded to the dtype
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("naive_variance", "unbiased_variance", "eps_outside_sqrt", "missing_mean_term", "missing_proj_term",
        "dgamma_no_xhat", "backward_unrounded_xhat")
BUG = kprop_worker.planted_bug(BUGS)


def statistics(x):
    """Per row (mean, centred x, variance), all [rows, 1] or [rows, D]."""
    dim = x.shape[-1]
    if BUG == "naive_variance":
        mean = x.mean(axis=-1, keepdims=True)
        var = np.maximum((x * x).mean(axis=-1, keepdims=True) - mean * mean, 0)
        return mean, x - mean, var
    shift = x[:, :1]
    shifted = x - shift
    center = shifted.mean(axis=-1, keepdims=True)
    centred = shifted - center
    squares = (centred * centred).sum(axis=-1, keepdims=True)
    var = squares / x.dtype.type(dim - 1 if BUG == "unbiased_variance" else dim)
    return shift + center, centred, var


def storage(a):
    """The store of a's dtype for float32 values: rounded to f16 or bf16 (to
    nearest even) and read back as float32; f32 and f64 store exactly."""
    a = np.asarray(a)
    if a.dtype == np.float16:
        return lambda v: v.astype(np.float16).astype(np.float32)
    if a.dtype == np.uint16 or (kprop_worker.BFLOAT16 is not None and a.dtype == kprop_worker.BFLOAT16):
        return lambda v: kprop_worker.bf16_to_float32(kprop_worker.float32_to_bf16(v))
    return lambda v: v


def layernorm(x, gamma, beta, dy, eps, **_):
    store = storage(x)
    x, gamma, beta, dy = (kprop_worker.as_float32(a) for a in (x, gamma, beta, dy))
    eps = x.dtype.type(eps)
    with np.errstate(divide="ignore", invalid="ignore"):  # the unbiased bug divides by 0 when D = 1
        mean, centred, var = statistics(x)
        rstd = 1 / (np.sqrt(var) + eps) if BUG == "eps_outside_sqrt" else 1 / np.sqrt(var + eps)
        xhat = centred * rstd
        y = gamma * xhat + beta
        # The cache the backward reads: xhat as stored in the case's dtype.
        cache = store(xhat)
        if BUG != "backward_unrounded_xhat":
            xhat = cache
        g = gamma * dy
        mean_g = g.mean(axis=-1, keepdims=True)
        mean_gx = (g * xhat).mean(axis=-1, keepdims=True)
        if BUG == "missing_mean_term":
            dx = rstd * (g - xhat * mean_gx)
        elif BUG == "missing_proj_term":
            dx = rstd * (g - mean_g)
        else:
            dx = rstd * (g - mean_g - xhat * mean_gx)
        dgamma = (dy * (x if BUG == "dgamma_no_xhat" else xhat)).sum(axis=0)
    return {"y": y, "xhat": cache, "mean": mean[:, 0], "rstd": rstd[:, 0], "dx": dx, "dgamma": dgamma,
            "dbeta": dy.sum(axis=0)}


if __name__ == "__main__":
    kprop_worker.serve({"layernorm": layernorm})
