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
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check(spec, fn, seed=SEED, trials=trials, corpus=corpus, **kw)
    f = excinfo.value.finding
    assert f.kind in ("invariant", "error"), str(excinfo.value)
    assert f.case_yaml.strip() and "shrunk case" in str(excinfo.value)
    assert f.size <= f.original_size
    assert f.path and os.path.exists(f.path) and f.path.startswith(corpus)
    return f


# ------------------------------------------------------------ attention.bwd
def test_attention_bwd_correct_passes(example, corpus):
    mod = example("attention_bwd")
    result = kprop.check("attention_bwd", mod.attention_bwd, seed=SEED, trials=40, corpus=corpus)
    assert result.passed and result.checked > 0 and result.declined == 0


@pytest.mark.parametrize("bug", ["dsoftmax_wrong_axis", "masked_row_nan", "dk_missing_scale", "d_without_do"])
def test_attention_bwd_bugs_are_caught(example, corpus, bug):
    mod = example("attention_bwd")
    mod.BUG = bug
    _caught_and_shrunk("attention_bwd", mod.attention_bwd, corpus, 300)


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


# --------------------------------------------------------------------- beam
def test_beam_correct_passes(example, corpus):
    mod = example("beam_search")
    result = kprop.check("beam", mod.beam_step, seed=SEED, trials=40, corpus=corpus)
    assert result.passed and result.checked > 0


@pytest.mark.parametrize("bug", ["drop_finished", "penalty_compounding", "stop_at_first_eos"])
def test_beam_bugs_are_caught(example, corpus, bug):
    mod = example("beam_search")
    mod.BUG = bug
    _caught_and_shrunk("beam", mod.beam_step, corpus, 400)


# ------------------------------------------------------------------ kvcache
def test_kvcache_correct_passes(example, corpus):
    mod = example("kvcache_decode")
    result = kprop.check("kvcache", mod.serve, seed=SEED, trials=20, corpus=corpus)
    assert result.passed and result.checked > 0


@pytest.mark.parametrize("bug", ["paged_last_block_offset", "decode_off_by_one", "stale_block_reuse"])
def test_kvcache_bugs_are_caught(example, corpus, bug):
    mod = example("kvcache_decode")
    mod.BUG = bug
    _caught_and_shrunk("kvcache", mod.serve, corpus, 300)


# ------------------------------------------------------------------ ternary
def _ternary(mod):
    return {"ternary.quantize_weights": mod.quantize_weights, "ternary.linear": mod.linear}


def test_ternary_correct_passes(example, corpus):
    result = kprop.check("ternary", _ternary(example("ternary_matmul")), seed=SEED, trials=60, corpus=corpus)
    assert result.passed and result.checked > 0


@pytest.mark.parametrize("bug", ["scale_absmax", "round_toward_zero", "ste_zero_grad"])
def test_ternary_bugs_are_caught(example, corpus, bug):
    mod = example("ternary_matmul")
    mod.BUG = bug
    _caught_and_shrunk("ternary", _ternary(mod), corpus, 400)


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
