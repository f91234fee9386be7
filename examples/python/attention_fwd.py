"""attention.fwd in NumPy, tested by kprop through the worker protocol.

    prop_runner --spec specs/attention_fwd.yaml --target "exec:python3 examples/python/attention_fwd.py"

Materialized softmax attention in the inputs' dtype (f16/bf16 inputs in
float32, as GPU kernels compute them; the worker rounds O to the case's
dtype, LSE comes back as f32). `--bug` plants the
classic causal-mask bug: aligning the mask top-left (query i sees keys
j <= i), which is right only when Nq == Nk.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

TOP_LEFT_CAUSAL = "--bug" in sys.argv


def visible_keys(mask, batch, nq, nk, key_lengths, allowed):
    """[B, Nq, Nk] booleans: may query i of batch b see key j?"""
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    if mask == kprop_worker.MASK_CAUSAL:
        offset = 0 if TOP_LEFT_CAUSAL else nk - nq  # bottom-right: j <= i + Nk - Nq
        return np.broadcast_to(j <= i + offset, (batch, nq, nk))
    if mask == kprop_worker.MASK_KEY_PADDING:
        return np.broadcast_to(j[None] < key_lengths[:, None, None], (batch, nq, nk))
    if mask == kprop_worker.MASK_BOOLEAN:
        return allowed != 0
    return np.ones((batch, nq, nk), dtype=bool)


def attention_fwd(q, k, v, scale, mask, key_lengths=None, allowed=None, **_):
    q, k, v = (kprop_worker.as_float32(a) for a in (q, k, v))  # f16/bf16: f32 arithmetic
    batch, heads_q, nq, _dim = q.shape
    heads_kv, nk = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    k = np.repeat(k, group, axis=1)  # query head h reads kv head h // group
    v = np.repeat(v, group, axis=1)
    s = (q @ k.transpose(0, 1, 3, 2)) * q.dtype.type(scale)
    seen = visible_keys(mask, batch, nq, nk, key_lengths, allowed)[:, None]
    s = np.where(seen, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    empty = m == -np.inf  # a fully masked row: O = 0 and LSE = -inf, never NaN
    m = np.where(empty, 0, m)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    o = (p @ v) / np.where(empty, 1, l)
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(l))[..., 0]
    return {"o": o, "lse": lse}


if __name__ == "__main__":
    kprop_worker.serve({"attention.fwd": attention_fwd})
