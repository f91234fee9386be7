"""kprop.check in process: NumPy targets of examples/python, correct and with
planted bugs (each must be caught and shrunk), declines, errors, replay."""
import dataclasses
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import kprop
from conftest import REPO

SEED = 20261122


def _assert_shrunk_counterexample(excinfo, corpus, invariant=None):
    f = excinfo.value.finding
    message = str(excinfo.value)
    if invariant is not None:
        assert f.invariant == invariant
    assert f.case_yaml.strip(), message
    assert "shrunk case" in message
    assert f.size <= f.original_size
    assert f.path and os.path.exists(f.path) and f.path.startswith(corpus), f.path
    assert f.replay and f.path in f.replay
    return f


def test_a_findings_replay_checks_its_own_invariant(example, corpus):
    # Winners in index order fail both sorted and matches_reference; each
    # finding's printed replay names its invariant and raises that one (it
    # replayed every invariant, and the sorted finding's replay raised
    # matches_reference's failure).
    mod = example("softmax_topk")
    mod.BUG = "unsorted_output"
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", mod.softmax_topk, seed=1, trials=100, corpus=corpus,
                    invariants=["matches_reference", "sorted"])
    findings = excinfo.value.result.findings
    assert sorted(f.invariant for f in findings) == ["matches_reference", "sorted"]
    for f in findings:
        assert "invariants=[%r]" % f.invariant in f.replay, f.replay
        with pytest.raises(kprop.Counterexample) as again:
            eval(f.replay, {"kprop": kprop, "softmax_topk": mod.softmax_topk})
        assert again.value.finding.invariant == f.invariant


STATEFUL_KERNEL = """
import numpy as np
from softmax_topk import softmax_topk as good  # examples/python
CALLS = [0]

def after_warm_up(logits, k, **attrs):   # wrong once a cache or autotuner has warmed up
    CALLS[0] += 1
    r = good(logits, k, **attrs)
    return dict(r, probs=np.asarray(r["probs"]) * 2) if CALLS[0] > 50 else r

def always(logits, k, **attrs):
    r = good(logits, k, **attrs)
    return dict(r, probs=np.asarray(r["probs"]) * 2)
"""


def test_a_finding_that_a_fresh_process_does_not_reproduce_is_said(tmp_path, monkeypatch, corpus):
    # As prop_runner's replay check: each finding's printed replay is run in
    # a fresh interpreter. A kernel that fails only after 50 calls (state it
    # keeps) passes there, and the finding says so. It was stored, its
    # printed replay passing, with no word of it. The file stays in the
    # corpus (kprop.check replays it with this very function).
    (tmp_path / "kprop_stateful_kernel.py").write_text(STATEFUL_KERNEL)
    monkeypatch.syspath_prepend(os.path.join(REPO, "examples", "python"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import kprop_stateful_kernel as mod
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", mod.after_warm_up, seed=1, trials=100, corpus=corpus,
                    invariants=["matches_reference"])
    f = excinfo.value.finding
    assert "WARNING: re-run in a fresh process, the printed replay did not fail (the case passed)" in \
        str(excinfo.value)
    assert f.in_corpus and os.path.isfile(f.path)
    # A kernel wrong on every call: reproduced, stored in the corpus, nothing said.
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", mod.always, seed=1, trials=100, corpus=corpus, invariants=["matches_reference"])
    f = excinfo.value.finding
    assert "WARNING" not in str(excinfo.value) and f.in_corpus, str(excinfo.value)
    assert f.path.startswith(os.path.join(corpus, "softmax_topk"))


RECHECKED_SCRIPT = """
import sys
sys.path.insert(0, %r)
import numpy as np
import kprop
from softmax_topk import softmax_topk as good

class Kernel:
    def __init__(self, bug):
        self.bug = bug
    def run(self, logits, k, **attrs):
        r = good(logits, k, **attrs)
        return dict(r, probs=np.asarray(r["probs"]) * 2) if self.bug else r

def doubled(logits, k, **attrs):
    return Kernel(True).run(logits, k, **attrs)

fn = Kernel(True).run if sys.argv[1] == "method" else doubled
# At the top level, as README's first example: no __main__ guard.
kprop.check("softmax_topk", fn, seed=1, trials=50, corpus=%r + sys.argv[1], invariants=["matches_reference"])
"""


def test_the_replay_check_re_runs_only_what_its_printed_line_names(tmp_path, corpus):
    # Not re-run: a method of a configured instance (printed as Kernel().run,
    # which would run without the bug: a false WARNING). A script that calls
    # kprop.check at its top level is not imported by the check's child (the
    # child ran the script's whole check again, and its Counterexample said
    # "did not run through"). Both findings stay clean, in the corpus.
    script = tmp_path / "script.py"
    script.write_text(RECHECKED_SCRIPT % (os.path.join(REPO, "examples", "python"), corpus))
    # This very kprop first (a source tree's python/ on sys.path has no extension).
    here = os.path.dirname(os.path.dirname(os.path.abspath(kprop.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here] + [p for p in sys.path if p]))
    for how in ("method", "function"):
        out = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, env=env,
                             timeout=300)
        assert out.returncode == 1 and "invariant matches_reference failed" in out.stderr, out.stderr
        assert "not known to reproduce" not in out.stderr and "WARNING" not in out.stderr, out.stderr


