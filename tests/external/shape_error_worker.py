"""A worker for tests/external/op_copy.yaml whose kernel raises on rows
wider than 2, naming the row's width: shrinking repeats the error with a
new message at each step (tests/external/worker_traceback_test.sh)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402


def copy(x, **_):
    if x.shape[-1] > 2:
        raise ValueError("rows of %d elements are not handled" % x.shape[-1])
    return {"y": x.copy()}


if __name__ == "__main__":
    kprop_worker.serve({"copy": copy})
