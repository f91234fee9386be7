"""Draft-tree verification (dflash) in NumPy, tested by kprop through the worker protocol.

    prop_runner --spec specs/dflash.yaml --target "exec:python3 examples/python/dflash_verify.py"

The two ops of one speculative-decoding cycle (include/kprop/abi/dflash.h):
"dflash.tree_inputs" gives the tree's position ids and attention mask, kprop
runs its own target model under them, and "dflash.verify" reads the logits
to accept the longest matching root path and pick the bonus token.

`--bug NAME` plants one of the real bugs kprop's mutants reproduce:
  positional_logits        node i verified against row i (right only for chains)
  depth_logits             node i verified against row d(i) - 1
  no_subtree_invalidation  accepts matches under a rejected ancestor
  no_bonus_token           emits no bonus token
  index_positions          position id P + i instead of P + d(i) - 1
  parent_only_mask         node attends to its parent and itself, not all ancestors
  sibling_leak_mask        node attends to every earlier node (causal over the flat tree)
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("positional_logits", "depth_logits", "no_subtree_invalidation", "no_bonus_token",
        "index_positions", "parent_only_mask", "sibling_leak_mask")


def depths(parents):
    """d(i) = 1 for a root, d(parent) + 1 otherwise (parents precede children)."""
    d = np.zeros(len(parents), dtype=np.int64)
    for i, p in enumerate(parents):
        d[i] = 1 if p < 0 else d[p] + 1
    return d


def ancestor_closure(parents):
    """[N, N] booleans: is node j node i itself or one of its ancestors?"""
    n = len(parents)
    sees = np.zeros((n, n), dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            sees[i] = sees[p]  # topological order: the parent's row is final
        sees[i, i] = True
    return sees


def tree_inputs(tokens, parents, context_length, bug=None, **_):
    n, p = len(parents), context_length
    if bug == "index_positions":
        position_ids = p + np.arange(n)
    else:
        position_ids = p + depths(parents) - 1
    if bug == "sibling_leak_mask":
        sees = np.tril(np.ones((n, n), dtype=bool))
    elif bug == "parent_only_mask":
        sees = np.eye(n, dtype=bool)
        children = np.flatnonzero(parents >= 0)
        sees[children, parents[children]] = True
    else:
        sees = ancestor_closure(parents)
    mask = np.concatenate([np.ones((n, p), dtype=bool), sees], axis=1)
    return {"position_ids": position_ids, "mask": mask}


def accept_path(tokens, parents, predicted):
    """Greedy descent from above the roots: the first matching child, repeatedly."""
    path, current = [], -1
    while True:
        matches = np.flatnonzero((parents == current) & (tokens == predicted))
        if len(matches) == 0:
            return path
        current = int(matches[0])
        path.append(current)


def accept_any_match(tokens, parents, predicted):
    """The bug: the deepest node matching its own prediction, wherever its ancestors stand."""
    matching = np.flatnonzero(tokens == predicted)
    if len(matching) == 0:
        return []
    node = int(matching[np.argmax(depths(parents)[matching])])  # first of the deepest
    path = []
    while node >= 0:
        path.insert(0, node)
        node = int(parents[node])
    return path


def verify(tokens, parents, logits, bug=None, **_):
    n = len(tokens)
    if bug == "positional_logits":
        rows = np.arange(n)
    elif bug == "depth_logits":
        rows = depths(parents) - 1
    else:
        rows = parents + 1  # parent-indexed: a root reads row 0, a child of p row 1 + p
    predicted = np.argmax(logits[rows], axis=1)
    accept = accept_any_match if bug == "no_subtree_invalidation" else accept_path
    path = accept(tokens, parents, predicted)
    accepted = np.full(n, -1)
    accepted[:len(path)] = path
    last_row = path[-1] + 1 if path else 0
    bonus = -1 if bug == "no_bonus_token" else int(np.argmax(logits[last_row]))
    return {"accepted": accepted, "bonus": np.array([bonus])}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bug", choices=BUGS, help="plant one real verification bug")
    bug = parser.parse_args().bug
    kprop_worker.serve({
        "dflash.tree_inputs": lambda **kw: tree_inputs(bug=bug, **kw),
        "dflash.verify": lambda **kw: verify(bug=bug, **kw),
    })
