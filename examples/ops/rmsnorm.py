"""RMSNorm forward in NumPy, tested by kprop as a declared op (specs/ops/rmsnorm.yaml).

    prop_runner --spec specs/ops/rmsnorm.yaml --target "exec:/usr/bin/python3 examples/ops/rmsnorm.py"

Computes in the input's dtype: y = x / sqrt(mean(x^2) + eps) * w.

`--bug NAME` plants a realistic bug:
    mean_not_squares   the statistic is mean(x) instead of mean(x^2) (abs taken so sqrt is defined)
    eps_outside_sqrt   x / (sqrt(mean(x^2)) + eps)
    weight_wrong_axis  w applied along the rows (w[:T, None]) instead of the last dim
    no_weight          w never applied
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("mean_not_squares", "eps_outside_sqrt", "weight_wrong_axis", "no_weight")
BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv[:-1] else None
if "--bug" in sys.argv and BUG not in BUGS:
    sys.exit("rmsnorm.py: --bug takes one of: %s" % ", ".join(BUGS))


def rmsnorm(x, w, eps, **_):
    eps = x.dtype.type(eps)
    w = w.astype(x.dtype)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if BUG == "mean_not_squares":
            ms = np.abs(x.mean(axis=-1, keepdims=True))
        else:
            ms = (x * x).mean(axis=-1, keepdims=True)
        if BUG == "eps_outside_sqrt":
            y = x / (np.sqrt(ms) + eps)
        else:
            y = x / np.sqrt(ms + eps)
        if BUG == "no_weight":
            return {"y": y}
        if BUG == "weight_wrong_axis":
            rows = y.shape[0]
            wr = np.resize(w, rows)  # w indexed by row, not by feature
            return {"y": y * wr[:, None]}
        return {"y": y * w}


if __name__ == "__main__":
    kprop_worker.serve({"rmsnorm": rmsnorm})
