"""Regressions of the Python package's audit: each test failed before its fix."""
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import kprop
from conftest import EXAMPLES, load_example

SEED = 20261122
_softmax = load_example("softmax_topk")


def softmax_topk(logits, k, **attrs):
    return _softmax.softmax_topk(logits, k, **attrs)


def _stored(corpus, spec="softmax_topk"):
    folder = os.path.join(corpus, spec)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


# ------------------------------------- 1. SystemExit, pytest.skip() in the target
def test_a_base_exception_from_fn_stops_the_run_and_is_raised_unchanged(corpus, capfd):
    calls = []

    def exits(logits, k, **attrs):
        calls.append(1)
        if len(calls) == 3:
            sys.exit(7)
        return softmax_topk(logits, k, **attrs)

    with pytest.raises(SystemExit) as excinfo:
        kprop.check("softmax_topk", exits, seed=SEED, trials=50, corpus=corpus)
    assert excinfo.value.code == 7 and len(calls) == 3  # stopped at once, no shrinking
    assert _stored(corpus) == []

    def skips(logits, k, **attrs):
        pytest.skip("no kernel for this case")

    with pytest.raises(pytest.skip.Exception, match="no kernel for this case"):
        kprop.check("softmax_topk", skips, seed=SEED, trials=50, corpus=corpus)
    assert _stored(corpus) == []

    @kprop.invariant
    def fails_the_test(target_probs):
        pytest.fail("from an invariant")

    with pytest.raises(pytest.fail.Exception, match="from an invariant"):
        kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=5, corpus=corpus,
                    extra_invariants=[fails_the_test])
    assert _stored(corpus) == []
    # Nothing said about a Ctrl-C that never happened; the next run is unaffected.
    assert "interrupted" not in capfd.readouterr().err
    assert kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=5, corpus=corpus).passed


def test_pytest_skip_in_a_spec_target_is_a_skip_and_stores_nothing(pytester, tmp_path):
    corpus = tmp_path / "corpus"
    pytester.makepyfile(test_sm="""
import kprop, pytest

@kprop.spec("softmax_topk", seed=1, trials=20, invariants=["sorted"])
def test_x(logits, k, **attrs):
    pytest.skip("no kernel on this machine")
""")
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no kernel on this machine*"])
    assert not corpus.exists() or not any(corpus.rglob("*.yaml"))


def test_a_stop_after_a_counterexample_never_hides_it(corpus):
    # Every output is wrong; fn skips the smallest rows after its first call:
    # the shrinker's rerun reached one and the skip was raised instead of the
    # failure (which was stored all the same).
    calls = []

    def wrong_then_skips(logits, k, **attrs):
        calls.append(logits.shape)
        if logits.shape[-1] == 1 and len(calls) > 1:
            pytest.skip("V = 1 not supported")
        out = softmax_topk(logits, k, **attrs)
        out["probs"] = out["probs"] * 1.5
        return out

    with pytest.raises(kprop.Counterexample, match="invariant matches_reference failed") as excinfo:
        kprop.check("softmax_topk", wrong_then_skips, seed=1, trials=50, corpus=corpus,
                    invariants=["matches_reference"])
    assert isinstance(excinfo.value.__cause__, pytest.skip.Exception)
    assert "found before the run was stopped by Skipped: V = 1 not supported" in str(excinfo.value)
    assert _stored(corpus) == [os.path.basename(excinfo.value.finding.path)]
    # Its replay reaches the skip on the stored case itself: nothing was
    # found before it, so the skip is raised, unchanged.
    with pytest.raises(pytest.skip.Exception, match="V = 1 not supported"):
        kprop.check("softmax_topk", wrong_then_skips, seed=1, trials=50, corpus=corpus,
                    invariants=["matches_reference"])


