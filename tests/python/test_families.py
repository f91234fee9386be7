"""kprop.check in process for the families test_check.py does not cover:
each family's NumPy example (examples/python, examples/ops) passes, and
planted bugs (the examples' --bug switches, set as module globals) are
caught and shrunk."""
import functools
import os

import pytest

import kprop
from conftest import REPO

SEED = 20261122


def _caught_and_shrunk(spec, fn, corpus, trials, **kw):
    # fail_fast: the first counterexample is the verdict (test_check.py runs
    # planted bugs to the end, every finding reported).
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check(spec, fn, seed=SEED, trials=trials, corpus=corpus, fail_fast=True, **kw)
    f = excinfo.value.finding
    assert f.kind in ("invariant", "error"), str(excinfo.value)
    result = excinfo.value.result
    if result is not None and f.kind == "invariant":
        assert [i.name for i in result.invariants if i.status == "failed"] == [f.invariant]
        assert all(i.status in ("failed", "not_run", "passed", "not_applicable") for i in result.invariants)
    assert f.case_yaml.strip() and "shrunk case" in str(excinfo.value)
    assert f.size <= f.original_size
    assert f.path and os.path.exists(f.path) and f.path.startswith(corpus)
    return f


# ------------------------------------- attention.bwd, beam, kvcache, ternary
def _ternary(mod):
    return {"ternary.quantize_weights": mod.quantize_weights, "ternary.linear": mod.linear}


# spec: (example module, what it serves (a function or {op: function}), trials
# of the correct run, trials to catch a bug, the bugs planted, whether the
# correct run may decline cases)
EXAMPLES = {
    "attention_bwd": ("attention_bwd", lambda m: m.attention_bwd, 40, 300,
                      ["dsoftmax_wrong_axis", "masked_row_nan", "dk_missing_scale", "d_without_do"], False),
    "beam": ("beam_search", lambda m: m.beam_step, 40, 400,
             ["drop_finished", "penalty_compounding", "stop_at_first_eos"], True),
    "kvcache": ("kvcache_decode", lambda m: m.serve, 20, 300,
                ["paged_last_block_offset", "decode_off_by_one", "stale_block_reuse"], True),
    "ternary": ("ternary_matmul", _ternary, 60, 400, ["scale_absmax", "round_toward_zero", "ste_zero_grad"], True),
}


@pytest.mark.parametrize("spec", sorted(EXAMPLES))
def test_correct_example_passes(example, corpus, spec):
    module, serves, trials, _, _, may_decline = EXAMPLES[spec]
    result = kprop.check(spec, serves(example(module)), seed=SEED, trials=trials, corpus=corpus)
    assert result.passed and result.checked > 0 and (may_decline or result.declined == 0)


@pytest.mark.parametrize("spec,bug", [(spec, bug) for spec in sorted(EXAMPLES) for bug in EXAMPLES[spec][4]])
def test_planted_bug_is_caught_and_shrunk(example, corpus, spec, bug):
    module, serves, _, trials, _, _ = EXAMPLES[spec]
    mod = example(module)
    mod.BUG = bug
    _caught_and_shrunk(spec, serves(mod), corpus, trials)


# ------------------------------------------------------------------- dflash
def _dflash(mod, bug=None):
    return {"dflash.tree_inputs": functools.partial(mod.tree_inputs, bug=bug),
            "dflash.verify": functools.partial(mod.verify, bug=bug)}


def test_dflash_correct_passes(example, corpus):
    result = kprop.check("dflash", _dflash(example("dflash_verify")), seed=SEED, trials=30, corpus=corpus)
    assert result.passed and result.checked > 0


@pytest.mark.parametrize("bug", ["positional_logits", "no_subtree_invalidation", "no_bonus_token"])
def test_dflash_bugs_are_caught_and_shrunk(example, corpus, bug):
    f = _caught_and_shrunk("dflash", _dflash(example("dflash_verify"), bug), corpus, 300)
    assert "cycles" in f.case_yaml


# ---------------------------------------------------- a declared op (family: op)
RMSNORM = os.path.join(REPO, "specs", "ops", "rmsnorm.yaml")