# ------------------------------------------------------------------ attention
def test_attention_fwd_correct_passes(example, corpus):
    mod = example("attention_fwd")
    result = kprop.check("attention_fwd", mod.attention_fwd, seed=SEED, trials=60, corpus=corpus)
    assert result.passed and result.status == "passed"
    assert result.trials >= 60 and result.checked > 0 and result.declined == 0
    assert any(i.status == "passed" and i.passed >= 60 for i in result.invariants)
    assert not os.path.exists(corpus) or not os.listdir(corpus)


def test_attention_fwd_top_left_causal_is_caught_and_shrunk(example, corpus):
    mod = example("attention_fwd")
    mod.TOP_LEFT_CAUSAL = True  # the planted bug of examples/python/attention_fwd.py --bug
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("attention_fwd", mod.attention_fwd, seed=SEED, trials=200, corpus=corpus)
    f = _assert_shrunk_counterexample(excinfo, corpus)
    assert f.kind == "invariant"
    assert "causal" in f.case_yaml
    result = excinfo.value.result
    assert result is not None and result.status == "failed"


# ------------------------------------------------------ layernorm, softmax_topk
# spec (= the example module and its function): (trials of the correct run,
# trials to catch a bug, the bugs planted)
EXAMPLES = {
    "layernorm": (60, 200, ["naive_variance", "eps_outside_sqrt", "missing_mean_term", "dgamma_no_xhat"]),
    "softmax_topk": (80, 400, ["k_capped_32", "no_max_subtraction", "tie_high_index", "unsorted_output"]),
}


@pytest.mark.parametrize("spec", sorted(EXAMPLES))
def test_correct_example_passes(example, corpus, spec):
    mod = example(spec)
    result = kprop.check(spec, getattr(mod, spec), seed=SEED, trials=EXAMPLES[spec][0], corpus=corpus)
    assert result.passed and result.checked > 0


def test_search_runs_after_the_random_cases_and_is_counted_apart(example, corpus):
    # search=N: N search cases on top of the drawn ones (prop_runner --search-trials N).
    mod = example("layernorm")
    result = kprop.check("layernorm", mod.layernorm, seed=SEED, trials=20, corpus=corpus, search=30)
    assert result.passed
    assert result.search_cases == 30 and result.report["search"]["cases"] == 30
    assert "+ 30 by the search" in result.summary()
    hunted = {i["name"]: i for i in result.report["search"]["invariants"]}
    assert "matches_reference" in hunted and hunted["matches_reference"]["passed"] > 0
    # Without search= the spec's setting (off): no search.
    plain = kprop.check("layernorm", mod.layernorm, seed=SEED, trials=20, corpus=corpus)
    assert plain.search_cases == 0 and plain.report["search"] is None
    # search_time= bounds it (and turns it on): a budget of cases it cannot reach ends on the time.
    timed = kprop.check("layernorm", mod.layernorm, seed=SEED, trials=20, corpus=corpus, search=10 ** 9,
                        search_time=0.3)
    assert timed.report["search"]["time_budget_hit"] and timed.search_cases < 10 ** 9


@pytest.mark.parametrize("spec,bug", [(spec, bug) for spec in sorted(EXAMPLES) for bug in EXAMPLES[spec][2]])
def test_planted_bug_is_caught_and_shrunk(example, corpus, spec, bug):
    mod = example(spec)
    mod.BUG = bug
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check(spec, getattr(mod, spec), seed=SEED, trials=EXAMPLES[spec][1], corpus=corpus)
    _assert_shrunk_counterexample(excinfo, corpus)


def test_fail_fast_ends_the_run_at_the_first_counterexample(example, corpus):
    mod = example("softmax_topk")
    mod.BUG = "no_max_subtraction"
    runs = {}
    for fail_fast in (False, True):
        with pytest.raises(kprop.Counterexample) as excinfo:
            kprop.check("softmax_topk", mod.softmax_topk, seed=SEED, trials=EXAMPLES["softmax_topk"][1],
                        corpus=None, fail_fast=fail_fast)
        runs[fail_fast] = excinfo.value
    full, fast = runs[False].result, runs[True].result
    assert not full.stopped_at_failure and fast.stopped_at_failure
    broken = [i for i in fast.invariants if i.status == "failed"]
    assert len(broken) == 1 and runs[True].finding.invariant == broken[0].name
    # The finding is the full run's for that invariant: the same case, shrunk the same way.
    same = [f for f in full.findings if f.invariant == broken[0].name]
    assert same and same[0].case_yaml == runs[True].finding.case_yaml
    assert fast.trials == fast.report["invariants"][fast.invariants.index(broken[0])]["trials_to_fail"], \
        "no case is drawn after the first counterexample"
    assert "the first counterexample ended the run" in fast.detail and "fail_fast" in fast.summary()
    # What the run did not finish is not run, never passed.
    rest = [i for i in fast.invariants if i.status != "failed"]
    assert rest and all(i.status == "not_run" for i in rest), fast.summary()
    with pytest.raises(TypeError, match="fail_fast must be True or False"):
        kprop.check("softmax_topk", mod.softmax_topk, fail_fast="yes")
    # Under the pytest plugin each item checks one invariant: refused, not ignored.
    with pytest.raises(TypeError, match="fail_fast does nothing here"):
        kprop.spec("softmax_topk", fail_fast=True)
    # A plugin is prop_runner's target: said, not an AttributeError on a str.
    with pytest.raises(TypeError, match="decorates a Python function .*test a plugin: or exec: target with prop_runner"):
        kprop.spec("softmax_topk")("plugin:./libmine.so")