def test_replayed_counts_the_stored_cases_checked(corpus):
    # A stored counterexample the target declines was never checked:
    # result.replayed does not count it (kprop.replay returns 0 for it).
    def wrong(logits, k, **attrs):
        out = softmax_topk(logits, k, **attrs)
        out["probs"] = out["probs"] * 1.5
        return out

    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", wrong, seed=1, trials=50, corpus=corpus, invariants=["matches_reference"])
    stored = excinfo.value.finding.path
    rows = excinfo.value.finding.case_yaml.count("\n    - [")  # rows of the shrunk case

    def declines_that(logits, k, **attrs):  # rows 1 and 2 (of 1 to 4) too: 75% of the cases and more
        if logits.shape[0] <= max(rows, 2):
            raise kprop.Unsupported("not that small")
        return softmax_topk(logits, k, **attrs)

    assert kprop.replay("softmax_topk", declines_that, stored, invariants=["matches_reference"]) == 0
    with pytest.raises(kprop.HealthCheckFailure) as excinfo:  # most drawn cases are declined too
        kprop.check("softmax_topk", declines_that, seed=1, trials=20, corpus=corpus,
                    invariants=["matches_reference"])
    assert excinfo.value.result.replayed == 0


# ------------------------------------------- 2. an n/a invariant is a skip
def test_an_invariant_that_is_na_for_the_target_is_skipped(example, corpus):
    mod = example("attention_fwd")
    with pytest.raises(kprop.Skipped, match="workspace_bounded is n/a") as excinfo:
        kprop.check("attention_fwd", mod.attention_fwd, seed=SEED, trials=5, corpus=corpus,
                    invariants=["workspace_bounded"])
    assert excinfo.value.result.status == "skipped"
    assert excinfo.value.result.invariants[0].status == "not_applicable"
    # Next to an invariant that checks something, the run passes and says which one was n/a.
    result = kprop.check("attention_fwd", mod.attention_fwd, seed=SEED, trials=5, corpus=corpus,
                         invariants=["workspace_bounded", "finite_outputs"])
    assert result.passed and [i.status for i in result.invariants] == ["not_applicable", "passed"]


def test_a_pytest_item_whose_invariant_is_na_is_skipped(pytester):
    pytester.makepyfile(test_att="""
import importlib.util
import kprop

spec = importlib.util.spec_from_file_location("ex_att", %r)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

@kprop.spec("attention_fwd", seed=1, trials=5, invariants=["workspace_bounded", "finite_outputs"])
def test_attention(q, k, v, scale, mask, key_lengths=None, allowed=None, **_):
    return mod.attention_fwd(q, k, v, scale, mask, key_lengths, allowed)
""" % os.path.join(EXAMPLES, "attention_fwd.py"))
    result = pytester.runpytest("--kprop-no-corpus", "-v", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*test_attention?workspace_bounded? SKIPPED*",
                                 "*test_attention?finite_outputs? PASSED*",
                                 "*invariant workspace_bounded is n/a: *"])


# ------------------- 3. a stored case of another run's extra invariant
@kprop.invariant
def first_small(target_probs):
    return target_probs.shape[-1] < 2


