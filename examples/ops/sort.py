"""A bitonic sort in NumPy (the network a GPU sort kernel runs), tested by
kprop as a declared op whose reference is NumPy's own sort (specs/ops/sort.yaml).

    prop_runner --spec specs/ops/sort.yaml --target "exec:/usr/bin/python3 examples/ops/sort.py"

Each row of x [B, N] is padded to the next power of two with NaN, sorted by
the bitonic network of compare-exchange steps (partner = i xor j), and cut
back to N. Computes in the input's dtype. The order is NumPy's, NaN last
(after +inf): a compare-exchange orders a pair by `a < b or (b is NaN and a
is not)`, and the padding is NaN, the one value that order puts after every
other (+inf would sort before a row's NaNs and push them out of the row).

`--bug NAME` plants a realistic bug:
    pad_with_zero     pads with 0 instead of NaN: a row with a positive
                      value and N not a power of two loses its largest value
    skip_last_step    the final merge's last compare-exchange stage (j = 1)
                      is skipped: neighbours are left unordered
    flat              sorts the whole [B, N] block as one row (a launch that
                      forgot the batch stride): values move between rows
    f32_keys          orders f64 rows by float32 copies of their values (a kernel
                      that sorts f32 keys and carries the values along): values
                      within one f32 rounding of each other keep their input order
    pad_with_max      pads with the dtype's largest finite value (FLT_MAX, a common "+inf"
                      sentinel): a row with +inf or NaN and N not a power of two loses them
    pad_with_inf      pads with +inf (right for rows without NaN): a row with a NaN and N
                      not a power of two gets +inf where its NaN belongs
    fmin_fmax         the compare-exchange as fmin/fmax (CUDA's fminf/fmaxf return the other
                      operand for a NaN): a NaN is dropped and its partner duplicated
    min_max_nan       the compare-exchange as np.minimum/np.maximum (IEEE min/max that
                      propagate NaN): a NaN is copied over its partner
    tile_64           each 64-element tile sorted (in shared memory) and the merge pass across
                      tiles missing: a row past 64 elements comes out as sorted runs
    flush_subnormals  subnormal inputs flushed to zero (fast math, FTZ/DAZ): values change
    radix_keys        sorted by CUB's float-key transform (a negative flips every bit): a NaN
                      with its sign bit set (-NaN, what 0/0 gives on x86) sorts first, not last
    canonical_zero    values rebuilt so that -0 comes out +0 (y + 0)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("pad_with_zero", "skip_last_step", "flat", "f32_keys", "pad_with_max", "pad_with_inf", "fmin_fmax",
        "min_max_nan", "tile_64", "flush_subnormals", "radix_keys", "canonical_zero")
BUG = kprop_worker.planted_bug(BUGS)


def bitonic(a):
    """Sorts each row of a [B, P], P a power of two, ascending."""
    p = a.shape[-1]
    i = np.arange(p)
    k = 2
    while k <= p:
        j = k // 2
        while j > 0:
            if not (BUG == "skip_last_step" and k == p and j == 1):
                partner = i ^ j
                ascending = (i & k) == 0  # the same for both elements of a pair (j < k)
                # Both elements of a pair order the same two values, first and
                # second by index, so the pair swaps or stays whole. (Each
                # ordering (own, partner) instead kept both halves of an equal
                # pair apart: [0, -0] came out [0, 0], a value lost.)
                first, second = np.minimum(i, partner), np.maximum(i, partner)
                lo, hi = compare_exchange(a[:, first], a[:, second])
                a = np.where((i < partner) == ascending, lo, hi)
            j //= 2
        k *= 2
    return a


def compare_exchange(a, b):
    """(the first, the second) of each pair (a, b) in ascending order, NaN last."""
    if BUG == "fmin_fmax":
        return np.fmin(a, b), np.fmax(a, b)
    if BUG == "min_max_nan":
        return np.minimum(a, b), np.maximum(a, b)
    b_first = (b < a) | (np.isnan(a) & ~np.isnan(b))
    return np.where(b_first, b, a), np.where(b_first, a, b)


def radix_key(x):
    """CUB's float key transform: a negative (sign bit set) flips every bit, else the sign bit."""
    u = {np.float32: np.uint32, np.float64: np.uint64}[x.dtype.type]
    bits = x.view(u)
    sign = u(1) << u(8 * x.itemsize - 1)
    return np.where(bits & sign, ~bits, bits | sign)


def sort(x, **_):
    if BUG == "radix_keys":
        order = np.argsort(radix_key(x), axis=-1, kind="stable")
        return {"y": np.take_along_axis(x, order, axis=-1)}
    if BUG == "tile_64":
        return {"y": np.concatenate([sort_rows(x[:, i:i + 64]) for i in range(0, x.shape[1], 64)], axis=-1)}
    if BUG == "flush_subnormals":
        x = np.where(np.abs(x) < np.finfo(x.dtype).tiny, x * 0, x)
    y = sort_rows(x)
    if BUG == "canonical_zero":
        y = y + x.dtype.type(0)  # -0 + 0 = +0
    return {"y": y}


def sort_rows(x):
    """Each row of x [B, N] sorted by the bitonic network."""
    if BUG == "f32_keys":
        order = np.argsort(x.astype(np.float32), axis=-1, kind="stable")
        return np.take_along_axis(x, order, axis=-1)
    b, n = x.shape
    rows = x.reshape(1, b * n) if BUG == "flat" else x
    p = 1
    while p < rows.shape[-1]:
        p *= 2
    pad = {"pad_with_zero": 0, "pad_with_max": np.finfo(x.dtype).max, "pad_with_inf": np.inf}.get(BUG, np.nan)
    padded = np.concatenate([rows, np.full((rows.shape[0], p - rows.shape[-1]), pad, x.dtype)], axis=-1)
    return bitonic(padded)[:, : rows.shape[-1]].reshape(b, n)


if __name__ == "__main__":
    kprop_worker.serve({"sort": sort})
