"""The BitNet b1.58 linear layer in NumPy, tested by kprop through the worker protocol.

    prop_runner --spec specs/ternary.yaml --target "exec:python3 examples/python/ternary_matmul.py"

Two ops (include/kprop/abi/ternary.h): ternary.quantize_weights packs the
absmean-quantized weights 2 bits each, 4 per byte; ternary.linear unpacks
them, quantizes the activations to int8 per token (absmax), multiplies in
integers and scales to float32, and returns the straight-through gradients.

`--bug NAME` plants one of the family's mutants (kernels/ternary/mutants.cpp):
  scale_absmax       weight scale max|W| instead of mean|W|
  round_toward_zero  both quantizers truncate instead of rounding to nearest
  ste_zero_grad      dW is the zero gradient of round(), not straight-through
  no_eps             scales divide by mean|W| and max|x| without the eps clamp
  round_half_away    ties rounded half away from zero instead of half to even
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("scale_absmax", "round_toward_zero", "ste_zero_grad", "no_eps", "round_half_away")
EPS = 1e-5  # KPROP_TERNARY_EPS
CODE_ZERO, CODE_PLUS, CODE_MINUS = 0, 1, 2  # 2-bit codes; weight k of a row at bits 2 (k % 4) of byte k // 4

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--bug", choices=BUGS, help="plant one of the family's mutants")
# Imported as a module (kprop.check, tests/python): no bug unless BUG is set.
BUG = (parser.parse_args() if __name__ == "__main__" else parser.parse_args([])).bug


def round_to_int(x):
    if BUG == "round_toward_zero":
        return np.trunc(x)
    if BUG == "round_half_away":
        return np.sign(x) * np.floor(np.abs(x) + 0.5)
    return np.rint(x)  # half to even, as torch.round


def clamp_denominator(x):
    return x if BUG == "no_eps" else np.maximum(x, EPS)


def quantize_weights(w, **_):
    rows, cols = w.shape
    if BUG == "scale_absmax":
        s = np.abs(w).max()
    else:
        s = np.cumsum(np.abs(w))[-1] / w.size  # summed in order: the contract defines s bit for bit
    s = clamp_denominator(s)
    with np.errstate(divide="ignore", invalid="ignore"):  # no_eps: 0 / 0 on all-zero weights
        w_q = np.clip(round_to_int(w * (1.0 / s)), -1, 1)
    codes = np.where(w_q > 0, CODE_PLUS, np.where(w_q < 0, CODE_MINUS, CODE_ZERO)).astype(np.uint8)
    row_bytes = -(-cols // 4)
    codes = np.pad(codes, ((0, 0), (0, 4 * row_bytes - cols))).reshape(rows, row_bytes, 4)
    packed = np.bitwise_or.reduce(codes << np.array([0, 2, 4, 6], dtype=np.uint8), axis=-1)
    return {"w_packed": packed, "w_scale": np.array([s])}


def unpack(w_packed, cols):
    codes = (w_packed[..., None] >> np.array([0, 2, 4, 6], dtype=np.uint8)) & 3
    codes = codes.reshape(w_packed.shape[0], -1)[:, :cols]
    return np.where(codes == CODE_PLUS, 1, np.where(codes == CODE_MINUS, -1, 0)).astype(np.int8)


def linear(x, w_packed, w_scale, dy, **_):
    s = w_scale[0]
    w_q = unpack(w_packed, x.shape[1]).astype(np.int32)
    with np.errstate(divide="ignore", invalid="ignore"):  # no_eps: 127 / 0 on an all-zero token
        a = 127.0 / clamp_denominator(np.abs(x).max(axis=1))
        x_q = np.clip(round_to_int(x * a[:, None]), -128, 127)
        x_q = np.nan_to_num(x_q).astype(np.int8)  # no_eps: 0 * inf is NaN, which no int8 holds
    acc = x_q.astype(np.int32) @ w_q.T
    y = (acc * (s / a)[:, None]).astype(np.float32)
    dx = dy @ (s * w_q)
    dw = dy.T @ (x_q / a[:, None])
    if BUG == "ste_zero_grad":
        dw = np.zeros_like(dw)
    return {"x_scale": a, "x_q": x_q, "acc": acc, "y": y, "dx": dx, "dw": dw}


if __name__ == "__main__":
    kprop_worker.serve({"ternary.quantize_weights": quantize_weights, "ternary.linear": linear})
