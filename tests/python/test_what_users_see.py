"""What a user sees and selects: extra invariants with invariants=, measured values, stored-case items,
the worker's output checks, replay lines, summaries and isolated targets' names (each test failed
before its fix)."""
import ctypes
import importlib.util
import io
import json
import os
import stat
import struct
import warnings

import numpy as np
import pytest

import kprop
from kprop import _check
from conftest import EXAMPLES, load_example, load_worker

SEED = 20261122
_softmax = load_example("softmax_topk")


def softmax_topk(logits, k, **attrs):
    return _softmax.softmax_topk(logits, k, **attrs)


@kprop.invariant
def never_holds(target_probs):
    return False


@kprop.invariant
def probs_nonnegative(target_probs):
    return bool(np.all(target_probs >= 0))


# ------------------- 1. an extra invariant left out of invariants= never ran
def test_an_extra_invariant_runs_whatever_invariants_selects(corpus):
    result = kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=20, corpus=corpus,
                         invariants=["no_nan"], extra_invariants=[probs_nonnegative])
    assert sorted(i.name for i in result.invariants) == ["no_nan", "probs_nonnegative"]
    assert all(i.passed > 0 for i in result.invariants)
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=20, corpus=corpus,
                    invariants=["no_nan"], extra_invariants=[never_holds])
    assert excinfo.value.finding.invariant == "never_holds"
    # Named in invariants= too, it runs once; the replay of its finding runs it again.
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=20, corpus=None,
                    invariants=["never_holds", "no_nan"], extra_invariants=[never_holds])
    assert sorted(i.name for i in excinfo.value.result.invariants) == ["never_holds", "no_nan"]
    with pytest.raises(kprop.Counterexample):
        kprop.replay("softmax_topk", softmax_topk, excinfo.value.finding.path, invariants=["no_nan"],
                     extra_invariants=[never_holds])


SPEC_TESTS = """
import importlib.util
import numpy as np
import kprop

spec = importlib.util.spec_from_file_location("ex_sm", {path!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

@kprop.invariant
def probs_nonnegative(target_probs):
    return bool(np.all(target_probs >= 0))

@kprop.invariant
def never_holds(target_probs):
    return False
"""


def test_plugin_makes_an_item_of_each_extra_invariant_whatever_invariants_selects(pytester):
    pytester.makepyfile(test_sm=SPEC_TESTS.format(path=os.path.join(EXAMPLES, "softmax_topk.py")) + """
@kprop.spec("softmax_topk", seed=1, trials=20, invariants=["no_nan"],
            extra_invariants=[probs_nonnegative, never_holds])
def test_x(logits, k, **attrs):
    return mod.softmax_topk(logits, k, **attrs)
""")
    result = pytester.runpytest("--kprop-no-corpus", "-v", "-p", "no:cacheprovider")
    # Each in its own item: never_holds fails its own, not no_nan's or probs_nonnegative's.
    result.stdout.fnmatch_lines(["*test_x?no_nan? PASSED*", "*test_x?probs_nonnegative? PASSED*",
                                 "*test_x?never_holds? FAILED*"])
    result.assert_outcomes(passed=2, failed=1)


# ------------------- 2. measured values printed with 6 significant digits
def test_measured_values_print_as_the_doubles_they_are():
    f = kprop.Finding(invariant="sum_at_most_one", kind="invariant", message="probabilities sum to 1.00000001 > 1",
                      measured=[("sum", 1.00000001), ("first", 1.0), ("second", 1.0000000000000002),
                                ("tiny", 1e-300)],
                      case_yaml="x: 1\n", path="", replay="")
    text = kprop.format_finding(f, "softmax_topk", "python:f")
    assert "measured: sum = 1.00000001, first = 1.0, second = 1.0000000000000002, tiny = 1e-300" in text


# ------------------- 3. stored-case items skipped with a false reason
def _store_a_sorted_case(corpus):
    bad = load_example("softmax_topk")
    bad.BUG = "unsorted_output"
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", bad.softmax_topk, seed=SEED, trials=300, corpus=corpus, invariants=["sorted"])
    return os.path.basename(excinfo.value.finding.path)


