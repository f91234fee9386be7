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
    tanh_sigmoid      sigmoid(g) as 0.5 (1 + tanh(g/2)) (exact in real arithmetic): 1 + tanh
                      cancels for negative gates, so silu has no relative accuracy there
                      (0 for g < -17 in f32) while max|y| hides it from matches_reference
    truncate_store    (precision) f16/bf16 y stored rounding toward zero (bf16: the low 16
                      bits of the f32 dropped; f16: the conversion's value stepped toward
                      0, overflow still ±inf), not to nearest: up to a whole half ulp
    act_stored_half   (precision) silu(gate) stored in the half type, then multiplied by up
                      in f32 (an unfused kernel, as eager PyTorch's act(gate) * up): two
                      roundings where the contract has one, at y's store
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("gate_up_swapped", "sigmoid_sign", "glu_not_swish", "f16_activation", "tanh_sigmoid", "truncate_store",
        "act_stored_half")
BUG = kprop_worker.planted_bug(BUGS)


def swiglu(gate, up, **_):
    store = gate.dtype  # the half dtype y is stored in (float16, bfloat16 or uint16 bits)
    half = store in (np.float16, np.uint16) or (kprop_worker.BFLOAT16 is not None and store == kprop_worker.BFLOAT16)
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
        elif BUG == "tanh_sigmoid":
            t = g.dtype.type
            act = g * (t(0.5) * (t(1) + np.tanh(g * t(0.5))))
        else:
            act = g / (1 + np.exp(-g))
        if BUG == "act_stored_half" and half:
            act = round_to(store, act)
        y = act.astype(gate.dtype) * up
        if BUG == "truncate_store" and half:
            return {"y": truncate_to(store, y)}
        return {"y": y}


def round_to(store, v):
    """float32 v rounded to nearest in the half dtype `store`, back in float32."""
    if store == np.float16:
        return v.astype(np.float16).astype(np.float32)
    return kprop_worker.bf16_to_float32(kprop_worker.float32_to_bf16(v))


def truncate_to(store, v):
    """float32 v stored in the half dtype `store` rounding toward zero (the truncate_store bug)."""
    if store != np.float16:  # bf16: the high 16 bits of the f32
        bits = (np.ascontiguousarray(v, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return kprop_worker.bf16_to_float32(bits)
    h = v.astype(np.float16)  # to nearest; stepped toward 0 where that rounded away (finite only)
    away = np.isfinite(h) & (np.abs(h.astype(np.float32)) > np.abs(v))
    return np.where(away, np.nextafter(h, np.float16(0)), h).astype(np.float32)


if __name__ == "__main__":
    kprop_worker.serve({"swiglu": swiglu})
