"""kprop.check(isolate=True): fn in a worker process (python -m kprop.worker),
so a crash is a reported, shrunk, saved failure instead of a dead pytest."""
import ctypes
import os
import shlex

import numpy as np
import pytest

import kprop
from conftest import load_example

_softmax = load_example("softmax_topk")
SEED = 20261122


def softmax_topk(logits, k, **attrs):
    return _softmax.softmax_topk(logits, k, **attrs)


def segfaults_on_wide_rows(logits, k, **attrs):
    if logits.shape[-1] > 2:
        ctypes.string_at(0)  # SIGSEGV in the worker
    return _softmax.softmax_topk(logits, k, **attrs)


def _runs_prop_runner(replay):
    """A replay command of prop_runner's: the one the package found (an
    absolute path), else plain prop_runner (on PATH)."""
    runner = shlex.split(replay)[0]
    return runner == "prop_runner" or (os.path.basename(runner) == "prop_runner" and os.path.isabs(runner)
                                       and os.access(runner, os.X_OK))


def test_isolated_correct_target_passes(corpus):
    result = kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=20, corpus=corpus, isolate=True)
    assert result.passed and result.report["target"].startswith("exec:")  # what runs it
    assert result.target.startswith("python:") and result.target.endswith(".softmax_topk (isolated)")


def test_isolated_crash_is_reported_shrunk_and_saved(corpus):
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", segfaults_on_wide_rows, seed=SEED, trials=50, corpus=corpus, isolate=True)
    f = excinfo.value.finding
    assert f.kind == "crash", str(excinfo.value)
    assert f.path and os.path.exists(f.path)
    assert _runs_prop_runner(f.replay) and "kprop.worker" in f.replay
    # The invariant it happened under (it may call fn on a case it derives).
    assert f.while_checking in kprop.spec_info("softmax_topk")["invariants"], f.while_checking
    assert "\n  while checking: %s (" % f.while_checking in str(excinfo.value)
    assert "WARNING" not in str(excinfo.value)  # its replay, re-run in a fresh process, crashes too


def test_isolate_needs_an_importable_function(corpus):
    with pytest.raises(ValueError, match="module-level"):
        kprop.check("softmax_topk", lambda **kw: None, corpus=corpus, isolate=True)


def takes_a_fixture(logits, k, scale, **attrs):  # `scale` is no input or attribute of softmax_topk
    return _softmax.softmax_topk(logits * scale, k, **attrs)


def test_an_isolated_signature_mismatch_stops_the_run_and_stores_nothing(corpus):
    """A function that cannot take its op's arguments is wired wrong, not a
    wrong kernel: in a worker it was the target's error, shrunk and stored
    as a counterexample; it raises ArgumentMismatch, as in process."""
    with pytest.raises(kprop.ArgumentMismatch, match="cannot take the arguments of op softmax_topk.*'scale'"):
        kprop.check("softmax_topk", takes_a_fixture, seed=SEED, trials=20, corpus=corpus, isolate=True)
    assert not os.path.exists(corpus) or not any(files for _, _, files in os.walk(corpus))


def needs_a_missing_module(logits, k, **attrs):
    import kprop_test_no_such_module  # noqa: F401  (a CI image without torch)
    return _softmax.softmax_topk(logits, k, **attrs)


@pytest.mark.parametrize("isolate", [False, True])
def test_a_missing_module_is_no_failure_of_the_kernel(corpus, isolate):
    """An import the function makes that fails (a dependency missing on this
    machine) means it cannot run here: SKIPPED with the error, as a target
    with no device is, and nothing stored. It was the target's error, shrunk
    and stored, and as a mutant's under prop_runner --mutants a kill: the
    gate passed on a mutant no invariant ever judged."""
    with pytest.raises(kprop.Skipped, match=r"ModuleNotFoundError: No module named 'kprop_test_no_such_module' "
                                            r"\(an import the function made failed: it cannot run here\)"):
        kprop.check("softmax_topk", needs_a_missing_module, seed=SEED, trials=20, corpus=corpus, isolate=isolate)
    assert not os.path.exists(corpus) or not any(files for _, _, files in os.walk(corpus))