def test_plugin_replays_a_stored_case_only_for_tests_that_check_its_invariant(pytester, tmp_path):
    corpus = str(tmp_path / "corpus")
    stored = _store_a_sorted_case(corpus)
    pytester.makepyfile(test_sm=SPEC_TESTS.format(path=os.path.join(EXAMPLES, "softmax_topk.py")) + """
@kprop.spec("softmax_topk", seed=1, trials=10, invariants=["no_nan"])
def test_other_invariant(logits, k, **attrs):
    return mod.softmax_topk(logits, k, **attrs)

@kprop.spec("softmax_topk", seed=1, trials=10, invariants=["sorted"])
def test_same_invariant(logits, k, **attrs):
    return mod.softmax_topk(logits, k, **attrs)

@kprop.spec("softmax_topk", seed=1, trials=10, invariants=["sorted"])
def test_declines(logits, k, **attrs):
    raise kprop.Unsupported("no kernel yet")
""")
    result = pytester.runpytest("--kprop-corpus", corpus, "-v", "-rs", "-p", "no:cacheprovider")
    out = result.stdout.str()
    # The case sorted found is no item of a test that does not check sorted (it was one, skipped as
    # "declined by the target, or no invariant could check it").
    assert "test_other_invariant[stored:" not in out
    result.stdout.fnmatch_lines(["*test_same_invariant?stored:%s? PASSED*" % stored,
                                 "*test_declines?stored:%s? SKIPPED*" % stored])
    # A stored item that is skipped says why: the target declined it.
    result.stdout.fnmatch_lines(["*the stored case *%s was not checked: declined: *no kernel yet*" % stored])
    assert "no invariant could check it" not in out


def test_plugin_shows_a_stored_case_of_an_unlisted_registered_invariant_as_unchecked(pytester, tmp_path):
    """A case found by an invariant the family registers but the spec no
    longer lists is checked by no test: a test of every invariant shows it,
    skipped with the reason (it was no item of any test, silently)."""
    corpus = str(tmp_path / "corpus")
    stored = _store_a_sorted_case(corpus)
    spec = tmp_path / "sm.yaml"
    spec.write_text("spec: softmax_topk\nfamily: softmax_topk\nrun: {trials: 5, seed: 3}\n"
                    "invariants: [no_nan]\n")
    pytester.makepyfile(test_sm=SPEC_TESTS.format(path=os.path.join(EXAMPLES, "softmax_topk.py")) + """
@kprop.spec(%r, seed=1, trials=10)
def test_every(logits, k, **attrs):
    return mod.softmax_topk(logits, k, **attrs)

@kprop.spec(%r, seed=1, trials=10, invariants=["no_nan"])
def test_selected(logits, k, **attrs):
    return mod.softmax_topk(logits, k, **attrs)
""" % (str(spec), str(spec)))
    result = pytester.runpytest("--kprop-corpus", corpus, "-v", "-rs", "-p", "no:cacheprovider")
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["*test_every?stored:%s? SKIPPED*" % stored])
    assert "test_selected[stored:" not in out


# ------------------- 4. the exec worker took complex and bool outputs, warned of f16 overflow
def _framed(header, arrays=()):
    text = json.dumps(header).encode()
    return b"KPRP" + struct.pack("<I", len(text)) + text + b"".join(a.tobytes() for a in arrays)


def _replies(stream):
    stream.seek(0)
    out = []
    while True:
        head = stream.read(8)
        if not head:
            return out
        (n,) = struct.unpack("<I", head[4:])
        header = json.loads(stream.read(n))
        tensors = {}
        for t in header.get("tensors", []):
            dtype = np.dtype({"f16": "<f2", "f32": "<f4"}[t["dtype"]])
            count = int(np.prod(t["shape"]))
            tensors[t["name"]] = np.frombuffer(stream.read(count * dtype.itemsize), dtype, count)
        out.append((header, tensors))




def _serve(which, fn, out_dtype):
    """One request of op "op" (x: f32 [2]) to a worker serving fn, in memory: its reply."""
    x = np.array([1.0, 2.0], np.float32)
    stdin = io.BytesIO(_framed({"op": "hello", "abi_version": 1, "ops": ["op"]})
                       + _framed({"op": "op", "attrs": {}, "tensors": [{"name": "x", "dtype": "f32", "shape": [2]}],
                                  "outputs": [{"name": "y", "dtype": out_dtype, "shape": [2]}]}, [x]))
    stdout = io.BytesIO()
    if which == "kprop_worker.py":
        load_worker().serve({"op": fn}, stdin=stdin, stdout=stdout)
    else:
        from kprop import worker
        worker.serve(fn, stdin=stdin, stdout=stdout)
    replies = _replies(stdout)
    assert replies[0][0]["ok"] and len(replies) == 2
    return replies[1]


WORKERS = ["kprop_worker.py", "kprop.worker"]


