"""A declared op's external reference written as plain NumPy, y = 2 x: right
in f64, but without ml_dtypes a bf16 tensor reaches it as raw uint16 bits,
and `x * 2` doubles the bits (ctest op.bf16_bits_reference)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402


def scale2(x, **_):
    if x.dtype.kind == "f":
        return {"y": x * 2}
    return {"y": (x * 2).astype(x.dtype)}  # the bits doubled, as with plain NumPy on uint16 (wrapping)


kprop_worker.serve({"scale2": scale2})