# ---------------------------------------------------------- declines, errors
def test_declined_cases_are_counted_not_passed(example, corpus):
    mod = example("softmax_topk")

    def f32_only(logits, k, **attrs):
        if logits.dtype != np.float32:
            raise kprop.Unsupported("only f32")
        return mod.softmax_topk(logits, k, **attrs)

    # Most cases are declined (3 dtypes of 4): the `declined` health check fails the run, which is not a pass.
    with pytest.raises(kprop.HealthCheckFailure, match="declined") as excinfo:
        kprop.check("softmax_topk", f32_only, seed=SEED, trials=40, corpus=corpus)
    result = excinfo.value.result
    assert result.status == "gave_up" and [h for h, _ in result.health] == ["declined"]
    # Its advice in check()'s words (it named prop_runner's --domain).
    assert "(e.g. domain={'dtypes': [...]}; kprop.spec_info(spec) shows the keys)" in str(excinfo.value)
    assert "prop_runner" not in str(excinfo.value)
    assert result.declined > 0
    assert sum(result.decline_reasons.values()) == result.declined
    assert any("only f32" in reason for reason in result.decline_reasons)
    # Every drawn case was either checked or declined; the declined ones passed nothing.
    assert result.checked + result.declined <= result.trials
    for inv in result.invariants:
        assert inv.declined > 0
    # Its suppression in check()'s words too; suppress_health_check= turns it
    # off for the run (prop_runner's --suppress-health-check): the cases it
    # checked pass, the declined ones are still counted as declined.
    assert "(suppress_health_check=['declined'] for one run)" in str(excinfo.value)
    passed = kprop.check("softmax_topk", f32_only, seed=SEED, trials=40, corpus=corpus,
                         suppress_health_check="declined")
    assert passed.status == "passed" and passed.declined == result.declined and passed.checked > 0
    with pytest.raises(ValueError, match=r"suppress_health_check: 'decline' is not a health check \(did you mean "
                                         r"'declined'\?\); valid: declined, discarded, too_slow"):
        kprop.check("softmax_topk", f32_only, seed=SEED, trials=40, corpus=corpus, suppress_health_check=["decline"])


def test_a_run_that_drew_no_case_says_so(example, corpus):
    # size_reached -1 is a run that drew no case (a time budget below one
    # case): the summary says so (it read "size reached -1 of 100").
    mod = example("softmax_topk")
    result = kprop.check("softmax_topk", mod.softmax_topk, seed=SEED, trials=5, corpus=corpus)
    assert "size reached %d of 100" % result.size_reached in result.summary()
    none = dataclasses.replace(result, size_reached=-1)
    assert "no size reached (max_size 100)" in none.summary(), none.summary()


def test_declining_everything_is_skipped_not_passed(corpus):
    def nothing(**_):
        raise kprop.Unsupported("no kernel here")

    with pytest.raises(kprop.Skipped) as excinfo:
        kprop.check("softmax_topk", nothing, seed=SEED, trials=10, corpus=corpus)
    assert excinfo.value.result.status == "skipped"
    assert excinfo.value.result.declined == excinfo.value.result.trials


def test_an_exception_in_fn_is_a_shrunk_target_error(example, corpus):
    mod = example("softmax_topk")

    def breaks_on_wide_rows(logits, k, **attrs):
        if logits.shape[-1] > 3:
            raise ValueError("rows wider than 3")
        return mod.softmax_topk(logits, k, **attrs)

    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", breaks_on_wide_rows, seed=SEED, trials=100, corpus=corpus)
    f = excinfo.value.finding
    assert f.kind == "error"
    assert "ValueError: rows wider than 3" in f.message
    assert "breaks_on_wide_rows" in f.traceback  # the target's own traceback
    assert f.path and os.path.exists(f.path)