@pytest.mark.parametrize("which", WORKERS)
@pytest.mark.parametrize("bad, said", [
    (lambda x: x.astype(np.complex64), "TypeError: op: output 'y' has dtype complex64: return real numbers (f32)"),
    (lambda x: x.astype(np.complex128) + 1j, "TypeError: op: output 'y' has dtype complex128: return real numbers"),
    (lambda x: x > 1, "TypeError: op: output 'y' is a bool array: return the f32 values, not a mask"),
], ids=["complex64", "complex128", "bool"])
def test_a_worker_refuses_outputs_that_are_not_real_numbers_as_in_process(which, bad, said, capfd):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning: no silent cast
        header, _ = _serve(which, lambda x, **_: {"y": bad(x)}, "f32")
    assert header["ok"] is False and header["error"].startswith(said), header
    # The same words as kprop.check in process.
    with pytest.raises(kprop.Counterexample, match="output 'probs' %s" % said.split("'y' ")[1].split(":")[0]):
        kprop.check("softmax_topk", lambda logits, k, **a: {"probs": bad(softmax_topk(logits, k)["probs"]),
                                                             "indices": softmax_topk(logits, k)["indices"]},
                    seed=SEED, trials=5, corpus=None)


@pytest.mark.parametrize("which", WORKERS)
def test_a_worker_stores_an_f16_overflow_as_inf_without_a_warning(which, capfd):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "RuntimeWarning: overflow encountered in cast"
        header, tensors = _serve(which, lambda x, **_: {"y": x.astype(np.float64) * 1e6}, "f16")
    assert header["ok"], header
    assert list(tensors["y"]) == [np.inf, np.inf]
    assert "overflow" not in capfd.readouterr().err


@pytest.mark.parametrize("which", WORKERS)
def test_a_worker_passes_the_dims_a_function_names(which):
    """A declared op's request carries its dims: fn(x, K) gets K, and one
    naming no dim (x and **kwargs) gets none."""
    x = np.array([1.0, 2.0, 3.0], np.float32)
    got = []

    def serve(fn):
        stdin = io.BytesIO(_framed({"op": "hello", "abi_version": 1, "ops": ["op"]})
                           + _framed({"op": "op", "attrs": {}, "dims": {"V": 3, "K": 2},
                                      "tensors": [{"name": "x", "dtype": "f32", "shape": [3]}],
                                      "outputs": [{"name": "y", "dtype": "f32", "shape": [2]}]}, [x]))
        stdout = io.BytesIO()
        if which == "kprop_worker.py":
            load_worker().serve({"op": fn}, stdin=stdin, stdout=stdout)
        else:
            from kprop import worker
            worker.serve(fn, stdin=stdin, stdout=stdout)
        return _replies(stdout)[1]

    header, tensors = serve(lambda x, K: got.append(K) or {"y": x[:K]})
    assert header["ok"], header
    assert got == [2] and list(tensors["y"]) == [1.0, 2.0]
    header, _ = serve(lambda x, **extra: got.append(extra) or {"y": x[:2]})
    assert header["ok"], header
    assert got[-1] == {}


# ------------------- 5. the replay line of a parametrized item did not import functools
def test_the_replay_of_a_parametrized_item_runs_as_printed(pytester, tmp_path):
    corpus = tmp_path / "corpus"
    pytester.makepyfile(test_sm=SPEC_TESTS.format(path=os.path.join(EXAMPLES, "softmax_topk.py")) + """
import pytest

@pytest.mark.parametrize("bug", [None, "unsorted_output"])
@kprop.spec("softmax_topk", seed=%d, trials=300, invariants=["sorted"])
def test_p(logits, k, bug, **attrs):
    mod.BUG = bug
    return mod.softmax_topk(logits, k, **attrs)
""" % SEED)
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    lines = [line for line in result.stdout.lines if line.startswith("replay: ")]
    assert lines and lines[0].startswith("replay: import functools; kprop.replay(")
    # Run as printed, in the test module's namespace (less functools).
    namespace = {"kprop": kprop, "test_p": _load_module(pytester.path / "test_sm.py").test_p}
    with pytest.raises(kprop.Counterexample, match="a stored counterexample fails again"):
        exec(lines[0][len("replay: "):], namespace)


