"""bf16 / f16 through python/kprop_worker.py: the bf16 helpers on all 65,536
bit patterns against a simple reference (struct for the exact values, nearest
of the two neighbouring bf16 values by distance, ties to the even pattern),
and a worker round trip over the frame protocol (in memory, no kprop)."""
import io
import json
import math
import struct

import numpy as np
import pytest

from conftest import load_worker


kw = load_worker()
ALL = np.arange(65536, dtype=np.uint32).astype(np.uint16)


def ref_value(bits):
    """The bf16 pattern's value, from the float32 whose top half it is."""
    return struct.unpack("<f", struct.pack("<I", int(bits) << 16))[0]


def is_nan_bits(b):
    return (b & 0x7F80) == 0x7F80 and (b & 0x7F) != 0


def ref_round(x):
    """bf16 bits nearest to the Python float x (ties to even), by distance.

    Every bf16 value and every midpoint of two is a double exactly, so the
    comparison of distances is exact (they are computed in double too, where
    the differences of nearby values are exact by Sterbenz's lemma or small).
    """
    if math.isnan(x):
        raise ValueError
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    # The largest non-negative pattern not above a (the value grows with the pattern).
    lo = 0
    for bit in range(14, -1, -1):
        cand = lo | (1 << bit)
        if cand <= 0x7F80 and ref_value(cand) <= a:
            lo = cand
    if ref_value(lo) == a:
        return sign | lo
    hi = lo + 1  # lo < 0x7F80 here: a is finite and below inf
    if hi == 0x7F80:  # above the max finite: inf from max + ulp/2 on (a tie, to the even inf)
        top = ref_value(0x7F7F) + (ref_value(0x7F7F) - ref_value(0x7F7E)) / 2
        return sign | (0x7F80 if a >= top else 0x7F7F)
    dl, dh = a - ref_value(lo), ref_value(hi) - a
    if dl < dh or (dl == dh and lo % 2 == 0):
        return sign | lo
    return sign | hi


def test_bf16_to_float32_every_pattern():
    got = kw.bf16_to_float32(ALL)
    assert got.dtype == np.float32 and got.shape == (65536,)
    bits = got.view(np.uint32)
    for b in range(65536):
        if is_nan_bits(b):
            assert math.isnan(got[b]), b
            assert bits[b] >> 16 == b | 0x0040, b  # quiet, payload and sign kept
        else:
            assert bits[b] == b << 16, b  # exact (signed zeros and subnormals included)


def test_float32_to_bf16_identity_on_every_pattern():
    back = kw.float32_to_bf16(kw.bf16_to_float32(ALL))
    nan = np.array([is_nan_bits(b) for b in range(65536)])
    assert np.array_equal(back[~nan], ALL[~nan])
    assert np.array_equal(back[nan], ALL[nan] | 0x0040)
    back64 = kw.float32_to_bf16(kw.bf16_to_float32(ALL).astype(np.float64))
    assert np.array_equal(back64[~nan], ALL[~nan])


def _between_points():
    """For each pair (b, b + 1) of adjacent finite positive bf16 patterns, points
    whose rounding is known by construction: the midpoint (to the even one),
    one float32 ulp either side of it (to the nearer), a quarter of the way in
    from each end (to that end)."""
    xs, want = [], []
    for b in range(0x7F7F):
        lo, hi = ref_value(b), ref_value(b + 1)
        mid = (lo + hi) / 2  # exact in float32: one bit more than bf16
        below = float(np.nextafter(np.float32(mid), np.float32(lo)))
        above = float(np.nextafter(np.float32(mid), np.float32(hi)))
        xs += [mid, below, above, lo + (hi - lo) / 4, hi - (hi - lo) / 4]
        want += [b if b % 2 == 0 else b + 1, b, b + 1, b, b + 1]
    return xs, want


def test_float32_to_bf16_rounds_to_nearest_even_between_every_pair():
    xs, want = _between_points()
    pos = np.array(xs, np.float32)
    assert np.array_equal(pos.astype(np.float64), np.array(xs))  # the points are float32s
    arr = np.concatenate([pos, -pos])
    want = np.array(want + [w | 0x8000 for w in want], np.uint16)
    got = kw.float32_to_bf16(arr)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(float(arr[i]), int(got[i]), int(want[i])) for i in bad[:5]]


