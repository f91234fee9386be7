"""Make a plain NumPy function a kprop target.

    import kprop_worker

    def attention_fwd(q, k, v, scale, mask, key_lengths=None, allowed=None, **_):
        ...
        return {"o": o, "lse": lse}

    kprop_worker.serve({"attention.fwd": attention_fwd})

and run it with

    prop_runner --spec specs/attention_fwd.yaml --target "exec:python3 my_worker.py"

Each request calls the op's function with the request's tensors (read-only
NumPy arrays, shapes and dtypes as in include/kprop/abi.h) and attributes
as keyword arguments; one that writes into an input anyway (a raw pointer:
ctypes, a C extension) fails the case, naming the input and the first
element it changed. The function returns the declared outputs, as a dict
by name or a tuple in declaration order; each is converted to its declared
dtype and must have its declared shape (real numbers: a complex, string or
object array, or a bool array where floats are due, fails the case, as in
kprop.check). Raise `Unsupported` for a case the
kernel cannot run (kprop reports the target as skipped); any other exception
fails the case (kprop saves it and exits 3), with the traceback on stderr
(once per place the error is raised: a shrink repeats it at every step).

The protocol (docs/EXTERNAL.md): frames of b"KPRP", a little-endian u32
header length, a JSON header, then the tensors' bytes back to back in
header order (little-endian, C order). kprop sends {"op": "hello", ...}
first; the worker answers with its ABI version and ops. stdout carries the
protocol, so print() is redirected to stderr.

Half precision: f16 tensors are NumPy float16 arrays. NumPy has no bfloat16,
so bf16 tensors arrive as ml_dtypes.bfloat16 arrays when the ml_dtypes
package is importable (`BFLOAT16` is then its dtype), else as uint16 arrays
of the raw bits (`BFLOAT16` is None); `bf16_to_float32(bits)` and
`float32_to_bf16(x)` convert between those bits and floats (round to
nearest even, NaN kept NaN), and `as_float32(a)` gives any half tensor as
float32 for a kernel that computes in f32. A bf16 output may be returned as
bfloat16, as uint16 bits, or as floats (rounded once, to nearest even).
"""

import os
import sys
import traceback

import numpy as np

# Mask kinds of attention (KPROP_MASK_* in include/kprop/abi/attention.h).
MASK_NONE, MASK_CAUSAL, MASK_KEY_PADDING, MASK_BOOLEAN = 0, 1, 2, 3


