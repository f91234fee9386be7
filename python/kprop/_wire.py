"""The worker protocol's framing (docs/EXTERNAL.md), shared by kprop.worker and
python/kprop_worker.py: frames of b"KPRP", a little-endian u32 header length,
a JSON header, then the tensors' bytes back to back in header order
(little-endian, C order). NumPy only and no relative imports, so that
kprop_worker.py can load it by path without the built kprop package.
"""

import json
import os
import struct
import sys

import numpy as np

ABI_VERSION = 1


def dtypes(bfloat16):
    """The NumPy dtype of each wire dtype; bf16 is `bfloat16` (ml_dtypes.bfloat16)
    when given, else the raw bits as uint16 (NumPy has no bfloat16)."""
    return {
        "f32": np.dtype("<f4"),
        "f64": np.dtype("<f8"),
        "f16": np.dtype("<f2"),
        "bf16": bfloat16 if bfloat16 is not None else np.dtype("<u2"),
        "i8": np.dtype("i1"),
        "u8": np.dtype("u1"),
        "i32": np.dtype("<i4"),
        "i64": np.dtype("<i8"),
    }


def integer_output(op, name, a, dtype):
    """An integer output (indices, tokens, counts) as it is, in `dtype`:
    floats would be truncated and out-of-range values wrapped into values
    the kernel never returned, so both are errors."""
    if not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
        raise TypeError("%s: output '%s' must be integers (%s), got %s" % (op, name, dtype, a.dtype))
    info = np.iinfo(dtype)
    if a.size and (a.min() < info.min or a.max() > info.max):
        raise ValueError("%s: output '%s' has values outside %s's range [%d, %d]" % (
            op, name, np.dtype(dtype), info.min, info.max))
    return a.astype(dtype, copy=False)


def snapshot(inputs):
    """Copies of a call's input arrays, taken before the call, for
    changed_input() to compare with after it."""
    return {name: np.array(a, copy=True) for name, a in inputs.items()}


def changed_input(who, inputs, before):
    """A message naming the first input the call wrote into, and the first
    element that changed, else None. NumPy refuses writes into a read-only
    input, but a kernel reaching it through a raw pointer (ctypes, a C
    extension, torch.from_numpy) bypasses that: the change went unseen, and
    in process the reference then ran on the written input. Compared byte
    for byte, so a NaN that became another NaN (or -0.0 that became 0.0)
    is a change too."""
    for name, a in inputs.items():
        old = before[name]
        now = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        was = old.reshape(-1).view(np.uint8)
        if np.array_equal(now, was):
            continue
        element = int(np.flatnonzero(now != was)[0]) // max(a.itemsize, 1)
        at = [int(i) for i in np.unravel_index(element, a.shape)] if a.shape else []
        return ("%s wrote into its input '%s' (first change at index %s: %r became %r); inputs are read-only: "
                "copy one to change it (np.array(x))" % (who, name, at, old.reshape(-1)[element].item(),
                                                          np.asarray(a).reshape(-1)[element].item()))
    return None


def read_exact(stream, n):
    data = bytearray()
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_frame(stream, dtype_of):
    """(header, {name: read-only array}), or (None, None) at the end of the stream."""
    head = read_exact(stream, 8)
    if head is None:
        return None, None
    if head[:4] != b"KPRP":
        raise RuntimeError("kprop worker: bad frame magic %r" % head[:4])
    (length,) = struct.unpack("<I", head[4:])
    header = json.loads(read_exact(stream, length))
    tensors = {}
    for t in header.get("tensors", []):
        dtype = dtype_of[t["dtype"]]
        count = int(np.prod(t["shape"], dtype=np.int64))
        raw = read_exact(stream, count * dtype.itemsize)
        tensors[t["name"]] = np.frombuffer(raw, dtype=dtype, count=count).reshape(t["shape"])
    return header, tensors


def write_frame(stream, header, arrays=()):
    text = json.dumps(header).encode()
    stream.write(b"KPRP" + struct.pack("<I", len(text)) + text)
    for a in arrays:
        stream.write(a.tobytes(order="C"))
    stream.flush()


def protocol_stdout():
    """The real stdout, for the protocol alone: print() goes to stderr from now on."""
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stdout


_NAMED = {}


def named_dims(f, dims, taken):
    """The dims of a declared op's request (header "dims") that `f` names as
    parameters, by name, leaving out those already in `taken` (its inputs and
    attrs): `def topk(x, K)` gets K, an extent no input carries. A function
    without such parameters (or `**kwargs` alone) gets none, so one written
    before dims were sent is called as it was."""
    if not dims:
        return {}
    try:
        params = _NAMED.get(f)
        if params is None:
            import inspect

            params = frozenset(
                name
                for name, p in inspect.signature(f).parameters.items()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            )
            _NAMED[f] = params
    except (TypeError, ValueError):  # no signature (a builtin), or f unhashable
        return {}
    return {name: int(v) for name, v in dims.items() if name in params and name not in taken}


def cannot_run_here(e):
    """The reply's text when fn's exception means it cannot run on this
    machine: a module not installed here (ModuleNotFoundError), or a shared
    library an extension module needs that this machine lacks; None for any
    other exception, an ImportError of a name a module lacks included (the
    code's error, on every machine). kprop.check and both workers."""
    if isinstance(e, ModuleNotFoundError) or (isinstance(e, ImportError) and ".so" in str(e)):
        return "%s: %s (an import the function made failed: it cannot run here)" % (type(e).__name__, e)
    return None


def argument_mismatch(f, kwargs, role, op, pytest_items=True):
    """Why f's signature cannot take the op's arguments (a parameter that is
    neither an input nor an attribute of the op, one of them missing), as
    one line; None when it can, so a TypeError raised inside f is f's own.
    The wiring, not the kernel: kprop.check raises it, a worker answers
    {"wiring": true} and the run stops with it, nothing stored."""
    import inspect

    try:
        inspect.signature(f).bind(**kwargs)
        return None
    except TypeError as e:
        name = getattr(f, "__name__", None) or type(f).__name__
        return ("kprop: %s %s cannot take the arguments of op %s: %s. It is called with the op's inputs and "
                "attributes as keyword arguments (%s); a parameter that is none of them%s needs a default, and "
                "**_ takes the ones it does not use" % (
                    role, name, op, e, ", ".join(sorted(kwargs)),
                    " (a pytest fixture: @kprop.spec items run none)" if pytest_items else ""))
    except ValueError:  # no signature to read (a builtin): nothing to say
        return None