def test_a_stored_case_of_an_invariant_the_run_lacks_is_left_alone(corpus):
    with pytest.raises(kprop.Counterexample):
        kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=50, corpus=corpus,
                    extra_invariants=[first_small], invariants=["first_small"])
    stored = _stored(corpus)
    assert len(stored) == 1
    folder = os.path.join(corpus, "softmax_topk")
    # Another check of the spec, without that invariant: not replayed, no error.
    result = kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=5, corpus=corpus)
    assert result.passed and result.replayed == 0
    assert kprop.replay("softmax_topk", softmax_topk, folder) == 0
    # A run that has it still replays it (and it still fails).
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=5, corpus=corpus,
                    extra_invariants=[first_small])
    assert excinfo.value.finding.kind == "replay"
    # Asked for by its path, without the invariant: said clearly.
    with pytest.raises(ValueError, match="found by invariant 'first_small', which this run does not have"):
        kprop.replay("softmax_topk", softmax_topk, os.path.join(folder, stored[0]))
    # A case of an invariant the family registers, but this spec does not
    # list, is not counted as replayed: the run lacks the invariant it
    # failed, and the others holding says nothing of that failure (it was
    # counted, and prop_runner --replay said PASSED).
    with open(os.path.join(folder, stored[0])) as f:
        text = f.read().replace("invariant: first_small", "invariant: no_nan")
    with open(os.path.join(folder, "registered.yaml"), "w") as f:
        f.write(text)
    spec = {"spec": "softmax_topk", "family": "softmax_topk", "run": {"trials": 5, "seed": 3},
            "invariants": ["sorted"]}
    result = kprop.check(spec, softmax_topk, corpus=corpus)
    assert result.passed and result.replayed == 0
    # With the invariant in the spec, it is replayed.
    spec["invariants"] = ["sorted", "no_nan"]
    result = kprop.check(spec, softmax_topk, corpus=corpus)
    assert result.passed and result.replayed == 1


def test_plugin_collects_a_stored_case_only_for_the_test_with_its_invariant(pytester, tmp_path):
    corpus = tmp_path / "corpus"
    pytester.makepyfile(test_sm="""
import importlib.util
import kprop

spec = importlib.util.spec_from_file_location("ex_sm", %r)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

@kprop.invariant
def first_small(target_probs):
    return target_probs.shape[-1] < 2

@kprop.spec("softmax_topk", seed=1, trials=50, invariants=["first_small"], extra_invariants=[first_small])
def test_extra(logits, k, **attrs):
    return mod.softmax_topk(logits, k, **attrs)

@kprop.spec("softmax_topk", seed=1, trials=5, invariants=["sorted"])
def test_plain(logits, k, **attrs):
    return mod.softmax_topk(logits, k, **attrs)
""" % os.path.join(EXAMPLES, "softmax_topk.py"))
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    stored = os.listdir(corpus / "softmax_topk")
    assert len(stored) == 1
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)  # test_extra's stored item and its run fail; test_plain passes
    result.stdout.fnmatch_lines(["*test_extra?stored:%s? FAILED*" % stored[0]])
    assert "test_plain[stored:" not in result.stdout.str()
    assert "neither in the spec nor registered" not in result.stdout.str()


@kprop.invariant
def one_column(target_probs):  # another test's, failing where first_small does
    return target_probs.shape[-1] <= 1


def test_a_case_failing_two_tests_invariants_is_replayed_by_both(corpus):
    # Two tests' extra invariants fail on the same minimal case: one file,
    # both findings in it, and each test replays it (the second was lost).
    for inv in (first_small, one_column):
        with pytest.raises(kprop.Counterexample):
            kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=50, corpus=corpus,
                        extra_invariants=[inv], invariants=[inv.__name__])
    stored = _stored(corpus)
    assert len(stored) == 1
    path = os.path.join(corpus, "softmax_topk", stored[0])
    with open(path) as f:
        text = f.read()
    assert "invariant: first_small" in text and "invariant: one_column" in text
    for inv in (first_small, one_column):
        with pytest.raises(kprop.Counterexample) as excinfo:
            kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=5, corpus=corpus,
                        extra_invariants=[inv], invariants=[inv.__name__])
        assert excinfo.value.finding.kind == "replay"
        with pytest.raises(kprop.Counterexample):
            kprop.replay("softmax_topk", softmax_topk, path, extra_invariants=[inv])
    with pytest.raises(ValueError, match="found by invariants 'first_small', 'one_column', which this run"):
        kprop.replay("softmax_topk", softmax_topk, path)