def test_float32_to_bf16_overflow_zeros_subnormals_against_reference():
    xs = [3.3961775292304636e38, 3.39e38, float(np.finfo(np.float32).max), 1e-45, 2e-45, 0.0, 1e-40, 9.2e-41]
    xs += [-x for x in xs]
    arr = np.array(xs, np.float32)
    got = kw.float32_to_bf16(arr)
    want = np.array([ref_round(float(x)) for x in arr], np.uint16)
    assert np.array_equal(got, want), list(zip(xs, got, want))
    assert int(kw.float32_to_bf16(np.float32(np.finfo(np.float32).max))) == 0x7F80  # past max + ulp/2
    assert int(kw.float32_to_bf16(np.float32(-0.0))) == 0x8000


def test_float64_to_bf16_rounds_once():
    # Doubles between two bf16 values that float32 would round onto the midpoint
    # (double rounding would then tie to even the wrong way).
    xs = []
    for b in range(0x3F80, 0x3F80 + 256):
        lo, hi = ref_value(b), ref_value(b + 1)
        mid = (lo + hi) / 2
        xs += [mid + (hi - lo) * 2.0**-30, mid - (hi - lo) * 2.0**-30, mid]
    xs += [1e300, -1e300, 5e-324, -5e-324, float("inf"), -float("inf")]
    arr = np.array(xs, np.float64)
    got = kw.float32_to_bf16(arr)
    want = np.array([ref_round(x) for x in xs], np.uint16)
    assert np.array_equal(got, want), [(x, int(g), int(w)) for x, g, w in zip(xs, got, want) if g != w][:5]


def test_integer_and_long_double_outputs_round_once_to_bf16():
    # An int64 bf16 output went through float32 first: 2^24 + 2^16 + 1 landed
    # on the tie between 2^24 and 2^24 + 2^17 and went to even (0x4B80), where
    # the value itself rounds up (0x4B81), as C++'s bf16_from_double does.
    x = 2**24 + 2**16 + 1
    for returned in (np.array([x], np.int64), np.array([x], np.float64)):
        got = kw._to_dtype("op", "y", "bf16", returned).view(np.uint16)
        assert int(got[0]) == 0x4B81 == ref_round(float(x)), (returned.dtype, hex(int(got[0])))
    assert int(kw.float32_to_bf16(np.array([x], np.int32))[0]) == 0x4B81


def test_nan_stays_nan():
    for x in (float("nan"), -float("nan")):
        for dt in (np.float32, np.float64):
            b = int(kw.float32_to_bf16(np.array([x], dt))[0])
            assert is_nan_bits(b)
    # A float32 NaN whose payload is only in the low 16 bits: NaN, never inf.
    f = np.array([0x7F800001], np.uint32).view(np.float32)
    assert is_nan_bits(int(kw.float32_to_bf16(f)[0]))
    assert kw.float32_to_bf16(np.float32(1.0)).shape == ()


# ------------------------------------------------------------ worker round trip
def _frame(header, arrays=()):
    text = json.dumps(header).encode()
    return b"KPRP" + struct.pack("<I", len(text)) + text + b"".join(a.tobytes() for a in arrays)


def _read_reply(stream):
    head = stream.read(8)
    assert head[:4] == b"KPRP"
    (n,) = struct.unpack("<I", head[4:])
    header = json.loads(stream.read(n))
    out = {}
    for t in header.get("tensors", []):
        dtype = {"f16": "<f2", "bf16": "<u2", "f32": "<f4"}[t["dtype"]]
        count = int(np.prod(t["shape"]))
        out[t["name"]] = np.frombuffer(stream.read(count * 2 if t["dtype"] != "f32" else count * 4),
                                       dtype, count).reshape(t["shape"])
    return header, out