def imports_a_missing_name(logits, k, **attrs):
    from numpy import kprop_test_no_such_name  # noqa: F401  (the code's error, on every machine)
    return _softmax.softmax_topk(logits, k, **attrs)


@pytest.mark.parametrize("isolate", [False, True])
def test_an_import_of_a_missing_name_is_the_codes_error(corpus, isolate):
    """An ImportError that is no missing module (a name the module lacks, a
    circular import) fails on every machine: the case's error, not a skip
    (a review: it read SKIPPED, exit 0, and a mutant with it was skipped)."""
    with pytest.raises(kprop.Counterexample, match="ImportError: cannot import name 'kprop_test_no_such_name'"):
        kprop.check("softmax_topk", imports_a_missing_name, seed=SEED, trials=20, corpus=corpus, isolate=isolate)


def reference_topk(logits, k, **attrs):
    assert logits.dtype.itemsize == 8, "the reference is called with float64 inputs"
    return _softmax.softmax_topk(logits, k, **attrs)


def test_isolated_target_and_reference_each_in_a_worker(corpus):
    result = kprop.check("softmax_topk", softmax_topk, reference=reference_topk, seed=SEED, trials=20,
                         corpus=corpus, isolate=True, invariants=["matches_reference"])
    assert result.passed and result.report["reference"].startswith("exec:")


def inflated_reference(logits, k, **attrs):
    out = _softmax.softmax_topk(logits, k, **attrs)
    return {"probs": out["probs"] * 1.5, "indices": out["indices"]}  # a wrong oracle: a correct target fails


def test_an_isolated_stored_case_replays_with_the_runs_flags(corpus):
    # The first run finds and stores the case; the second replays the stored
    # case first. Both print prop_runner's replay with the run's --reference
    # (the stored case's dropped it, and as printed it passed).
    replays = []
    for _ in range(2):
        with pytest.raises(kprop.Counterexample) as excinfo:
            kprop.check("softmax_topk", softmax_topk, reference=inflated_reference, seed=SEED, trials=20,
                        corpus=corpus, isolate=True, invariants=["matches_reference"])
        replays.append(excinfo.value.finding.replay)
    for replay in replays:
        assert _runs_prop_runner(replay) and " --reference " in replay and "inflated_reference" in replay
        assert "--invariant matches_reference" in replay


@kprop.invariant
def first_probability_below_half(target_probs):
    return bool((target_probs[..., 0] < 0.5).all())


def test_an_isolated_finding_of_an_extra_invariant_replays_in_python(corpus):
    # prop_runner does not know a Python invariant (--invariant NAME exits 2):
    # the replay is kprop.replay's, found fresh or stored.
    for _ in range(2):
        with pytest.raises(kprop.Counterexample) as excinfo:
            kprop.check("softmax_topk", softmax_topk, seed=SEED, trials=50, corpus=corpus, isolate=True,
                        extra_invariants=[first_probability_below_half],
                        invariants=["first_probability_below_half"])
        replay = excinfo.value.finding.replay
        assert replay.startswith("kprop.replay(") and "extra_invariants=[first_probability_below_half]" in replay


def test_an_isolated_finding_of_a_dict_spec_replays_in_python(corpus):
    # A dict spec is no file prop_runner --spec could open: its replay printed
    # `prop_runner --spec '<dict>' ...` (exit 2, "File does not exist"). It is
    # kprop.replay's, with isolate=True, and it runs as printed, found fresh
    # or stored.
    spec = {"spec": "topk_dict", "family": "softmax_topk", "invariants": ["matches_reference"]}
    for _ in range(2):
        with pytest.raises(kprop.Counterexample) as excinfo:
            kprop.check(spec, softmax_topk, reference=inflated_reference, seed=SEED, trials=20, corpus=corpus,
                        isolate=True)
        f = excinfo.value.finding
        assert f.replay.startswith("kprop.replay({") and "isolate=True" in f.replay, f.replay
        with pytest.raises(kprop.Counterexample) as again:
            eval(f.replay, {"kprop": kprop, "softmax_topk": softmax_topk, "inflated_reference": inflated_reference})
        assert again.value.finding.path == f.path and f.message in again.value.finding.message