# --------------------------------- 4. a module that prints at import, isolated
def test_isolated_target_whose_module_prints_at_import(corpus, tmp_path, monkeypatch):
    (tmp_path / "kprop_noisy_target.py").write_text(textwrap.dedent("""
        import importlib.util
        print("hello from the target's module")
        spec = importlib.util.spec_from_file_location("ex_sm", %r)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)

        def softmax_topk(logits, k, **attrs):
            return mod.softmax_topk(logits, k, **attrs)
        """ % os.path.join(EXAMPLES, "softmax_topk.py")))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kprop_noisy_target", raising=False)
    import kprop_noisy_target

    result = kprop.check("softmax_topk", kprop_noisy_target.softmax_topk, seed=SEED, trials=10, corpus=corpus,
                         isolate=True)
    assert result.passed and _stored(corpus) == []


# ------------------------------------------------- 5. a bound method, isolated
class Kernel:
    def run(self, logits, k, **attrs):
        return softmax_topk(logits, k, **attrs)


def test_isolate_refuses_a_bound_method(corpus):
    with pytest.raises(ValueError, match="module-level function.*bound method"):
        kprop.check("softmax_topk", Kernel().run, seed=SEED, trials=5, corpus=corpus, isolate=True)
    assert _stored(corpus) == []


# ------------------------------- 6. every published dotted name as underscores
def test_err_floor_oracle_and_dequantized_tensors_resolve(example, corpus):
    seen = {}

    @kprop.invariant
    def err_within_floor(err_o, floor_o, target_workspace_peak):
        seen["shapes"] = (err_o.shape, floor_o.shape)
        return None

    mod = example("attention_fwd")
    result = kprop.check("attention_fwd", mod.attention_fwd, seed=SEED, trials=3, corpus=corpus,
                         invariants=["err_within_floor"], extra_invariants=[err_within_floor])
    assert result.passed and seen["shapes"][0] == seen["shapes"][1]

    def names(spec, fn):
        info = kprop.spec_info(spec)
        return dict(kprop.invariant(fn)._kprop_invariant.resolve(info["tensors"], info["family"]))

    assert names("kvcache", lambda dequantized_out, naive_out: None) == {
        "dequantized_out": "dequantized.out", "naive_out": "naive.out"}
    assert names("dflash", lambda oracle_margin: None) == {"oracle_margin": "oracle.margin"}
    with pytest.raises(ValueError, match="parameter 'err_nope' names no tensor"):
        names("attention_fwd", lambda err_nope: None)


# ------------------------------------- 7. replay_stored=False under pytest
def test_plugin_honours_replay_stored_false(pytester, tmp_path):
    corpus = tmp_path / "corpus"
    body = """
import importlib.util
import kprop

spec = importlib.util.spec_from_file_location("ex_sm", %r)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
mod.BUG = "unsorted_output"

@kprop.spec("softmax_topk", seed=20261122, trials=300, invariants=["sorted"]%%s)
def test_x(logits, k, **attrs):
    return mod.softmax_topk(logits, k, **attrs)
""" % os.path.join(EXAMPLES, "softmax_topk.py")
    pytester.makepyfile(test_sm=body % "")
    pytester.runpytest("--kprop-corpus", str(corpus), "-p", "no:cacheprovider").assert_outcomes(failed=1)
    assert len(os.listdir(corpus / "softmax_topk")) == 1
    pytester.makepyfile(test_sm=body % ", replay_stored=False")
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "[stored:" not in result.stdout.str()


# ------------------------------------------- 8. a corpus that cannot be written
def test_a_corpus_that_cannot_be_written_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # where the case goes instead
    not_a_folder = tmp_path / "corpus"
    not_a_folder.write_text("a file, not a folder\n")
    buggy = load_example("softmax_topk")
    buggy.BUG = "unsorted_output"
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", buggy.softmax_topk, seed=SEED, trials=300, invariants=["sorted"],
                    corpus=str(not_a_folder))
    f = excinfo.value.finding
    message = str(excinfo.value)
    assert not f.in_corpus and "could not store the case in %s" % not_a_folder in f.store_note
    assert "note: could not store the case in %s" % not_a_folder in message
    assert "(NOT in the corpus %s)" % not_a_folder in message
    assert f.path and os.path.exists(f.path) and f.path.startswith(str(tmp_path / "tmp"))