@pytest.mark.parametrize("returns", ["same", "float32", "float64"])
def test_worker_round_trip_f16_bf16(returns):
    seen = {}

    def echo(x16, xb, **_):
        seen["x16"], seen["xb"] = x16.dtype, xb.dtype
        if returns == "same":
            return {"y16": x16, "yb": xb}
        xb_f = kw.bf16_to_float32(xb.view(np.uint16))
        dt = np.float32 if returns == "float32" else np.float64
        return {"y16": x16.astype(dt), "yb": xb_f.astype(dt)}

    f16 = ALL.view(np.float16).reshape(256, 256)
    nan16 = np.isnan(f16)
    bf = ALL.reshape(256, 256)
    decl = [{"name": "x16", "dtype": "f16", "shape": [256, 256]}, {"name": "xb", "dtype": "bf16", "shape": [256, 256]}]
    outs = [{"name": "y16", "dtype": "f16", "shape": [256, 256]}, {"name": "yb", "dtype": "bf16", "shape": [256, 256]}]
    stdin = io.BytesIO(_frame({"op": "hello", "abi_version": kw.ABI_VERSION})
                       + _frame({"op": "echo", "attrs": {}, "tensors": decl, "outputs": outs}, [f16, bf]))
    stdout = io.BytesIO()
    kw.serve({"echo": echo}, stdin=stdin, stdout=stdout)
    stdout.seek(0)
    hello, _ = _read_reply(stdout)
    assert hello["ok"]
    header, out = _read_reply(stdout)
    assert header["ok"], header
    assert seen["x16"] == np.float16
    assert seen["xb"] == (kw.BFLOAT16 if kw.BFLOAT16 is not None else np.uint16)
    y16 = out["y16"].view(np.uint16)
    assert np.array_equal(y16[~nan16], bf[~nan16])  # bit-exact, +-0 and subnormals included
    assert np.all(np.isnan(out["y16"][nan16]))
    nanb = np.array([is_nan_bits(b) for b in range(65536)]).reshape(256, 256)
    assert np.array_equal(out["yb"][~nanb], bf[~nanb])
    assert all(is_nan_bits(int(b)) for b in out["yb"][nanb])


def test_helpers_agree_with_ml_dtypes_when_installed():
    if kw.BFLOAT16 is None:
        pytest.skip("ml_dtypes is not importable: bf16 travels as uint16 bits")
    xs, _ = _between_points()
    arr = np.concatenate([np.array(xs, np.float32), -np.array(xs, np.float32)])
    assert np.array_equal(kw.float32_to_bf16(arr), arr.astype(kw.BFLOAT16).view(np.uint16))
    f = ALL.view(kw.BFLOAT16).astype(np.float32)
    g = kw.bf16_to_float32(ALL)
    assert np.array_equal(np.isnan(f), np.isnan(g))
    assert np.array_equal(f[~np.isnan(f)].view(np.uint32), g[~np.isnan(g)].view(np.uint32))


def test_the_worker_takes_integer_outputs_as_they_are():
    # As kprop.check does: a float is an error, not truncated; a value outside
    # the declared int type is an error, not wrapped (both passed every
    # softmax_topk invariant through the exec: worker).
    declared = [{"name": "indices", "dtype": "i32", "shape": [2]}]
    (ok,) = kw._outputs("op", declared, {"indices": np.array([1, 2], dtype=np.int64)})
    assert ok.dtype == np.int32 and list(ok) == [1, 2]
    with pytest.raises(TypeError, match="output 'indices' must be integers"):
        kw._outputs("op", declared, {"indices": np.array([1.0, 2.75])})
    with pytest.raises(ValueError, match="output 'indices' has values outside int32's range"):
        kw._outputs("op", declared, {"indices": np.array([1, 2 ** 32])})


def test_a_scalar_output_keeps_its_empty_shape():
    # A declared scalar output (shape []) came back as shape [1]:
    # np.ascontiguousarray makes every 0-d array 1-d.
    for dtype in ("f64", "f32", "f16", "bf16"):
        declared = [{"name": "loss", "dtype": dtype, "shape": []}]
        (loss,) = kw._outputs("op", declared, {"loss": np.float64(0.5)})
        assert loss.shape == () and loss.flags.c_contiguous, dtype
    # A strided view still comes back contiguous.
    declared = [{"name": "y", "dtype": "f64", "shape": [2]}]
    (y,) = kw._outputs("op", declared, {"y": np.arange(4.0)[::2]})
    assert y.flags.c_contiguous and list(y) == [0.0, 2.0]


def test_the_worker_stops_quietly_when_kprop_closes_the_pipe(capfd):
    # A --jobs worker of kprop's stopped while the reply was on its way: the
    # worker printed a BrokenPipeError traceback, as if the user's code had
    # crashed.
    class Closed(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            raise BrokenPipeError(32, "Broken pipe")

    stdin = io.BytesIO(_frame({"op": "hello", "abi_version": kw.ABI_VERSION}))
    kw.serve({}, stdin=stdin, stdout=Closed())
    assert "Traceback" not in capfd.readouterr().err