def test_declared_op_correct_passes(op_example, corpus):
    mod = op_example("rmsnorm")
    result = kprop.check(RMSNORM, mod.rmsnorm, seed=SEED, trials=60, corpus=corpus)
    assert result.passed and result.checked > 0


@pytest.mark.parametrize("bug", ["eps_outside_sqrt", "weight_wrong_axis"])
def test_declared_op_bugs_are_caught_and_shrunk(op_example, corpus, bug):
    mod = op_example("rmsnorm")
    mod.BUG = bug
    f = _caught_and_shrunk(RMSNORM, mod.rmsnorm, corpus, 300)
    assert f.invariant == "matches_reference"


# An integer output through kprop.check: the quantizer's int8 codes come back
# as a NumPy int8 array, judged exactly; ties rounded away from zero (the
# listed value 254 makes the scale 2, odd values exact ties) are caught.
QUANTIZE_INT8 = os.path.join(REPO, "specs", "ops", "quantize_int8.yaml")


def test_declared_op_integer_output(op_example, corpus):
    mod = op_example("quantize_int8")
    result = kprop.check(QUANTIZE_INT8, mod.quantize_int8, seed=SEED, trials=60, corpus=corpus)
    assert result.passed and result.checked > 0
    mod.BUG = "ties_away"
    f = _caught_and_shrunk(QUANTIZE_INT8, mod.quantize_int8, corpus, 300)
    assert f.invariant == "matches_reference"
    assert "the i8 output must be exact, off only where" in f.message


# ---------------------------------------------------------------- focus
def test_an_invariant_alone_is_drawn_only_the_cases_it_observes(example, corpus):
    """dq_dk_rounded_to_nearest observes f16/bf16 cases only: checked alone,
    every case comes from there, and the result says so."""
    fn = example("attention_bwd").attention_bwd
    result = kprop.check("attention_bwd", fn, seed=SEED, trials=20, corpus=corpus,
                         invariants=["dq_dk_rounded_to_nearest"])
    assert result.passed and result.invariants[0].passed == 20
    assert result.focused == {"{dtypes: [f16, bf16]}": result.trials}
    assert "focused: of the cases drawn, %d came from {dtypes: [f16, bf16]}" % result.trials in result.summary()
    assert not any(r.startswith(("an f32 case", "an f64 case")) for r in result.invariants[0].discard_reasons)


# A declared op whose output extent no input carries: the first K columns,
# K a dim of its own. The function names K as a parameter and gets it (in
# process and in the worker of isolate=True); one that does not name it
# gets no dims, so a function written before dims were sent runs as before.
FIRST_K = {"spec": "first_k", "family": "op", "run": {"trials": 40, "seed": 3},
           "op": {"dims": {"T": [1, 4], "V": [1, 9], "K": [1, 9]}, "relations": ["K <= V"],
                  "inputs": {"x": {"shape": ["T", "V"], "dtype": "f32"}},
                  "outputs": {"y": {"shape": ["T", "K"]}},
                  "reference": {"y": "x[:, :K]"}},
           "invariants": ["matches_reference"]}


SEEN = []  # what the functions below were called with, in process


def first_k(x, K):
    SEEN.append(K)
    return {"y": x[:, :K].copy()}


def first_k_without_dims(x, **extra):  # **kwargs alone: no dims
    SEEN.append(extra)
    return {"y": x[:, :1].copy()}


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_a_declared_op_function_gets_the_dims_it_names(isolate, corpus):
    SEEN.clear()
    result = kprop.check(FIRST_K, first_k, corpus=corpus, isolate=isolate)
    assert result.passed and result.checked > 0
    if not isolate:
        assert SEEN and all(isinstance(k, int) and k >= 1 for k in SEEN)
    SEEN.clear()
    with pytest.raises(kprop.Counterexample):  # wrong wherever K > 1
        kprop.check(FIRST_K, first_k_without_dims, corpus=corpus, isolate=isolate, fail_fast=True)
    if not isolate:
        assert SEEN and all(e == {} for e in SEEN)