# -------------------------------- 9. complex, string, object and bool outputs
@pytest.mark.parametrize("bad, said", [
    (lambda p: p + 5j, "has dtype complex128"),
    (lambda p: p.astype(str), "has dtype <U"),
    (lambda p: p.astype(object), "has dtype object"),
    (lambda p: p > 0.5, "is a bool array"),  # a comparison returned where probabilities are due
], ids=["complex", "str", "object", "bool"])
def test_a_float_output_that_is_not_real_numbers_is_an_error(corpus, bad, said):
    def wrong(logits, k, **attrs):
        out = softmax_topk(logits, k, **attrs)
        return {"probs": bad(out["probs"]), "indices": out["indices"]}

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning, no silent cast
        with pytest.raises(kprop.Counterexample, match="output 'probs' %s" % said) as excinfo:
            kprop.check("softmax_topk", wrong, seed=SEED, trials=5, corpus=corpus)
    assert excinfo.value.finding.kind == "error"
    assert "\n" not in excinfo.value.finding.message


# ------------------------------- 10. kprop.Skipped whatever the import order
@pytest.mark.parametrize("plugin", ["with_plugin", "without_plugin"])
def test_skipped_is_a_pytest_skip_when_kprop_is_imported_first(tmp_path, plugin):
    (tmp_path / "test_declines.py").write_text(textwrap.dedent("""
        import kprop

        def nothing(**_):
            raise kprop.Unsupported("no kernel here")

        def test_check():
            kprop.check("softmax_topk", nothing, seed=1, trials=5, corpus=None)
        """) + ("" if plugin == "without_plugin" else textwrap.dedent("""
        @kprop.spec("softmax_topk", seed=1, trials=5, invariants=["sorted"])
        def test_spec(**_):
            raise kprop.Unsupported("no kernel here")
        """)))
    runner = tmp_path / "run.py"
    runner.write_text(textwrap.dedent("""
        import sys
        import kprop  # before pytest
        assert "pytest" not in sys.modules
        import pytest
        sys.exit(pytest.main(sys.argv[1:]))
        """))
    args = [sys.executable, str(runner), "-q", "-rs", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
            str(tmp_path / "test_declines.py")]
    if plugin == "without_plugin":
        args += ["-p", "no:kprop"]
    else:
        args += ["--kprop-no-corpus"]
    # This very kprop first (an example puts the source tree's python/ on sys.path).
    here = os.path.dirname(os.path.dirname(os.path.abspath(kprop.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here] + [p for p in sys.path if p]))
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(args, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    want = "2 skipped" if plugin == "with_plugin" else "1 skipped"
    assert done.returncode == 0 and want in done.stdout, done.stdout + done.stderr
    assert "declined every case" in done.stdout


# --------------------------- 11. NumPy scalars in domain=, and bad arguments
def test_numpy_values_in_domain_and_dict_specs(corpus):
    result = kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=5, corpus=corpus,
                         domain={"rows": [np.int64(1), 2], "dtype": np.array(["f32"])})
    assert result.passed
    spec = {"spec": "topk_numpy", "family": "softmax_topk", "run": {"trials": np.int32(5), "seed": np.uint8(3)},
            "domain": {"dtype": ["f64"], "rows": np.array([1, 2])}, "invariants": ["sorted"]}
    assert kprop.check(spec, softmax_topk, corpus=corpus).passed
    with pytest.raises(TypeError, match=r"^kprop: domain\['rows'\]\[1\] is a set \(\{2\}\): give numbers"):
        kprop.check("softmax_topk", softmax_topk, corpus=corpus, domain={"rows": [1, {2}]})