def test_outputs_are_checked(example, corpus):
    def wrong_shape(logits, k, **_):
        return {"probs": np.zeros((1,)), "indices": np.zeros((1,))}

    with pytest.raises(kprop.Counterexample, match="has shape"):
        kprop.check("softmax_topk", wrong_shape, seed=SEED, trials=5, corpus=corpus)

    # Integer outputs are taken as they are: no truncated floats, no wrapped values.
    good = example("softmax_topk")

    def float_indices(logits, k, **a):
        out = good.softmax_topk(logits, k, **a)
        return {"probs": out["probs"], "indices": out["indices"] + 0.4}

    def wrapped_indices(logits, k, **a):
        out = good.softmax_topk(logits, k, **a)
        return {"probs": out["probs"], "indices": out["indices"].astype(np.int64) + 2 ** 32}

    with pytest.raises(kprop.Counterexample, match="output 'indices' must be integers"):
        kprop.check("softmax_topk", float_indices, seed=SEED, trials=5, corpus=corpus)
    with pytest.raises(kprop.Counterexample, match="output 'indices' has values outside int32's range"):
        kprop.check("softmax_topk", wrapped_indices, seed=SEED, trials=5, corpus=corpus)


def test_an_output_fn_forgets_reads_as_poison(example, corpus):
    # Only `o` is returned: the reply is refused (missing output), never zero-filled.
    mod = example("attention_fwd")

    def only_o(**kw):
        return {"o": mod.attention_fwd(**kw)["o"]}

    with pytest.raises(kprop.Counterexample, match="no output 'lse'"):
        kprop.check("attention_fwd", only_o, seed=SEED, trials=5, corpus=corpus)


def test_keeping_an_input_view_is_refused(example, corpus):
    mod = example("softmax_topk")
    kept = []

    def keeps(logits, k, **attrs):
        kept.append(logits[:1])  # a view of kprop's buffer, used after the call
        return mod.softmax_topk(logits, k, **attrs)

    with pytest.raises(kprop.Counterexample, match="kept input 'logits'"):
        kprop.check("softmax_topk", keeps, seed=SEED, trials=5, corpus=corpus)


def test_inputs_are_read_only(corpus):
    def writes(logits, k, **_):
        logits[...] = 0
        return None

    with pytest.raises(kprop.Counterexample, match="read-only"):
        kprop.check("softmax_topk", writes, seed=SEED, trials=5, corpus=corpus)


# ------------------------------------------------------- stored cases, replay
def test_stored_counterexample_replays_first_and_replay_api(example, corpus):
    buggy = example("softmax_topk")
    buggy.BUG = "unsorted_output"
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", buggy.softmax_topk, seed=SEED, trials=400, corpus=corpus)
    path = excinfo.value.finding.path
    stored = {f.path for f in excinfo.value.result.findings}  # one file per failing invariant (or shared)
    assert path in stored and len(os.listdir(os.path.dirname(path))) == len(stored)

    # The next run replays the stored cases before drawing any: a fresh seed cannot hide them.
    with pytest.raises(kprop.Counterexample) as again:
        kprop.check("softmax_topk", buggy.softmax_topk, seed=1, trials=1, corpus=corpus)
    assert again.value.finding.kind == "replay" and again.value.finding.path in stored
    # Its case_yaml is the stored case alone, as the fresh finding's, not the file with its header.
    replayed = again.value.finding
    fresh = [f for f in excinfo.value.result.findings if f.path == replayed.path][0]
    assert replayed.case_yaml == fresh.case_yaml and "invariant:" not in replayed.case_yaml
    # It is in the corpus the run was given, as the fresh finding was (in_corpus was False).
    assert fresh.in_corpus and replayed.in_corpus and replayed.corpus == corpus and not replayed.store_note
    assert "NOT in the corpus" not in str(again.value)

    good = example("softmax_topk")
    result = kprop.check("softmax_topk", good.softmax_topk, seed=SEED, trials=20, corpus=corpus)
    assert result.passed and result.replayed == len(stored)
    # summary() counts them (it said nothing of a replay unless some case was outside the domain).
    assert "  stored cases: %d replayed\n" % len(stored) in result.summary() + "\n"
    assert kprop.replay("softmax_topk", good.softmax_topk, path) == 1
    with pytest.raises(kprop.Counterexample):
        kprop.replay("softmax_topk", buggy.softmax_topk, path)


def test_a_stored_case_that_no_longer_guards_its_mutant_is_an_error(example, tmp_path):
    # A file whose found_against names no implementation (a renamed mutant)
    # guards nothing: said, as prop_runner --replay fails it, not counted.
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    with open(os.path.join(repo, "corpus", "layernorm", "059791fc370c9226.yaml")) as f:
        text = f.read()
    assert "found_against: naive_variance\n" in text
    folder = tmp_path / "layernorm"
    folder.mkdir()
    (folder / "renamed.yaml").write_text(text.replace("found_against: naive_variance\n",
                                                      "found_against: naive_variancee\n"))
    good = example("layernorm")
    with pytest.raises(ValueError, match="stale file: found_against 'naive_variancee' is no implementation"):
        kprop.replay("layernorm", good.layernorm, str(folder))
    with pytest.raises(ValueError, match="stored case .*renamed.yaml: stale file"):
        kprop.check("layernorm", good.layernorm, seed=SEED, trials=5, corpus=str(tmp_path))