def writes_its_input_in_place(logits, k, **attrs):
    """Computes right, then scribbles over its input through a raw pointer,
    as a C kernel would: NumPy's read-only flag does not stop that."""
    out = _softmax.softmax_topk(np.array(logits), k, **attrs)
    if logits.nbytes:
        ctypes.memset(logits.ctypes.data, 0x7F, logits.nbytes)
    return out


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_a_kernel_that_writes_its_input_through_a_pointer_fails(corpus, isolate):
    # It passed both ways: in process the reference then ran on the written
    # input, and in the worker the write was never looked for.
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", writes_its_input_in_place, seed=SEED, trials=20, corpus=corpus, isolate=isolate)
    finding = excinfo.value.finding
    assert finding.kind == "error", finding
    assert "the target wrote into its input 'logits' (first change at index [0, 0]: " in finding.message


RMSNORM = os.path.join(os.path.dirname(__file__), "..", "..", "specs", "ops", "rmsnorm.yaml")


def rmsnorm_in_float32(x, w, eps, **_):
    """A correct rmsnorm computing in float32, which insists on the bf16 form
    kprop promises (kprop.BFLOAT16 arrays, else uint16 bits) in every path."""
    want = np.dtype(np.uint16) if kprop.BFLOAT16 is None else kprop.BFLOAT16
    if x.dtype != want or w.dtype != want:
        raise TypeError("bf16 inputs arrived as %s, %s; kprop.BFLOAT16 says %s" % (x.dtype, w.dtype, want))
    xf, wf = kprop.as_float32(x), kprop.as_float32(w)
    return xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + np.float32(eps)) * wf


def rmsnorm_astype(x, w, eps, **_):
    """The same kernel written as a user with ml_dtypes would: x.astype(np.float32)."""
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    return xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + np.float32(eps)) * wf


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_bf16_inputs_arrive_alike_in_process_and_isolated(isolate):
    # In process they were uint16 bits while the worker handed ml_dtypes
    # bfloat16 arrays: one kernel passed isolated and failed in process.
    result = kprop.check(RMSNORM, rmsnorm_in_float32, seed=3, trials=40, corpus=None, isolate=isolate,
                         domain={"dtypes": ["bf16"]}, invariants=["matches_reference"])
    assert result.passed and result.checked == 40


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_bf16_astype_float32_passes_both_ways_with_ml_dtypes(isolate):
    pytest.importorskip("ml_dtypes")
    if kprop.BFLOAT16 is None:
        pytest.skip("ml_dtypes does not load with this NumPy")
    result = kprop.check(RMSNORM, rmsnorm_astype, seed=3, trials=40, corpus=None, isolate=isolate,
                         domain={"dtypes": ["bf16"]}, invariants=["matches_reference"])
    assert result.passed and result.checked == 40


def raises_on_wide_rows(logits, k, **attrs):
    if logits.shape[-1] > 2:
        raise ValueError("rows of %d logits are not handled" % logits.shape[-1])
    return _softmax.softmax_topk(logits, k, **attrs)


def test_an_isolated_error_prints_its_traceback_once(corpus, capfd):
    """The worker prints a failing function's traceback once per place it is
    raised: a shrink repeats the error at every step, its message naming the
    row's width (it printed one per message, one per width the shrink tried)."""
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", raises_on_wide_rows, seed=SEED, trials=50, corpus=corpus, isolate=True)
    assert "rows of 3 logits are not handled" in str(excinfo.value)  # shrunk to the narrowest failing row
    err = capfd.readouterr().err
    widths = {line for line in err.splitlines() if line.startswith("ValueError: rows of")}
    assert err.count("Traceback (most recent call last)") == 1, err
    assert len(widths) == 1, err
