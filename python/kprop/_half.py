"""bfloat16 <-> float32 for NumPy, which has no bfloat16 (no package import:
python/kprop_worker.py loads this file by path, so a worker runs without the
kprop package built).

How bf16 reaches a Python kernel, the same in every path (kprop.check in
process, isolate=True's kprop.worker, python/kprop_worker.py): an array of
dtype BFLOAT16 when ml_dtypes is importable, else a uint16 array of the raw
bits. Public as kprop.BFLOAT16, kprop.bf16_to_float32, kprop.float32_to_bf16
and kprop.as_float32 (and kprop_worker's names of the same).
"""
import numpy as np

try:  # a real bfloat16 dtype for NumPy, when installed
    import ml_dtypes

    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except Exception:  # not installed, or built for another NumPy (it raises AttributeError then)
    BFLOAT16 = None


def bf16_to_float32(bits):
    """float32 values of bf16 bit patterns (a uint16 array): exact.

    A bf16 is the top half of a float32. NaNs come back quiet (payload kept).
    """
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise TypeError("bf16_to_float32 expects uint16 bits, not %s" % b.dtype)
    b = b.astype(np.uint32)
    nan = ((b & 0x7F80) == 0x7F80) & ((b & 0x007F) != 0)
    b = np.where(nan, b | 0x0040, b)  # quiet bit
    return (b << 16).view(np.float32)


def float32_to_bf16(x):
    """bf16 bit patterns (uint16) of float values, rounded to nearest, ties to even.

    Overflow goes to +-inf, NaN stays NaN (sign and the payload's top bits kept,
    quiet bit set). Every input is rounded once, straight to bf16: float16 and
    float32 exactly, anything else through float64 (integers exact up to 2^53)
    and float32 rounded to odd, which cannot round twice.
    """
    x = np.asarray(x)
    shape = x.shape
    x = np.ascontiguousarray(x).reshape(-1)
    if x.dtype not in (np.float16, np.float32):
        # Integers and long doubles through float64 (exact up to 2^53): a
        # cast to float32 would round them once before the bf16 rounding
        # (2^24 + 2^16 + 1 landed on a tie and went to even).
        x = x.astype(np.float64)
    if x.dtype == np.float64:
        with np.errstate(invalid="ignore", over="ignore"):
            f = x.astype(np.float32)  # nearest; made round-to-odd: toward zero, low bit sticky
            back = f.astype(np.float64)
            inexact = (back != x) & ~np.isnan(x)
            f = np.where(inexact & (np.abs(back) > np.abs(x)), np.nextafter(f, np.float32(0)), f)
        u = f.astype(np.float32).view(np.uint32)
        u = np.where(inexact, u | np.uint32(1), u).astype(np.uint32)
    else:
        u = x.astype(np.float32).view(np.uint32)
    nan = ((u & 0x7F800000) == 0x7F800000) & ((u & 0x007FFFFF) != 0)
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16  # RNE; a carry reaches the exponent (or inf)
    return np.where(nan, (u >> 16) | 0x0040, rounded).astype(np.uint16).reshape(shape)


def as_float32(a):
    """float32 values of a half-precision tensor, exactly; any other array as it is.

    Takes f16, ml_dtypes bfloat16 or bf16 bits (uint16), for kernels that
    compute in float32 what they store in f16/bf16, as GPU kernels do (the
    worker rounds the returned outputs to the case's dtype).
    """
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return bf16_to_float32(a)
    if a.dtype == np.float16 or (BFLOAT16 is not None and a.dtype == BFLOAT16):
        return a.astype(np.float32)
    return a