# ------------------------------------------------------------------ spec input
def test_spec_by_path_and_unknown_names(example, corpus):
    mod = example("softmax_topk")
    path = os.path.join(kprop.SPECS_DIR, "softmax_topk.yaml")
    assert kprop.check(path, mod.softmax_topk, seed=SEED, trials=10, corpus=corpus).passed
    with pytest.raises(ValueError, match="no spec file"):
        kprop.check("no_such_spec", mod.softmax_topk)
    with pytest.raises(ValueError, match="no invariant"):
        kprop.check("softmax_topk", mod.softmax_topk, invariants=["nope"], corpus=corpus)
    assert "attention_fwd" in kprop.shipped_specs()
    # flash_fwd was renamed attention_fwd (spec files are named after their family)
    assert kprop.spec_info("flash_fwd")["name"] == "attention_fwd"


def test_only_selected_invariants_run(example, corpus):
    mod = example("softmax_topk")
    for one in (["sorted"], "sorted", (n for n in ["sorted"])):  # a list of names, one name, a generator
        result = kprop.check("softmax_topk", mod.softmax_topk, seed=SEED, trials=10, invariants=one,
                             corpus=corpus)
        assert [i.name for i in result.invariants] == ["sorted"]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"seed": -1}, ValueError, r"seed must be in \[0, 9200000000000000000\]"),
    ({"seed": 9200000000000000001}, ValueError, "prop_runner's --seed range"),
    ({"seed": "1"}, TypeError, "seed must be an int"),
    ({"seed": 1.0}, TypeError, "seed must be an int"),
    ({"trials": 0}, ValueError, r"trials must be in \[1, 10\*\*9\]"),
    ({"trials": 5.0}, TypeError, "trials must be an int"),
    ({"time": -1}, ValueError, "time must be finite and 0 or more"),
    ({"time": float("nan")}, ValueError, "time must be finite"),
    ({"case_timeout": 0.5}, ValueError, "case_timeout needs isolate=True"),
    ({"case_timeout": 0, "isolate": True}, ValueError, r"case_timeout must be finite and in \[0\.001, 1e7\]"),
    ({"case_timeout": 1e-10, "isolate": True}, ValueError, r"case_timeout must be finite and in \[0\.001, 1e7\]"),
    ({"case_timeout": 1e12, "isolate": True}, ValueError, r"case_timeout must be finite and in \[0\.001, 1e7\]"),
    ({"invariants": [1]}, TypeError, "invariants must be invariant names"),
    ({"invariants": [None]}, TypeError, "invariants must be invariant names"),
    ({"invariants": 5}, TypeError, "invariants must be invariant names"),
    ({"invariants": []}, ValueError, r"invariants=\[\] names no invariant to check"),
    ({"isolate": "yes"}, TypeError, "isolate must be True or False"),
    ({"replay_stored": "no"}, TypeError, "replay_stored must be True or False"),
    ({"reference": 123}, TypeError, "reference= must be a function"),
    ({"corpus": 123}, TypeError, "corpus must be a folder's path or None"),
    ({"device": "cuda"}, ValueError, "applies to tensors='torch'"),
    ({"reference": "plugin:./lib.so"}, TypeError, r"is prop_runner's: prop_runner --spec SPEC --reference plugin"),
    ({"search": "yes"}, TypeError, "search must be True, False, a number of search cases or None"),
    ({"search": 0}, ValueError, r"search=N must be in \[1, 10\*\*9\]"),
    ({"search_time": "1"}, TypeError, "search_time must be a number of seconds"),
    ({"search_time": -1}, ValueError, "search_time must be finite and 0 or more"),
    ({"search": False, "search_time": 1}, ValueError, "search=False contradicts search_time"),
])
def test_bad_run_settings_are_clear_errors(example, corpus, kwargs, error, match):
    mod = example("softmax_topk")
    kwargs = {"corpus": corpus, **kwargs}
    with pytest.raises(error, match=match):
        kprop.check("softmax_topk", mod.softmax_topk, **kwargs)


def test_a_spec_that_is_no_path_name_or_dict_is_a_type_error(example):
    with pytest.raises(TypeError, match="spec must be a spec file's path, a shipped spec's name or a dict"):
        kprop.check(123, example("softmax_topk").softmax_topk, corpus=None)


# A dict spec's error names the key, as _plain's type errors do: it was
# "<dict>:1:237:", a column of JSON text its author never saw.
@pytest.mark.parametrize("change, where", [
    (lambda s: s["invariants"][0].update(bogus=1), r"spec\['invariants'\]\[0\]\['bogus'\]: unknown key 'bogus'"),
    (lambda s: s.update(bogus=1), r"spec\['bogus'\]: unknown top-level key 'bogus'"),
    (lambda s: s["op"]["dims"].update(T=[5, 2]), r"spec\['op'\]\['dims'\]\['T'\]: dim T is an inverted range"),
    (lambda s: s["op"]["inputs"]["x"].update(dtype=["f32", "f33"]),
     r"spec\['op'\]\['inputs'\]\['x'\]\['dtype'\]\[1\]: input x.dtype: unknown dtype 'f33'"),
    (lambda s: s["invariants"][0].update(expect="all(target.z == x)"),
     r"spec\['invariants'\]\[0\]\['expect'\]: invariant 'a', expect: unknown name 'target.z'"),
])
def test_a_dict_specs_error_names_its_key(change, where):
    spec = {"spec": "copy", "family": "op",
            "op": {"dims": {"T": [1, 4]}, "inputs": {"x": {"shape": ["T"], "dtype": ["f32"]}},
                   "outputs": {"y": {"shape": ["T"]}}, "reference": {"y": "x"}},
            "invariants": [{"name": "a", "expect": "all(target.y == x)"}]}
    assert kprop.spec_info(spec)["name"] == "copy"
    change(spec)
    with pytest.raises(ValueError, match="^kprop: " + where):
        kprop.check(spec, lambda x: {"y": x}, corpus=None)


