"""Every output of every family is checked: each shipped spec catches a
correct kernel (the family's NumPy example) with exactly one output
corrupted, whichever output it is. An output no invariant compares (and
no contract check validates) fails here: the first audit found layernorm's
saved mean and rstd unchecked (now saved_statistics)."""
import functools

import numpy as np
import pytest

import kprop
from conftest import load_example

SEED = 20261122


def _dflash(m):
    return {"dflash.tree_inputs": functools.partial(m.tree_inputs, bug=None),
            "dflash.verify": functools.partial(m.verify, bug=None)}


# spec -> (example module, its ops, {op: every output of the op's contract})
FAMILIES = {
    "attention_fwd": ("attention_fwd", lambda m: {"attention.fwd": m.attention_fwd},
                  {"attention.fwd": ["o", "lse"]}),
    "attention_bwd": ("attention_bwd", lambda m: {"attention.bwd": m.attention_bwd},
                  {"attention.bwd": ["d", "dq", "dk", "dv"]}),
    "layernorm": ("layernorm", lambda m: {"layernorm": m.layernorm},
                  {"layernorm": ["y", "xhat", "mean", "rstd", "dx", "dgamma", "dbeta"]}),
    "softmax_topk": ("softmax_topk", lambda m: {"softmax_topk": m.softmax_topk},
                     {"softmax_topk": ["probs", "indices"]}),
    "dflash": ("dflash_verify", _dflash,
               {"dflash.tree_inputs": ["mask", "position_ids"], "dflash.verify": ["accepted", "bonus"]}),
    "beam": ("beam_search", lambda m: {"beam.step": m.beam_step},
             {"beam.step": ["parent", "token", "next_logprob", "next_score", "next_done"]}),
    "kvcache": ("kvcache_decode", lambda m: {"kvcache.serve": m.serve},
                {"kvcache.serve": ["out", "cache_dtype"]}),
    "ternary": ("ternary_matmul",
                lambda m: {"ternary.quantize_weights": m.quantize_weights, "ternary.linear": m.linear},
                {"ternary.quantize_weights": ["w_packed", "w_scale"],
                 "ternary.linear": ["x_scale", "x_q", "acc", "y", "dx", "dw"]}),
}
CASES = [(spec, op, out) for spec, (_, _, outputs) in FAMILIES.items() for op, outs in outputs.items()
         for out in outs]


def _corrupt(a):
    """One element changed, the middle one: a float scaled and shifted (a
    non-finite one made 0), an integer's lowest bit flipped, a bool negated."""
    a = np.array(a, copy=True)
    flat = a.reshape(-1)
    if flat.size:
        i = flat.size // 2
        if a.dtype.kind == "f":
            flat[i] = flat[i] * 1.5 + 1.0 if np.isfinite(flat[i]) else 0.0
        elif a.dtype.kind in "iu":
            flat[i] ^= 1
        elif a.dtype.kind == "b":
            flat[i] = not flat[i]
    return a


def test_the_list_is_every_output(corpus):
    """The table above names exactly the outputs the examples return for each op."""
    for spec, (example, ops, outputs) in FAMILIES.items():
        seen = {}

        def spy(op, f):
            def g(**kw):
                result = f(**kw)
                seen.setdefault(op, sorted(result))
                return result
            return g

        kprop.check(spec, {op: spy(op, f) for op, f in ops(load_example(example)).items()}, seed=SEED,
                    trials=5, corpus=corpus)
        assert seen == {op: sorted(outs) for op, outs in outputs.items()}, spec


@pytest.mark.parametrize("spec,op,output", CASES, ids=["%s:%s.%s" % c for c in CASES])
def test_a_corrupted_output_is_caught(spec, op, output, corpus):
    example, ops, _ = FAMILIES[spec]
    table = ops(load_example(example))
    right = table[op]

    def corrupted(**kw):
        result = dict(right(**kw))
        result[output] = _corrupt(result[output])
        return result

    table[op] = corrupted
    # Caught is the verdict: the first counterexample ends the run (fail_fast).
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check(spec, table, seed=SEED, trials=300, corpus=corpus, fail_fast=True)
    f = excinfo.value.finding
    # An invariant, or the contract's own validation of the output (an index
    # outside the tree or pool, an unknown dtype code: a target error).
    assert f.kind in ("invariant", "error"), str(excinfo.value)
