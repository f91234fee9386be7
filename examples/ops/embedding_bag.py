"""EmbeddingBag (mode mean) in NumPy, tested by kprop as a declared op (specs/ops/embedding_bag.yaml).

    prop_runner --spec specs/ops/embedding_bag.yaml \
        --target "exec:/usr/bin/python3 examples/ops/embedding_bag.py"

ids arrive as int32 or int64, the padding mask `valid` as uint8 (kprop's
bool dtype). Each bag is the mean of table[ids] over its valid positions; an
empty bag is 0.

`--bug NAME` plants a realistic bug:
    padding_counted     the sum is divided by the padded length L, not the bag's length
    padding_not_masked  padded positions' rows are summed too
    empty_bag_nan       an empty bag is 0 / 0 = NaN
    last_row_clipped    ids clipped to V - 2 (an off-by-one bounds check): the last row is never read
    lanes_32            one warp per bag, one lane per column and no loop over columns: columns
                        past the 32nd are never written
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("padding_counted", "padding_not_masked", "empty_bag_nan", "last_row_clipped", "lanes_32")
BUG = kprop_worker.planted_bug(BUGS)


def embedding_bag(table, ids, valid, **_):
    if ids.dtype not in (np.int32, np.int64):
        raise TypeError("ids must be int32 or int64, got %s" % ids.dtype)
    v = valid.astype(bool)
    if BUG == "last_row_clipped":
        ids = np.clip(ids, 0, max(table.shape[0] - 2, 0))
    if BUG == "padding_not_masked":
        v = np.ones_like(v)
    rows = np.where(v[:, :, None], table[ids], table.dtype.type(0))
    total = rows.sum(axis=1)
    count = v.sum(axis=1, keepdims=True).astype(table.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        if BUG == "padding_counted":
            return {"y": total / table.dtype.type(ids.shape[1])}
        if BUG == "empty_bag_nan":
            return {"y": total / count}
        y = total / np.maximum(count, 1)
        if BUG == "lanes_32":
            y[:, 32:] = 0
        return {"y": y}


if __name__ == "__main__":
    kprop_worker.serve({"embedding_bag": embedding_bag})
