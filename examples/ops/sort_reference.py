"""The reference of specs/ops/sort.yaml: NumPy's own sort, the user's eager
code standing in for an expression (the expression language has no sort).

kprop calls it twice per case: with every float input and output in f64
(reference.y, the oracle) and in the case's dtypes (naive.y, the
same-precision baseline of close(k=)). The spec names it with a path
relative to the spec's folder:

    reference: exec:/usr/bin/python3 ../../examples/ops/sort_reference.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402


def sort(x, **_):
    return {"y": np.sort(x, axis=-1)}


if __name__ == "__main__":
    kprop_worker.serve({"sort": sort})