@pytest.mark.parametrize("kwargs, match", [
    ({"tensors": 5}, "tensors= must be a dict {parameter: tensor name}"),
    ({"tensors": {"o": 1}}, "tensors= must be a dict {parameter: tensor name}"),
    ({"tensors": {"nope": "target.o"}}, "tensors= maps 'nope', which the function has no parameter for"),
    ({"name": 3}, "name= must be a str"),
])
def test_bad_invariant_arguments_are_clear_errors(kwargs, match):
    def f(o):
        return None

    with pytest.raises(TypeError, match=match):
        kprop.invariant(**kwargs)(f)


# ----------------- 12. an input kept by a function that raised or declined
# Needs the rebuilt extension (python/src/kprop_module.cpp).
@pytest.mark.parametrize("raised", [ValueError("no"), kprop.Unsupported("not this one")],
                         ids=["error", "decline"])
def test_an_input_kept_by_a_function_that_raised_is_refused(corpus, raised):
    kept = []

    def keeps_then_raises(logits, k, **attrs):
        kept.append(logits[:1])  # a view of kprop's buffer, alive after the call
        raise raised

    try:
        kprop.check("softmax_topk", keeps_then_raises, seed=SEED, trials=5, corpus=corpus)
    except kprop.Counterexample as e:
        assert "kept input 'logits'" in str(e)
    except kprop.Skipped as e:  # would be a pytest skip: a declined case is no refusal
        pytest.fail("declined, not refused: %s" % e)
    else:
        pytest.fail("passed")
    kept.clear()


def test_a_raised_error_without_a_kept_input_is_not_said_to_keep_one(corpus):
    def raises_from(logits, k, **attrs):
        try:
            raise KeyError("inner")
        except KeyError as err:
            saved = err  # a frame <-> traceback cycle that holds `logits` until the collector runs
            raise ValueError("outer") from saved

    with pytest.raises(kprop.Counterexample, match="ValueError: outer") as excinfo:
        kprop.check("softmax_topk", raises_from, seed=SEED, trials=5, corpus=corpus)
    assert "kept input" not in str(excinfo.value)


# ------------------- 1 (isolated). pytest.skip() in a worker declines the case
def skips_in_a_worker(**_):
    pytest.skip("no device in the worker")


def test_pytest_skip_in_an_isolated_target_declines_its_case(corpus):
    try:
        kprop.check("softmax_topk", skips_in_a_worker, seed=SEED, trials=5, corpus=corpus, isolate=True)
    except BaseException as e:  # a bare pytest skip here would hide a wrong verdict as this test's skip
        assert isinstance(e, kprop.Skipped), repr(e)
        assert "no device in the worker" in str(e) and e.result.declined == e.result.trials
    else:
        pytest.fail("passed")
    assert _stored(corpus) == []


def test_a_folder_named_like_a_shipped_spec_does_not_hide_it(tmp_path, monkeypatch):
    """A bare shipped name resolves to the shipped spec even where the working
    directory holds a folder of that name (kernels/layernorm/): it was read
    as the spec, "spec is empty"."""
    (tmp_path / "layernorm").mkdir()
    monkeypatch.chdir(tmp_path)
    assert kprop.spec_info("layernorm")["family"] == "layernorm"


# ------------------------- a case too large to print is cut, saying where
def test_a_case_too_large_to_print_is_cut_short_and_says_where_it_is():
    from kprop._check import _shown_case
    big = "dtype: f64\nx: [" + "0, " * 100000 + "0]\n"
    shown = _shown_case(big, "/tmp/big.yaml")
    assert len(shown) < 3000 and shown.startswith("dtype: f64\nx: [0, 0, ")
    assert " ... (298006 more characters)\n(cut short: the whole case is in /tmp/big.yaml)\n" in shown
    assert _shown_case(big, "") == big  # stored nowhere: the message is the only copy
    # The limit counts what is shown: the lines after one long line show.
    shown = _shown_case("x: [" + "0, " * 100000 + "0]\nk: 5\n", "/tmp/big.yaml")
    assert "\nk: 5\n(cut short" in shown
    assert _shown_case("dtype: f64\nx: [0, 1]\n", "/tmp/big.yaml") == "dtype: f64\nx: [0, 1]\n"


