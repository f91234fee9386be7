"""SwiGLU in NumPy, tested by kprop as a declared op (specs/ops/swiglu.yaml).

    prop_runner --spec specs/ops/swiglu.yaml --target "exec:/usr/bin/python3 examples/ops/swiglu.py"

y = silu(gate) * up with silu(g) = g * sigmoid(g) = g / (1 + exp(-g)),
computed in the input's dtype; f16/bf16 inputs (half storage) as GPU kernels
do: loaded into f32, computed in f32, y returned as f32 (the worker rounds it
to the half type at the store).

`--bug NAME` plants a realistic bug:
    gate_up_swapped   silu(up) * gate: the halves of the fused projection read in the other order
    sigmoid_sign      g / (1 + exp(g)) = g * sigmoid(-g): the sign inside the exponent lost
    glu_not_swish     sigmoid(gate) * up: GLU instead of SwiGLU (the factor g dropped)
    f16_activation    silu computed in float16 (a half-precision activation buffer; for
                      f16/bf16 inputs: in float16 arithmetic instead of f32)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("gate_up_swapped", "sigmoid_sign", "glu_not_swish", "f16_activation")
BUG = kprop_worker.planted_bug(BUGS)


def swiglu(gate, up, **_):
    gate, up = kprop_worker.as_float32(gate), kprop_worker.as_float32(up)  # f16/bf16: f32 arithmetic
    up = up.astype(gate.dtype)
    if BUG == "gate_up_swapped":
        gate, up = up, gate
    with np.errstate(over="ignore", invalid="ignore"):
        g = gate.astype(np.float16) if BUG == "f16_activation" else gate
        if BUG == "sigmoid_sign":
            act = g / (1 + np.exp(g))
        elif BUG == "glu_not_swish":
            act = 1 / (1 + np.exp(-g))
        else:
            act = g / (1 + np.exp(-g))
        return {"y": act.astype(gate.dtype) * up}


if __name__ == "__main__":
    kprop_worker.serve({"swiglu": swiglu})
