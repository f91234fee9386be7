"""attention.bwd in NumPy, tested by kprop through the worker protocol.

    prop_runner --spec specs/attention_bwd.yaml --target "exec:/usr/bin/python3 examples/python/attention_bwd.py"

FlashAttention's backward, materialized, in the inputs' dtype (f16/bf16
inputs in float32, as GPU kernels compute them; LSE comes as f32): kprop
sends the forward's O and LSE (as FlashAttention's backward gets them from its
forward) with dO, and the worker recomputes P from S and LSE:

    P  = exp(S - LSE)                 (0 on a fully masked row, LSE = -inf)
    dP = dO V^T,  D = rowsum(dO * O),  dS = P * (dP - D)
    dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dO
    dK, dV summed over the query heads that share a kv head (GQA).

`--bug NAME` plants a real bug:
    dsoftmax_wrong_axis  dS = P * (dP - D') with D' summed over the queries (per key)
    masked_row_nan       no guard for fully masked rows: P = exp(-inf - (-inf)) = NaN
    dk_missing_scale     dK = dS^T Q, without the softmax scale
    d_without_do         D = rowsum(O) instead of rowsum(dO * O)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("dsoftmax_wrong_axis", "masked_row_nan", "dk_missing_scale", "d_without_do")
BUG = kprop_worker.planted_bug(BUGS)


def visible_keys(mask, batch, nq, nk, key_lengths, allowed):
    """[B, Nq, Nk] booleans: may query i of batch b see key j?"""
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    if mask == kprop_worker.MASK_CAUSAL:
        return np.broadcast_to(j <= i + (nk - nq), (batch, nq, nk))  # bottom-right
    if mask == kprop_worker.MASK_KEY_PADDING:
        return np.broadcast_to(j[None] < key_lengths[:, None, None], (batch, nq, nk))
    if mask == kprop_worker.MASK_BOOLEAN:
        return allowed != 0
    return np.ones((batch, nq, nk), dtype=bool)


def per_kv_head(grad, heads_kv):
    """[B, Hq, Nk, D] -> [B, Hkv, Nk, D]: sum over the query heads of each group."""
    batch, heads_q, nk, dim = grad.shape
    return grad.reshape(batch, heads_kv, heads_q // heads_kv, nk, dim).sum(axis=2)


def attention_bwd(q, k, v, o, lse, d_out, scale, mask, key_lengths=None, allowed=None, **_):
    q, k, v, o, d_out = (kprop_worker.as_float32(a) for a in (q, k, v, o, d_out))  # f16/bf16: f32 arithmetic
    batch, heads_q, nq, _dim = q.shape
    heads_kv, nk = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    scale = q.dtype.type(scale)
    kq = np.repeat(k, group, axis=1)  # query head h reads kv head h // group
    vq = np.repeat(v, group, axis=1)
    seen = visible_keys(mask, batch, nq, nk, key_lengths, allowed)[:, None]
    s = np.where(seen, (q @ kq.transpose(0, 1, 3, 2)) * scale, -np.inf)
    lse = lse[..., None]
    with np.errstate(invalid="ignore"):
        if BUG == "masked_row_nan":
            p = np.exp(s - lse)
        else:  # a fully masked row (LSE = -inf) has P = 0, not exp(-inf - (-inf))
            p = np.where(lse == -np.inf, 0, np.exp(s - np.where(lse == -np.inf, 0, lse)))
    p = p.astype(q.dtype, copy=False)
    dp = d_out @ vq.transpose(0, 1, 3, 2)
    d = (o if BUG == "d_without_do" else d_out * o).sum(axis=-1)
    if BUG == "dsoftmax_wrong_axis":
        ds = p * (dp - (p * dp).sum(axis=-2, keepdims=True))
    else:
        ds = p * (dp - d[..., None])
    dq = (ds @ kq) * scale
    dk_scale = q.dtype.type(1) if BUG == "dk_missing_scale" else scale
    dk = per_kv_head((ds.transpose(0, 1, 3, 2) @ q) * dk_scale, heads_kv)
    dv = per_kv_head(p.transpose(0, 1, 3, 2) @ d_out, heads_kv)
    return {"d": d, "dq": dq, "dk": dk, "dv": dv}


if __name__ == "__main__":
    kprop_worker.serve({"attention.bwd": attention_bwd})