def _load(name):
    """python/kprop/NAME.py, by path: the worker must not need the built kprop package."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kprop", name + ".py")
    if not os.path.isfile(path):
        raise ImportError("kprop_worker.py needs %s beside it: copy kprop's python/kprop/ folder with it (it "
                          "reads kprop/_half.py and kprop/_wire.py), or import it from kprop's python/ folder "
                          "(PYTHONPATH)" % path)
    spec = importlib.util.spec_from_file_location("_kprop" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_half = _load("_half")
_wire = _load("_wire")  # the framing, shared with kprop.worker
BFLOAT16 = _half.BFLOAT16  # ml_dtypes.bfloat16 when importable, else None
bf16_to_float32 = _half.bf16_to_float32
float32_to_bf16 = _half.float32_to_bf16
as_float32 = _half.as_float32
ABI_VERSION = _wire.ABI_VERSION
_DTYPES = _wire.dtypes(BFLOAT16)


def _read_frame(stream):
    return _wire.read_frame(stream, _DTYPES)


_write_frame = _wire.write_frame


def _to_dtype(op, name, dtype_name, value):
    """`value` as the wire dtype of `dtype_name` (bf16: bits, bfloat16 or
    floats; an integer dtype: integers in its range, nothing converted)."""
    a = np.asarray(value)
    integer = dtype_name != "bf16" and np.issubdtype(_DTYPES[dtype_name], np.integer)
    # As kprop.check in process (kprop/_check.py's _write_outputs): real
    # numbers only, since a cast would drop a complex output's imaginary part
    # (with a mere ComplexWarning) or parse a string; and no bool mask where
    # values are due (stored as 0/1 it would be judged as numbers).
    if a.dtype.kind not in "biuf" and not getattr(a.dtype.type, "__module__", "").startswith("ml_dtypes"):
        raise TypeError("%s: output '%s' has dtype %s: return real numbers (%s)" % (op, name, a.dtype, dtype_name))
    if a.dtype == np.bool_ and not integer:
        raise TypeError("%s: output '%s' is a bool array: return the %s values, not a mask" % (op, name, dtype_name))
    if integer:
        return _wire.integer_output(op, name, a, _DTYPES[dtype_name])
    if dtype_name != "bf16":
        with np.errstate(over="ignore"):  # a value past the dtype's range stores as inf, as a kernel's would
            return a.astype(_DTYPES[dtype_name], copy=False)
    if a.dtype == np.uint16 or (BFLOAT16 is not None and a.dtype == BFLOAT16):
        return a.view(_DTYPES["bf16"])
    if a.dtype.kind not in "fiub":  # e.g. a torch-less object array
        raise TypeError("a bf16 output must be floats, bfloat16 or uint16 bits, not %s" % a.dtype)
    return float32_to_bf16(a).view(_DTYPES["bf16"])


class Unsupported(Exception):
    """The kernel cannot run this case (kprop reports the target as skipped)."""


class InputWritten(Exception):
    """The kernel wrote into one of its (read-only) inputs: the case fails."""


def _outputs(op, declared, result):
    if isinstance(result, (tuple, list)):
        if len(result) != len(declared):
            raise ValueError("%s returned %d outputs, expected %d (%s)"
                             % (op, len(result), len(declared), ", ".join(d["name"] for d in declared)))
        result = {d["name"]: r for d, r in zip(declared, result)}
    if not isinstance(result, dict):
        raise TypeError("%s must return a dict of outputs or a tuple, not %s" % (op, type(result).__name__))
    arrays = []
    for d in declared:
        if d["name"] not in result:
            raise KeyError("%s returned no output '%s'" % (op, d["name"]))
        # C order, and a 0-d output stays 0-d (np.ascontiguousarray makes it 1-d).
        a = np.asarray(_to_dtype(op, d["name"], d["dtype"], result[d["name"]]), order="C")
        if list(a.shape) != list(d["shape"]):
            raise ValueError("%s: output '%s' has shape %s, expected %s"
                             % (op, d["name"], list(a.shape), d["shape"]))
        arrays.append(a)
    extra = set(result) - {d["name"] for d in declared}
    if extra:
        raise KeyError("%s returned outputs nobody asked for: %s" % (op, ", ".join(sorted(extra))))
    return arrays


def planted_bug(bugs, argv=None):
    """The NAME of `--bug NAME` on the command line (None without --bug), for
    the examples that plant a known bug; exits naming the script and `bugs`
    when NAME is missing or not one of them."""
    argv = sys.argv if argv is None else argv
    if "--bug" not in argv:
        return None
    at = argv.index("--bug") + 1
    bug = argv[at] if at < len(argv) else None
    if bug not in bugs:
        sys.exit("%s: --bug takes one of: %s" % (os.path.basename(argv[0]), ", ".join(bugs)))
    return bug


def serve(ops, stdin=None, stdout=None):
    """Serve `ops` ({"op name": function}) until kprop closes the pipe."""
    if stdin is None:
        stdin = sys.stdin.buffer
    if stdout is None:
        stdout = _wire.protocol_stdout()
    try:
        _serve(ops, stdin, stdout)
    except BrokenPipeError:
        # kprop closed the pipe while a reply was on its way (a --jobs worker
        # stopped once its cases were not needed, a run that ended): nobody
        # waits for it, so no traceback; stdout goes to /dev/null so that
        # closing it at exit does not raise again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass


def _serve(ops, stdin, stdout):
    reported = set()
    while True:
        header, tensors = _read_frame(stdin)
        if header is None:
            return
        op = header.get("op")
        if op == "hello":
            _write_frame(stdout, {"ok": True, "abi_version": ABI_VERSION, "ops": sorted(ops)})
            continue
        declared = header.get("outputs", [])
        try:
            if op not in ops:
                raise KeyError("this worker serves no op '%s' (it serves: %s)" % (op, ", ".join(sorted(ops))))
            kwargs = dict(header.get("attrs", {}))
            kwargs.update(tensors)
            kwargs.update(_wire.named_dims(ops[op], header.get("dims"), kwargs))  # a declared op's dims it names
            before = _wire.snapshot(tensors)
            try:
                returned = ops[op](**kwargs)
            except TypeError:
                wiring = _wire.argument_mismatch(ops[op], kwargs, "the worker's function", op, pytest_items=False)
                if wiring is None:
                    raise
                # Its wiring, not the kernel: the run stops with it, nothing stored.
                _write_frame(stdout, {"ok": False, "wiring": True, "error": wiring})
                continue
            # A write into an input through a raw pointer (ctypes, a C
            # extension) bypasses the read-only flag: the kernel's bug, failed here.
            changed = _wire.changed_input("the target", tensors, before)
            if changed is not None:
                raise InputWritten(changed)
            arrays = _outputs(op, declared, returned)
        except Unsupported as e:
            _write_frame(stdout, {"ok": False, "unsupported": True, "error": str(e)})
            continue
        except Exception as e:  # the case fails; the worker lives on
            # A module (or a shared library of one) the kernel imports is
            # missing here (a CI image without torch): it cannot run on this
            # machine, which is no failure of the kernel (as a mutant's, it
            # read as a kill). Another ImportError (a name a module lacks) is
            # the code's error, as any exception.
            missing = _wire.cannot_run_here(e)
            if missing:
                _write_frame(stdout, {"ok": False, "unsupported": True, "unavailable": True, "error": missing})
                continue
            # Shrinking repeats the failure many times, its message often
            # naming the shrinking shape: one traceback per place it is
            # raised (the exception's type and innermost frame), not per message.
            frames = traceback.extract_tb(e.__traceback__)
            key = (type(e).__name__,) + ((frames[-1].filename, frames[-1].lineno) if frames else (str(e),))
            if key not in reported:
                reported.add(key)
                traceback.print_exc(file=sys.stderr)
            _write_frame(stdout, {"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
            continue
        described = [{"name": d["name"], "dtype": d["dtype"], "shape": list(a.shape)}
                     for d, a in zip(declared, arrays)]
        _write_frame(stdout, {"ok": True, "tensors": described}, arrays)
