"""A worker for tests/external/op_copy.yaml that copies rows of one element
and declines every other case (kprop_worker.Unsupported): most of what the
spec draws (D in [1, 40]) is declined (tests/fuzz_declined_test.sh)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402


def copy(x, **_):
    if x.shape[-1] != 1:
        raise kprop_worker.Unsupported("only rows of one element")
    return {"y": x.copy()}


if __name__ == "__main__":
    kprop_worker.serve({"copy": copy})