# ------------------------------- the second audit (docs/PYTHON.md promises each)
def test_an_exception_that_stops_the_run_keeps_no_view_of_freed_buffers(corpus):
    """SystemExit from fn is raised again after the call, when kprop's
    buffers are freed: the frames in its traceback kept fn's inputs (views
    of them), which read other data (or crashed) in pytest -l or a debugger."""
    def exits(logits, k, **attrs):
        sys.exit(3)

    with pytest.raises(SystemExit) as excinfo:
        kprop.check("softmax_topk", exits, seed=SEED, trials=5, corpus=corpus)
    frames = []
    tb = excinfo.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    assert frames and frames[-1].f_code.co_name == "exits"
    for frame in frames:
        assert not any(isinstance(v, np.ndarray) for v in frame.f_locals.values()), frame.f_code.co_name
        assert "logits" not in frame.f_locals and "kwargs" not in frame.f_locals, frame.f_code.co_name


def test_stored_items_of_the_plugin_replay_with_the_decorators_max_case_mb(pytester, tmp_path):
    """A domain= that needs max_case_mb=: the stored case's item replays with
    it (it was left out, and the item failed on the memory budget)."""
    corpus = tmp_path / "corpus"
    pytester.makepyfile(test_mb="""
import kprop

@kprop.spec("softmax_topk", seed=1, trials=5, invariants=["sorted"],
            domain={"rows": [1, 1000], "vocab": [1, 20000]}, max_case_mb=4096)
def test_x(logits, k, **attrs):
    raise RuntimeError("kernel not written yet")
""")
    args = ("--kprop-corpus", str(corpus), "-p", "no:cacheprovider")
    pytester.runpytest(*args).assert_outcomes(failed=1)
    stored = sorted(p.name for p in corpus.rglob("*.yaml"))
    assert len(stored) == 1
    result = pytester.runpytest(*args)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "over run.max_case_mb" not in out, out
    assert "kernel not written yet" in out


def test_max_case_mb_takes_a_numpy_integer(corpus):
    assert kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=3, corpus=corpus,
                       max_case_mb=np.int64(64)).passed


def test_a_script_that_checks_isolated_at_import_is_refused_not_repeated(tmp_path):
    """kprop.check(..., isolate=True) at the top of a script without `if
    __name__ == "__main__":`: the worker that loads it ran it again, which
    started another worker, without end (a hang)."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import kprop
        from conftest import load_example
        example = load_example("softmax_topk")

        def softmax_topk(logits, k, **attrs):  # this script's: the worker loads it from here
            return example.softmax_topk(logits, k, **attrs)

        kprop.check("softmax_topk", softmax_topk, isolate=True, trials=3, seed=1, corpus=None)
        """ % os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert r.returncode != 0
    assert "isolate=True while kprop.worker imports" in r.stderr, r.stderr
    assert 'put the call under `if __name__ == "__main__":`' in r.stderr


def test_a_boolean_output_that_is_not_0_or_1_is_the_targets_error(corpus):
    """A flag written as 255 (what a plugin left in an entry it never wrote,
    while integer outputs were poisoned with 0xFF) read as true, so beam's
    next_done passed whatever the kernel wrote there."""
    beam = load_example("beam_search")

    def step(**kwargs):
        out = beam.beam_step(**kwargs)
        out["next_done"] = np.asarray(out["next_done"], dtype=np.uint8) * np.uint8(255)
        return out

    with pytest.raises(kprop.Counterexample, match="a boolean output is 0 or 1"):
        kprop.check("beam", step, seed=SEED, trials=50, corpus=corpus)
    assert kprop.check("beam", beam.beam_step, seed=SEED, trials=50, corpus=corpus).passed