def test_one_extra_invariant_needs_no_list(example, corpus):
    @kprop.invariant
    def probs_sum_at_most_one(target_probs):
        # Each stored probability is within u = 2**-8 (bf16, the coarsest
        # dtype) of its value relative, so the top-k sum is at most 1 + u;
        # 2u leaves room for the f32 softmax's own rounding.
        return target_probs.sum(axis=-1) <= 1 + 2 ** -7

    result = kprop.check("softmax_topk", example("softmax_topk").softmax_topk, seed=SEED, trials=10,
                         corpus=corpus, extra_invariants=probs_sum_at_most_one)
    assert "probs_sum_at_most_one" in [i.name for i in result.invariants]


def test_keyboard_interrupt_in_fn_stops_the_run(example, corpus):
    mod = example("softmax_topk")
    calls = []

    def interrupted(logits, k, **attrs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return mod.softmax_topk(logits, k, **attrs)

    with pytest.raises(KeyboardInterrupt):
        kprop.check("softmax_topk", interrupted, seed=SEED, trials=200, corpus=corpus)
    assert len(calls) == 3  # no further call once interrupted
    # The interpreter's own SIGINT handling is back: a later run is unaffected.
    assert kprop.check("softmax_topk", mod.softmax_topk, seed=SEED, trials=5, corpus=corpus).passed


def test_keyboard_interrupt_while_shrinking_says_where_the_case_was_saved(example, corpus, capfd):
    # Ctrl-C while shrinking: the best case so far was saved, but a bare
    # KeyboardInterrupt('kprop: interrupted') never said where.
    mod = example("softmax_topk")
    wrong = []

    def bad(logits, k, **attrs):
        r = mod.softmax_topk(logits, k, **attrs)
        if logits.shape[1] >= 5:
            wrong.append(1)
            if len(wrong) > 5:  # Ctrl-C among the shrinking steps
                raise KeyboardInterrupt
            r = dict(r, probs=np.asarray(r["probs"]) * 1.1)
        return r

    with pytest.raises(KeyboardInterrupt) as excinfo:
        kprop.check("softmax_topk", bad, seed=1, trials=400, corpus=corpus, invariants=["matches_reference"])
    (f,) = excinfo.value.findings
    assert f.invariant == "matches_reference" and f.in_corpus and os.path.isfile(f.path)
    assert f.path.startswith(os.path.join(corpus, "softmax_topk"))
    message = str(excinfo.value)
    assert f.path in message and f.replay in message and f.replay.startswith("kprop.replay(")
    assert "saved: " + f.path in capfd.readouterr().err  # for code that catches the interrupt silently
    assert excinfo.value.result.status == "interrupted"


def test_a_stored_case_of_an_extra_invariant_is_left_to_the_runs_that_have_it(example, corpus, tmp_path):
    # docs/PYTHON.md: "not replayed, no error". A corpus root (a folder per
    # spec) raised ValueError "fix the file's invariant: line" in kprop.replay,
    # and prop_runner --replay exited 2 ("1 could not be read").
    mod = example("softmax_topk")

    @kprop.invariant
    def first_prob_small(target_probs):
        return np.all(target_probs[:, 0] < 0.99)

    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", mod.softmax_topk, seed=1, trials=30, corpus=corpus, invariants=["no_nan"],
                    extra_invariants=[first_prob_small])
    path = excinfo.value.finding.path
    assert kprop.check("softmax_topk", mod.softmax_topk, seed=1, trials=30, corpus=corpus).replayed == 0
    for folder in (corpus, os.path.join(corpus, "softmax_topk")):
        assert kprop.replay("softmax_topk", mod.softmax_topk, folder) == 0
        checked, why = kprop._check._replay("softmax_topk", mod.softmax_topk, folder)
        assert checked == 0 and why == ["%s: not replayed: found by invariant 'first_prob_small', which this run "
                                        "does not have (pass the @kprop.invariant function in extra_invariants=)"
                                        % path]
        with pytest.raises(kprop.Counterexample):  # the runs that have it replay it
            kprop.replay("softmax_topk", mod.softmax_topk, folder, extra_invariants=[first_prob_small])
    runner = kprop._check._prop_runner()
    if runner is None:
        pytest.skip("no prop_runner beside the package or on PATH")
    for folder in (corpus, path):
        r = subprocess.run([runner, "--spec", os.path.join(kprop.SPECS_DIR, "softmax_topk.yaml"), "--replay",
                            folder], capture_output=True, text=True, cwd=str(tmp_path), timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert ("skip  %s  (not replayed: found by kprop.check's invariant 'first_prob_small', which this run does "
                "not have" % path) in r.stdout, r.stdout
        assert "SKIPPED: 0 of 1 corpus files passed" in r.stdout, r.stdout


def test_a_hand_written_case_whose_invariant_nothing_has_is_an_error(example, corpus):
    # docs/PYTHON.md: only kprop.check's own files (found_by: python) of an
    # invariant this run lacks are left alone; a typo in a hand-written one
    # was skipped without a word (check replayed 0, replay returned 0), where
    # prop_runner --replay exits 2 saying which invariant.
    mod = example("softmax_topk")
    folder = os.path.join(corpus, "softmax_topk")
    os.makedirs(folder)
    source = os.path.join(REPO, "corpus", "softmax_topk")
    name = sorted(os.listdir(source))[0]
    with open(os.path.join(source, name)) as f:
        text = f.read()
    assert "invariant: shift_invariance\n" in text and "found_by: rapidcheck\n" in text
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text.replace("invariant: shift_invariance\n", "invariant: shift_invariace\n"))
    typo = r"its invariant 'shift_invariace' is neither in the spec nor registered by family 'softmax_topk' " \
           r"\(did you mean 'shift_invariance'\?\)"
    with pytest.raises(ValueError, match=typo):
        kprop.check("softmax_topk", mod.softmax_topk, seed=1, trials=5, corpus=corpus)
    for target in (folder, corpus, path):
        with pytest.raises(ValueError, match=typo):
            kprop.replay("softmax_topk", mod.softmax_topk, target)


