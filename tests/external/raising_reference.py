"""A declared op's exec: reference that raises on every row longer than two
(tests/families/op/external_test.cpp): the run stops with the spec's error
(exit 2), and the case it failed on is stored in the scratch folder, never
the corpus, with the command that re-runs it."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402


def sort(x, **_):
    if x.shape[-1] > 2:
        raise RuntimeError("rows longer than two are not handled yet")
    return {"y": np.sort(x, axis=-1)}


if __name__ == "__main__":
    kprop_worker.serve({"sort": sort})
