"""GeGLU in NumPy, tested by kprop as a declared op (specs/ops/geglu.yaml).

    prop_runner --spec specs/ops/geglu.yaml --target "exec:/usr/bin/python3 examples/ops/geglu.py"

y = gelu(gate) * up with the exact GELU, gelu(g) = 0.5 * g * (1 + erf(g / sqrt(2))),
computed in the input's dtype (erf correctly rounded to it: NumPy has no erf,
so math.erf per element).

`--bug NAME` plants a realistic bug:
    tanh_approx       the tanh approximation of GELU (PyTorch's approximate="tanh") where the contract is erf
    gate_up_swapped   gelu(up) * gate: the halves of the fused projection read in the other order
    erf_no_sqrt2      0.5 * g * (1 + erf(g)): the 1/sqrt(2) inside erf forgotten
    block_256         one 256-thread block per row, one element per thread and no strided loop:
                      outputs past the 256th of a row are never written
    neg_tail_flush    a fast path returning 0 for gate < -7 (gelu(-7) = -9e-12, far below
                      max|y|: only the spec's elementwise_tail judges it)
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("tanh_approx", "gate_up_swapped", "erf_no_sqrt2", "block_256", "neg_tail_flush")
BUG = kprop_worker.planted_bug(BUGS)

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x):
    """erf elementwise, rounded to x's dtype."""
    return _erf(x.astype(np.float64)).astype(x.dtype)


def gelu(g):
    t = g.dtype.type
    with np.errstate(over="ignore", invalid="ignore"):
        if BUG == "tanh_approx":
            return t(0.5) * g * (t(1) + np.tanh(t(math.sqrt(2 / math.pi)) * (g + t(0.044715) * g * g * g)))
        if BUG == "erf_no_sqrt2":
            return t(0.5) * g * (t(1) + erf(g))
        if BUG == "neg_tail_flush":  # a fast path: GELU taken as 0 below -7
            return np.where(g < t(-7), t(0), t(0.5) * g * (t(1) + erf(g / t(math.sqrt(2)))))
        return t(0.5) * g * (t(1) + erf(g / t(math.sqrt(2))))


def geglu(gate, up, **_):
    up = up.astype(gate.dtype)
    if BUG == "gate_up_swapped":
        gate, up = up, gate
    with np.errstate(over="ignore", invalid="ignore"):
        y = gelu(gate) * up
    if BUG == "block_256":
        y[:, 256:] = 0
    return {"y": y}


if __name__ == "__main__":
    kprop_worker.serve({"geglu": geglu})