def test_replay_of_a_corpus_root_leaves_other_specs_folders_to_their_specs(example, tmp_path):
    # A corpus root holds a folder per spec: its other specs' cases made
    # kprop.replay (and prop_runner --replay) of the root an error ("corpus
    # case is for family 'layernorm'"). They are skipped, saying whose they
    # are; a case misfiled into this spec's folder is still an error.
    mod = example("softmax_topk")
    root = tmp_path / "corpus"
    for spec in ("softmax_topk", "layernorm"):
        shutil.copytree(os.path.join(REPO, "corpus", spec), root / spec)
    ours, theirs = sorted(os.listdir(root / "softmax_topk")), sorted(os.listdir(root / "layernorm"))
    checked, why = kprop._check._replay("softmax_topk", mod.softmax_topk, str(root))
    assert checked > 0
    assert why == ["not replayed: spec layernorm's case, in its folder of the corpus (replay it with "
                   "kprop.replay(\"layernorm\", ...))"] * len(theirs)
    assert kprop.replay("softmax_topk", mod.softmax_topk, str(root)) == checked
    assert kprop.replay("softmax_topk", mod.softmax_topk, str(root / "softmax_topk")) == checked
    runner = kprop._check._prop_runner()
    if runner is not None:
        r = subprocess.run([runner, "--spec", os.path.join(kprop.SPECS_DIR, "softmax_topk.yaml"), "--replay",
                            str(root)], capture_output=True, text=True, cwd=str(tmp_path), timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "PASSED: %d of %d corpus files passed" % (len(ours), len(ours) + len(theirs)) in r.stdout, r.stdout
        assert ("skip  %s  (not replayed: spec layernorm's case" % (root / "layernorm" / theirs[0])) in r.stdout
    shutil.copy(root / "layernorm" / theirs[0], root / "softmax_topk" / "misfiled.yaml")
    with pytest.raises(ValueError, match="misfiled.yaml:3:9: corpus case is for family 'layernorm', the spec "
                                         "tests 'softmax_topk'"):
        kprop.replay("softmax_topk", mod.softmax_topk, str(root))


def test_the_installed_worker_module_serves_a_dict_with_the_standalone_workers_names(tmp_path):
    # docs/EXTERNAL.md: `from kprop import worker as kprop_worker` is the
    # standalone python/kprop_worker.py's API (it lacked Unsupported and the
    # half helpers, which the docs promised).
    from kprop import worker
    for name in ("serve", "Unsupported", "BFLOAT16", "as_float32", "bf16_to_float32", "float32_to_bf16"):
        assert hasattr(worker, name), name
    assert worker.Unsupported is kprop.Unsupported
    runner = kprop._check._prop_runner()
    if runner is None:
        pytest.skip("no prop_runner beside the package or on PATH")
    script = tmp_path / "my_worker.py"
    script.write_text("import sys\nsys.path.insert(0, %r)\nfrom kprop import worker as kprop_worker\n"
                      "import softmax_topk\n"
                      "def fn(logits, k, **attrs):\n"
                      "    if logits.dtype != kprop_worker.as_float32(logits).dtype and k > 3:\n"
                      "        raise kprop_worker.Unsupported('wide k in half precision')\n"
                      "    return softmax_topk.softmax_topk(logits, k, **attrs)\n"
                      "kprop_worker.serve({'softmax_topk': fn})\n" % os.path.join(REPO, "examples", "python"))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(kprop.__file__))))
    r = subprocess.run([runner, "--spec", os.path.join(kprop.SPECS_DIR, "softmax_topk.yaml"), "--target",
                        "exec:%s %s" % (sys.executable, script), "--trials", "30", "--seed", "1", "--no-corpus"],
                       capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=300)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr


