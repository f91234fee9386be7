"""RMSNorm forward in NumPy, tested by kprop as a declared op (specs/ops/rmsnorm.yaml).

    prop_runner --spec specs/ops/rmsnorm.yaml --target "exec:/usr/bin/python3 examples/ops/rmsnorm.py"

Computes in the input's dtype: y = x / sqrt(mean(x^2) + eps) * w; f16/bf16
inputs (half storage) as GPU kernels do: loaded into f32, computed in f32, y
returned as f32 (the worker rounds it to the half type at the store).

`--bug NAME` plants a realistic bug:
    mean_not_squares   the statistic is mean(x) instead of mean(x^2) (abs taken so sqrt is defined)
    eps_outside_sqrt   x / (sqrt(mean(x^2)) + eps)
    weight_wrong_axis  w applied along the rows (w[:T, None]) instead of the last dim
    no_weight          w never applied
    sum_in_storage     (precision) the sum of squares accumulated in the storage dtype,
                       element by element: x^2 overflows f16 from |x| = 256 on, and
                       f16/bf16 sums lose a bit per doubling; f32/f64 unaffected
    rstd_in_storage    (precision, small effect) the row's 1/sqrt(mean(x^2) + eps) saved in
                       the storage dtype (as a kernel that keeps rstd for the backward in
                       x's dtype) and y normalised with that copy: every element of a row
                       off by the same relative error, at most the half type's unit
                       roundoff (2^-8 bf16, 2^-11 f16), before y's own rounding at the store
    sumsq_first_1024   the sum of squares over the first 1024 elements of a row only (one
                       element per thread of a 1024-thread block, no strided loop for longer
                       rows); divided by D: rows of D <= 1024 are right, so only the spec's
                       `wide` profile (D 513 to 8192) reaches it
    cast_before_weight (precision) x · rstd rounded to the half type, then multiplied by w and
                       stored (Hugging Face's LlamaRMSNorm: weight * hidden.to(input_dtype)):
                       two roundings to the half type where the contract has one, at y's
                       store; f32/f64 unaffected
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("mean_not_squares", "eps_outside_sqrt", "weight_wrong_axis", "no_weight", "sum_in_storage",
        "rstd_in_storage", "sumsq_first_1024", "cast_before_weight")
BUG = kprop_worker.planted_bug(BUGS)


def storage_rounder(a):
    """Rounds float32 values to the half dtype of `a` (and back to float32); None for f32/f64."""
    if a.dtype == np.float16:
        return lambda v: v.astype(np.float16).astype(np.float32)
    if a.dtype == np.uint16 or (kprop_worker.BFLOAT16 is not None and a.dtype == kprop_worker.BFLOAT16):
        return lambda v: kprop_worker.bf16_to_float32(kprop_worker.float32_to_bf16(v))
    return None


def rmsnorm(x, w, eps, **_):
    store = storage_rounder(x)
    x, w = kprop_worker.as_float32(x), kprop_worker.as_float32(w)  # f16/bf16: f32 arithmetic
    eps = x.dtype.type(eps)
    w = w.astype(x.dtype)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if BUG == "mean_not_squares":
            ms = np.abs(x.mean(axis=-1, keepdims=True))
        elif BUG == "sum_in_storage" and store is not None:
            s = np.zeros(x.shape[:-1], dtype=np.float32)
            for j in range(x.shape[-1]):
                s = store(s + store(x[..., j] * x[..., j]))
            ms = (s / np.float32(x.shape[-1]))[..., None]
        elif BUG == "sumsq_first_1024":
            head = x[..., :1024]
            ms = (head * head).sum(axis=-1, keepdims=True) / x.dtype.type(x.shape[-1])
        else:
            ms = (x * x).mean(axis=-1, keepdims=True)
        if BUG == "eps_outside_sqrt":
            y = x / (np.sqrt(ms) + eps)
        elif BUG == "rstd_in_storage" and store is not None:
            y = x * store(np.float32(1) / np.sqrt(ms + eps))
        else:
            y = x / np.sqrt(ms + eps)
        if BUG == "no_weight":
            return {"y": y}
        if BUG == "cast_before_weight" and store is not None:
            return {"y": store(y) * w}
        if BUG == "weight_wrong_axis":
            rows = y.shape[0]
            wr = np.resize(w, rows)  # w indexed by row, not by feature
            return {"y": y * wr[:, None]}
        return {"y": y * w}


if __name__ == "__main__":
    kprop_worker.serve({"rmsnorm": rmsnorm})
