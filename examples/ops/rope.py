"""Rotary position embedding (RoPE) in NumPy, tested by kprop as a declared op (specs/ops/rope.yaml).

    prop_runner --spec specs/ops/rope.yaml --target "exec:/usr/bin/python3 examples/ops/rope.py"

Half-split pairing (GPT-NeoX, Llama, Hugging Face rotate_half): element i of a
head is rotated with element i + D/2 by the angle of frequency i. Token t sits
at position offset + t (a continued sequence: the tokens after a KV cache of
`offset` tokens) and reads row offset + t of the cos/sin tables, as
FlashAttention's apply_rotary_emb(x, cos, sin, seqlen_offsets=offset) does.
x arrives as [T, H, 2, D/2] (the spec names the halves), the same memory as
[T, H, D]; the kernel works on [T, H, D]. Computes in the input's dtype.

`--bug NAME` plants a realistic bug:
    interleaved       pairs (2i, 2i + 1) (GPT-J / Meta-Llama original) instead of (i, i + D/2)
    no_offset         positions restart at 0: rows 0 .. T - 1 of the tables, offset ignored
    fp16_cache        the cos/sin tables cached in float16 (the model's half dtype) before use
    inverse_rotation  rotates by -angle: rotate_half(x) = [x2, -x1]
    last_row_clamped  positions clamped one row short of the tables (an off-by-one bound, pos <= rows - 2):
                      only the last position the spec allows, offset 32 + T 32 - 1 = 63, reads a wrong row
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("interleaved", "no_offset", "fp16_cache", "inverse_rotation", "last_row_clamped")
BUG = kprop_worker.planted_bug(BUGS)


def rope(x, cos, sin, offset, **_):
    t, h, _, half = x.shape
    x = x.reshape(t, h, 2 * half)
    start = 0 if BUG == "no_offset" else int(offset)
    pos = np.arange(start, start + t)  # one table row per token's position
    if BUG == "last_row_clamped":
        pos = np.minimum(pos, cos.shape[0] - 2)
    c = cos[pos].astype(x.dtype)  # [T, D/2]
    s = sin[pos].astype(x.dtype)
    if BUG == "fp16_cache":
        c = c.astype(np.float16).astype(x.dtype)
        s = s.astype(np.float16).astype(x.dtype)
    c, s = c[:, None, :], s[:, None, :]
    with np.errstate(over="ignore", invalid="ignore"):
        if BUG == "interleaved":
            x1, x2 = x[..., 0::2], x[..., 1::2]
            y = np.empty_like(x)
            y[..., 0::2] = x1 * c - x2 * s
            y[..., 1::2] = x2 * c + x1 * s
        else:
            x1, x2 = x[..., :half], x[..., half:]
            if BUG == "inverse_rotation":
                rotated = np.concatenate([x2, -x1], axis=-1)
            else:
                rotated = np.concatenate([-x2, x1], axis=-1)
            y = x * np.concatenate([c, c], axis=-1) + rotated * np.concatenate([s, s], axis=-1)
    return {"y": y.reshape(t, h, 2, half)}


if __name__ == "__main__":
    kprop_worker.serve({"rope": rope})
