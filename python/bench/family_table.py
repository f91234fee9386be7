"""Per family: the NumPy example passes in process, and each planted bug is
caught and shrunk.

    PYTHONPATH=build/python .venv/bin/python python/bench/family_table.py [--trials 500]

Prints a Markdown row per (spec, target): cases drawn/checked and cases/s
for the correct example, the failing invariant and the shrunk case for each bug.
"""
import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python"))
from conftest import load_example  # noqa: E402

import kprop  # noqa: E402

SEED = 20261122


def _dflash(m, bug=None):
    return {"dflash.tree_inputs": functools.partial(m.tree_inputs, bug=bug),
            "dflash.verify": functools.partial(m.verify, bug=bug)}


def _ternary(m):
    return {"ternary.quantize_weights": m.quantize_weights, "ternary.linear": m.linear}


def _plant(m, bug):
    if bug == "top_left_causal":
        m.TOP_LEFT_CAUSAL = True
    else:
        m.BUG = bug


# spec, example, target from a module (and a bug for dflash, whose bugs are arguments), planted bugs
ROWS = [
    ("attention_fwd", "attention_fwd", lambda m, b: m.attention_fwd, ["top_left_causal"]),
    ("attention_bwd", "attention_bwd", lambda m, b: m.attention_bwd,
     ["dsoftmax_wrong_axis", "masked_row_nan", "dk_missing_scale", "d_without_do"]),
    ("layernorm", "layernorm", lambda m, b: m.layernorm,
     ["naive_variance", "eps_outside_sqrt", "missing_mean_term", "dgamma_no_xhat"]),
    ("softmax_topk", "softmax_topk", lambda m, b: m.softmax_topk,
     ["k_capped_32", "no_max_subtraction", "tie_high_index", "unsorted_output"]),
    ("dflash", "dflash_verify", _dflash, ["positional_logits", "no_subtree_invalidation", "no_bonus_token"]),
    ("beam", "beam_search", lambda m, b: m.beam_step, ["drop_finished", "penalty_compounding", "stop_at_first_eos"]),
    ("kvcache", "kvcache_decode", lambda m, b: m.serve,
     ["paged_last_block_offset", "decode_off_by_one", "stale_block_reuse"]),
    ("ternary", "ternary_matmul", lambda m, b: _ternary(m), ["scale_absmax", "round_toward_zero", "ste_zero_grad"]),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=500)
    args = parser.parse_args()
    print("| spec | target | result |\n|---|---|---|")
    for spec, example, target, bugs in ROWS:
        r = kprop.check(spec, target(load_example(example), None), seed=SEED, trials=args.trials, corpus=None)
        print("| %s | correct | passed: %d drawn, %d checked, %.0f cases/s |"
              % (spec, r.trials, r.checked, r.cases_per_second))
        for bug in bugs:
            m = load_example(example)
            if spec != "dflash":
                _plant(m, bug)
            try:
                kprop.check(spec, target(m, bug), seed=SEED, trials=args.trials, corpus=None)
                print("| %s | %s | NOT CAUGHT |" % (spec, bug))
            except kprop.Counterexample as e:
                f = e.finding
                print("| %s | %s | %s, shrunk %d -> %d: %s |"
                      % (spec, bug, f.invariant or f.kind, f.original_size, f.size, f.summary))


if __name__ == "__main__":
    main()
