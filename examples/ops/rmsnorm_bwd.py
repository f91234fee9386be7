"""RMSNorm backward in NumPy, tested by kprop as a declared op (specs/ops/rmsnorm_bwd.yaml).

    prop_runner --spec specs/ops/rmsnorm_bwd.yaml --target "exec:/usr/bin/python3 examples/ops/rmsnorm_bwd.py"

The gradients of y = x * r * w, r = 1 / sqrt(mean(x^2) + eps) per row, given
dy, computed in the input's dtype as fused RMSNorm kernels do:
    dx = r * (dy * w - x * r^2 * mean(dy * w * x))
    dw = sum over rows of dy * x * r

`--bug NAME` plants a realistic bug:
    no_mean_term          dx = r * dy * w: the gradient through r (the mean term) dropped
    mean_term_no_weight   the mean term uses mean(dy * x), w forgotten inside it
    dw_not_summed         dw is the last row's dy * x * r: the per-row partials never reduced
    eps_outside_sqrt      r = 1 / (sqrt(mean(x^2)) + eps), in dx and dw
    f64_in_f32            f64 cases computed in float32 and widened back (a templated kernel whose
                          accumulator is float for every dtype)
    block_1024            one 1024-thread block per row, one element per thread and no strided
                          loop: a row past 1024 elements is reduced over its first 1024 only, and
                          dx, dw past them are never written
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("no_mean_term", "mean_term_no_weight", "dw_not_summed", "eps_outside_sqrt", "f64_in_f32", "block_1024")
BUG = kprop_worker.planted_bug(BUGS)


def rmsnorm_bwd(x, w, dy, eps, **_):
    if BUG == "f64_in_f32" and x.dtype == np.float64:
        f = np.float32
        out = rmsnorm_bwd(x.astype(f), w.astype(f), dy.astype(f), eps)
        return {k: v.astype(np.float64) for k, v in out.items()}
    if BUG == "block_1024" and x.shape[-1] > 1024:
        out = rmsnorm_bwd(x[:, :1024], w[:1024], dy[:, :1024], eps)
        dx, dw = np.zeros(x.shape, x.dtype), np.zeros(x.shape[-1], x.dtype)
        dx[:, :1024], dw[:1024] = out["dx"], out["dw"]
        return {"dx": dx, "dw": dw}
    eps = x.dtype.type(eps)
    w = w.astype(x.dtype)
    dy = dy.astype(x.dtype)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        ms = (x * x).mean(axis=-1, keepdims=True)
        if BUG == "eps_outside_sqrt":
            r = 1 / (np.sqrt(ms) + eps)
        else:
            r = 1 / np.sqrt(ms + eps)
        g = dy * w
        if BUG == "no_mean_term":
            dx = r * g
        else:
            gx = (dy * x) if BUG == "mean_term_no_weight" else (g * x)
            dx = r * (g - x * (r * r * gx.mean(axis=-1, keepdims=True)))
        partial = dy * x * r  # [T, D]: one row's contribution to dw
        dw = partial[-1] if BUG == "dw_not_summed" else partial.sum(axis=0)
    return {"dx": dx, "dw": dw}


if __name__ == "__main__":
    kprop_worker.serve({"rmsnorm_bwd": rmsnorm_bwd})