def test_torch_tensors_without_torch_say_what_to_do(example, corpus):
    try:
        import torch  # noqa: F401
        pytest.skip("torch is installed here")
    except ImportError:
        pass
    with pytest.raises(ImportError, match=r"kprop: tensors='torch' needs PyTorch, which this Python cannot import "
                                          r"\(.*\); install it, or pass NumPy arrays \(tensors='numpy'\)"):
        kprop.check("softmax_topk", example("softmax_topk").softmax_topk, tensors="torch", seed=1, trials=5,
                    corpus=corpus)


def test_spec_as_a_dict(example, corpus):
    mod = example("softmax_topk")
    spec = {"spec": "topk_f64_small", "family": "softmax_topk", "run": {"trials": 30, "seed": 3},
            "domain": {"dtype": ["f64"], "rows": [1, 2], "vocab": [1, 16]},
            "invariants": ["matches_reference", "sorted"]}
    result = kprop.check(spec, mod.softmax_topk, corpus=corpus)
    assert result.passed and result.spec == "topk_f64_small" and result.seed == 3
    assert [i.name for i in result.invariants] == ["matches_reference", "sorted"]
    mod.BUG = "unsorted_output"
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check(spec, mod.softmax_topk, corpus=corpus)
    assert "/topk_f64_small/" in excinfo.value.finding.path
    # The printed replay names the dict itself and runs as printed (it named
    # '<dict spec>', which no replay could open).
    replay = excinfo.value.finding.replay
    assert replay.startswith("kprop.replay({'spec': 'topk_f64_small'") and "<dict" not in replay
    with pytest.raises(kprop.Counterexample):
        eval(replay, {"kprop": kprop, "softmax_topk": mod.softmax_topk})
    with pytest.raises(ValueError, match="dtype"):
        kprop.check(dict(spec, domain={"dtype": ["f8"]}), mod.softmax_topk, corpus=corpus)
    # run.padded_tensors tests plugins' strides; a Python function receives
    # contiguous NumPy arrays, so the setting is refused, not ignored.
    with pytest.raises(ValueError, match="padded_tensors applies to plugin: targets"):
        kprop.check(dict(spec, run={"trials": 30, "seed": 3, "padded_tensors": True}), mod.softmax_topk,
                    corpus=corpus)


def test_stored_cases_outside_the_runs_domain_are_left_alone_and_counted(example, corpus):
    # A wider run (every dtype) stores a case a kernel fails on a half dtype;
    # a correct f32-only kernel, narrowed with domain= as docs/PYTHON.md
    # says, is never handed that case (it failed on it: "a stored
    # counterexample fails again"), and the result counts it.
    good = example("softmax_topk")

    def halves_fail(logits, k, **attrs):
        if logits.dtype != np.float32:
            raise RuntimeError("no half kernel")
        return good.softmax_topk(logits, k, **attrs)

    def f32_only(logits, k, **attrs):
        if logits.dtype != np.float32:
            raise TypeError("f32 kernel called with %s" % logits.dtype)
        return good.softmax_topk(logits, k, **attrs)

    with pytest.raises(kprop.Counterexample) as wide:
        kprop.check("softmax_topk", halves_fail, seed=SEED, trials=50, corpus=corpus)
    assert wide.value.finding.kind == "error"
    stored = os.listdir(os.path.join(corpus, "softmax_topk"))
    assert len(stored) == 1
    result = kprop.check("softmax_topk", f32_only, seed=SEED, trials=20, corpus=corpus, domain={"dtypes": ["f32"]})
    assert result.passed and result.replayed == 0 and result.replay_outside_domain == 1
    assert "1 left alone (outside this run's domain)" in result.summary()
    # Inside the domain it is replayed as before (and fails the kernel that still lacks halves).
    with pytest.raises(kprop.Counterexample) as again:
        kprop.check("softmax_topk", halves_fail, seed=SEED, trials=1, corpus=corpus)
    assert again.value.finding.kind == "replay"
    # kprop.replay of the file itself is not the run's corpus replay: it replays what it is given.
    with pytest.raises(kprop.Counterexample):
        kprop.replay("softmax_topk", f32_only, os.path.join(corpus, "softmax_topk", stored[0]),
                     domain={"dtypes": ["f32"]})
    # Of the folder, it leaves the case alone as check does (it failed the
    # f32-only kernel: "f32 kernel called with uint16"); the wide run replays it.
    folder = os.path.join(corpus, "softmax_topk")
    assert kprop.replay("softmax_topk", f32_only, folder, domain={"dtypes": ["f32"]}) == 0
    with pytest.raises(kprop.Counterexample):
        kprop.replay("softmax_topk", f32_only, folder)
