"""python -m kprop.worker MODULE:NAME [--tensors numpy|torch]

Serves a Python function as an `exec:` target (docs/EXTERNAL.md's worker
protocol): what kprop.check(..., isolate=True) starts, once per (re)start.
MODULE is a module name or a path to a .py file (loaded as __kprop_main__,
so a script guarded by `if __name__ == "__main__":` does not run again);
NAME is the function's qualified name. Also usable directly:

    prop_runner --spec specs/attention_fwd.yaml --target "exec:python3 -m kprop.worker mymod:attention_fwd"

f16 tensors are NumPy float16 arrays; bf16 tensors are ml_dtypes.bfloat16
arrays when ml_dtypes is importable, else uint16 arrays of the raw bits
(bf16_to_float32 / float32_to_bf16 convert those).

A worker script of the installed package is the standalone
python/kprop_worker.py's, with the same names (serve, Unsupported,
BFLOAT16, as_float32, bf16_to_float32, float32_to_bf16):

    from kprop import worker as kprop_worker
    kprop_worker.serve({"attention.fwd": attention_fwd})
"""

import argparse
import importlib
import importlib.util
import os
import sys
import traceback

import numpy as np

from . import _wire
from ._check import Unsupported
from ._half import BFLOAT16  # ml_dtypes.bfloat16 when importable, else None
from ._half import as_float32, bf16_to_float32, float32_to_bf16

__all__ = ["serve", "main", "load", "Unsupported", "BFLOAT16", "as_float32", "bf16_to_float32", "float32_to_bf16"]

ABI_VERSION = _wire.ABI_VERSION
_DTYPES = _wire.dtypes(BFLOAT16)


# The MODULE:NAME load() is importing, while it is: a kprop.check(...,
# isolate=True) that the import itself runs (a script without `if __name__ ==
# "__main__":`) is refused, as it would start a worker that imports it again,
# without end.
_KPROP_WORKER_LOADING = None


def load(spec):
    """The object named by "module:qualname" or "path.py:qualname"."""
    global _KPROP_WORKER_LOADING
    module_name, _, qualname = spec.rpartition(":")
    if not module_name or not qualname:
        raise ValueError("kprop.worker: expected MODULE:NAME, got %r" % spec)
    _KPROP_WORKER_LOADING = spec
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            loader_spec = importlib.util.spec_from_file_location("__kprop_main__", module_name)
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules["__kprop_main__"] = module
            loader_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    finally:
        _KPROP_WORKER_LOADING = None
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def serve(fn, tensors="numpy", stdin=None, stdout=None):
    """Serves fn (a function or a dict {op: function}) until kprop closes the pipe."""
    from ._check import _Target  # the same trampoline as in process

    if stdin is None:
        stdin = sys.stdin.buffer
    if stdout is None:
        stdout = _wire.protocol_stdout()
    target = None
    reported = set()
    while True:
        header, inputs = _wire.read_frame(stdin, _DTYPES)
        if header is None:
            return
        op = header.get("op")
        if op == "hello":
            ops = list(header.get("ops", []))
            try:
                target = _Target(fn, ops, tensors)
                _wire.write_frame(stdout, {"ok": True, "abi_version": ABI_VERSION, "ops": ops})
            except Exception as e:
                _wire.write_frame(stdout, {"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
            continue
        outputs = []
        for d in header.get("outputs", []):
            a = np.empty(d["shape"], _DTYPES[d["dtype"]])
            # poison, as kprop's own buffers: NaN for floats, 0x5A bytes for integers (not -1)
            a.reshape(-1).view(np.uint8).fill(0xFF if a.dtype.kind == "f" else 0x5A)
            outputs.append((d["name"], d["dtype"], a))
        for name in inputs:
            inputs[name].flags.writeable = False
        status = target(op, dict(header.get("attrs", {})), inputs, outputs, header.get("dims"))
        if status is None:
            described = [{"name": n, "dtype": dt, "shape": list(a.shape)} for n, dt, a in outputs]
            _wire.write_frame(stdout, {"ok": True, "tensors": described}, [a for _, _, a in outputs])
        elif status[0] == "unsupported":
            _wire.write_frame(stdout, {"ok": False, "unsupported": True, "error": status[1]})
        elif status[0] == "unavailable":  # an import it made failed: it cannot run here
            _wire.write_frame(stdout, {"ok": False, "unsupported": True, "unavailable": True, "error": status[1]})
        elif status[0] == "wiring":  # fn cannot take the op's arguments: the run stops, nothing stored
            _wire.write_frame(stdout, {"ok": False, "wiring": True, "error": status[1]})
        else:
            place = target.places.get(status[1], status[1])  # one traceback per place it is raised
            if place not in reported:
                reported.add(place)
                sys.stderr.write(target.tracebacks.get(status[1], status[1] + "\n"))
            _wire.write_frame(stdout, {"ok": False, "error": status[1]})


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kprop.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="MODULE:NAME or PATH.py:NAME")
    parser.add_argument("--tensors", choices=["numpy", "torch"], default="numpy")
    args = parser.parse_args(argv)
    # The protocol's stdout is taken before the target's module is imported:
    # what that prints at import time goes to stderr, not into the replies.
    stdout = _wire.protocol_stdout()
    try:
        fn = load(args.target)
    except Exception:
        traceback.print_exc()
        sys.exit("kprop.worker: cannot load %s" % args.target)
    serve(fn, args.tensors, stdout=stdout)


if __name__ == "__main__":
    main()