def _load_module(path):
    spec = importlib.util.spec_from_file_location("dogfood_" + path.stem, str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------- 6. "crashed" for a target that raised
def raises(logits, k, **attrs):
    raise RuntimeError("boom: kernel launch failed")


@pytest.mark.parametrize("fn", [raises, lambda logits, k, **_: None,
                                lambda logits, k, **_: {"probs": softmax_topk(logits, k)["probs"][:, :0],
                                                        "indices": softmax_topk(logits, k)["indices"]}],
                         ids=["raises", "returns_none", "wrong_shape"])
def test_the_summary_says_the_target_raised_not_crashed(fn, corpus):
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", fn, seed=SEED, trials=10, corpus=corpus)
    result = excinfo.value.result
    assert result.status == "crashed" and excinfo.value.finding.kind == "error"  # the API's status word
    first = result.summary().splitlines()[0]
    assert first.startswith("softmax_topk: target error on python:"), first
    assert "crashed" not in str(excinfo.value)


# ------------------- 7. isolate=True named the target by the worker's whole command line
def test_an_isolated_target_is_named_by_its_function_and_replays_with_the_runner_found(corpus, monkeypatch):
    monkeypatch.setattr(_check, "_RUNNER", ["/opt/kprop build/bin/prop_runner"])
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", raises, seed=SEED, trials=5, corpus=corpus, isolate=True)
    message = str(excinfo.value)
    result = excinfo.value.result
    assert result.target.startswith("python:") and result.target.endswith(".raises (isolated)")
    assert "PYTHONPATH=" not in message.split("replay: ")[0]  # header and summary name the function
    assert message.splitlines()[0].startswith("kprop: softmax_topk: the target raised an error (python:")
    assert result.summary().splitlines()[0].startswith("softmax_topk: target error on python:")
    # What runs it is the worker: in the report, and in the replay, with the runner's path.
    assert result.report["target"].startswith("exec:PYTHONPATH=")
    replay = excinfo.value.finding.replay
    assert replay.startswith("'/opt/kprop build/bin/prop_runner' --spec ") and "kprop.worker" in replay
    assert "exec:PYTHONPATH=" in replay


def test_the_runner_found_is_the_builds_then_the_one_on_path(tmp_path, monkeypatch):
    package = tmp_path / "build" / "python" / "kprop"
    package.mkdir(parents=True)
    monkeypatch.setattr(_check, "__file__", str(package / "_check.py"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(_check, "_RUNNER", [])
    assert _check._prop_runner() is None
    assert _check._with_runner("prop_runner --spec s.yaml") == "prop_runner --spec s.yaml"  # as it was
    (tmp_path / "bin").mkdir()
    for runner in (tmp_path / "bin" / "prop_runner", tmp_path / "build" / "prop_runner"):
        runner.write_text("#!/bin/sh\n")
        runner.chmod(runner.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setattr(_check, "_RUNNER", [])
        assert _check._prop_runner() == str(runner)
        assert _check._with_runner("prop_runner --spec s.yaml") == "%s --spec s.yaml" % runner


# ------------------- a domain= error named prop_runner's option, at a column of kprop's own JSON
def test_a_bad_domain_is_named_as_the_argument_given(corpus):
    with pytest.raises(ValueError) as excinfo:
        kprop.check("softmax_topk", softmax_topk, domain={"dtypess": ["f32"]}, corpus=corpus)
    said = str(excinfo.value)
    assert said.startswith("domain=: unknown key 'dtypess'"), said
    assert "--domain" not in said


# ------------------- max_case_mb=: this machine's budget for one case (prop_runner --max-case-mb)
def test_max_case_mb_is_the_runs_memory_budget(corpus):
    spec = {"spec": "tiny_budget", "family": "softmax_topk", "run": {"max_case_mb": 1},
            "domain": {"rows": [1, 4], "vocab": [1, 4096], "dtypes": ["f64"]},
            "invariants": ["matches_reference"]}
    with pytest.raises(ValueError) as excinfo:
        kprop.check(spec, softmax_topk, seed=1, trials=3, corpus=corpus)
    said = str(excinfo.value)
    assert "over run.max_case_mb = 1" in said and "raise run.max_case_mb (max_case_mb=)" in said, said
    assert "--max-case-mb" not in said, said
    result = kprop.check(spec, softmax_topk, seed=1, trials=3, corpus=corpus, max_case_mb=16)
    assert result.passed and result.checked > 0
    for bad in (0, -1, 1.5, True, 1 << 31):
        with pytest.raises(ValueError, match="max_case_mb must be an integer of MB"):
            kprop.check(spec, softmax_topk, seed=1, trials=3, corpus=corpus, max_case_mb=bad)


@pytest.mark.parametrize("which", WORKERS)
def test_a_worker_fails_a_kernel_that_writes_its_input_through_a_pointer(which, capfd):
    # NumPy refuses writes into the read-only input; a raw pointer (ctypes,
    # a C extension) does not ask, and the reply was a pass.
    def scribbles(x, **_):
        y = x * 2
        ctypes.memset(x.ctypes.data + x.itemsize, 0, x.itemsize)  # x[1] = 0.0
        return {"y": y}

    header, _ = _serve(which, scribbles, "f32")
    assert header["ok"] is False, header
    assert "the target wrote into its input 'x' (first change at index [1]: 2.0 became 0.0)" in header["error"]
