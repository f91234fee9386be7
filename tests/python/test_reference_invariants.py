"""kprop.check(reference=fn), @kprop.invariant functions and profile=."""
import os

import numpy as np
import pytest

import kprop

SEED = 20261122


# -------------------------------------------------------------- reference=fn
def test_own_reference_passes_a_correct_kernel_and_is_called_in_f64(example, corpus):
    target = example("softmax_topk")
    oracle = example("softmax_topk")
    seen = set()

    def reference(logits, k, **attrs):
        seen.add(logits.dtype)
        return oracle.softmax_topk(logits, k, **attrs)

    result = kprop.check("softmax_topk", target.softmax_topk, reference=reference, seed=SEED, trials=80,
                         corpus=corpus)
    assert result.passed and result.checked > 0
    assert result.report["reference"].startswith("python-reference:")
    # Every floating-point input reaches the reference widened to float64 (exact), whatever the case's dtype.
    assert seen == {np.dtype(np.float64)}


def test_a_bug_is_caught_against_your_own_reference(example, corpus):
    buggy = example("attention_fwd")
    buggy.TOP_LEFT_CAUSAL = True
    oracle = example("attention_fwd")
    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("attention_fwd", buggy.attention_fwd, reference=oracle.attention_fwd, seed=SEED, trials=200,
                    invariants=["matches_reference"], corpus=corpus)
    f = excinfo.value.finding
    assert f.invariant == "matches_reference" and "causal" in f.case_yaml
    assert "reference=attention_fwd" in f.replay
    # The stored case replays with the same reference: still failing on the bug, passing on the fix.
    with pytest.raises(kprop.Counterexample):
        kprop.replay("attention_fwd", buggy.attention_fwd, f.path, reference=oracle.attention_fwd,
                     invariants=["matches_reference"])
    assert kprop.replay("attention_fwd", oracle.attention_fwd, f.path, reference=oracle.attention_fwd,
                        invariants=["matches_reference"]) == 1


def test_the_reference_is_really_used(example, corpus):
    # A correct kernel against a wrong reference fails: the verdict comes from the reference given.
    good = example("softmax_topk")
    wrong = example("softmax_topk")
    wrong.BUG = "unsorted_output"  # the top k in index order, not by logit

    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", good.softmax_topk, reference=wrong.softmax_topk, seed=SEED, trials=200,
                    invariants=["matches_reference"], corpus=corpus)
    assert excinfo.value.finding.invariant == "matches_reference"


def test_a_reference_that_raises_is_a_reported_failure(example, corpus):
    good = example("softmax_topk")

    def broken_reference(logits, k, **_):
        raise RuntimeError("reference broke")

    # The oracle's failure, said as such: not a counterexample of the target, nothing in the corpus.
    with pytest.raises(ValueError, match="the reference .*broken_reference' failed on a case.*reference broke") as e:
        kprop.check("softmax_topk", good.softmax_topk, reference=broken_reference, seed=SEED, trials=5,
                    corpus=corpus)
    assert not os.path.exists(os.path.join(corpus, "softmax_topk"))
    # The case is kept outside the corpus, and the call that re-runs it has
    # this run's reference= (the runner's own line left it out: it passed).
    message = str(e.value)
    path = message.split("; the case is in ", 1)[1].split(" (re-run it: ", 1)[0]
    assert os.path.isfile(path) and not path.startswith(os.path.join(corpus, "softmax_topk"))
    assert message.endswith("(re-run it: kprop.replay('softmax_topk', softmax_topk, %r, reference=broken_reference))"
                            % path), message
    with pytest.raises(ValueError, match="failed on a case.*reference broke"):
        kprop.replay("softmax_topk", good.softmax_topk, path, reference=broken_reference)


def test_a_reference_failing_on_a_stored_case_names_the_case(example, corpus):
    # A fresh case's reference failure says where the case is; one replayed
    # from the corpus said nothing of which stored case it was.
    good = example("softmax_topk")

    def scaled_reference(logits, k, **attrs):  # wrong but working: stores a case
        r = good.softmax_topk(logits.astype(np.float64), k, **attrs)
        return dict(r, probs=np.asarray(r["probs"]) * 1.5)

    def broken_reference(logits, k, **_):
        return None

    with pytest.raises(kprop.Counterexample) as stored:
        kprop.check("softmax_topk", good.softmax_topk, reference=scaled_reference, seed=1, trials=50,
                    invariants=["matches_reference"], corpus=corpus)
    path = stored.value.finding.path
    assert os.path.dirname(path) == os.path.join(corpus, "softmax_topk")
    with pytest.raises(ValueError, match="the reference .*broken_reference' failed on a case") as e:
        kprop.check("softmax_topk", good.softmax_topk, reference=broken_reference, seed=1, trials=50, corpus=corpus)
    assert str(e.value).endswith("; the case is in %s (re-run it: kprop.replay('softmax_topk', softmax_topk, %r, "
                                 "reference=broken_reference))" % (path, path)), str(e.value)
    with pytest.raises(ValueError) as e:  # kprop.replay of that one file says it too
        kprop.replay("softmax_topk", good.softmax_topk, path, reference=broken_reference)
    assert "; the case is in %s (re-run it: " % path in str(e.value)


def test_a_folder_of_another_spec_is_an_error_not_zero_replays(example, corpus):
    """A case found by an invariant the replaying spec lacks was left alone
    as another run's, even when the file is another spec's: kprop.replay of
    such a folder returned 0 (green in a test). prop_runner says the file is
    for another spec (or family), and so does it now."""
    good = example("softmax_topk")

    def first_small(target_probs):
        return target_probs.shape[-1] < 2

    with pytest.raises(kprop.Counterexample):
        kprop.check("softmax_topk", good.softmax_topk, seed=SEED, trials=50, corpus=corpus,
                    extra_invariants=[first_small], invariants=["first_small"])
    folder = os.path.join(corpus, "softmax_topk")
    assert os.listdir(folder)
    with pytest.raises(ValueError, match="corpus case is for family 'softmax_topk', the spec tests 'layernorm'"):
        kprop.replay("layernorm", good.softmax_topk, folder)


# ------------------------------------------------------------ @kprop.invariant
@kprop.invariant
def probs_in_unit_interval(target_probs):
    """every returned probability lies in [0, 1]"""
    return np.all((target_probs >= 0) & (target_probs <= 1))


@kprop.invariant
def indices_in_range(target_indices, V):
    assert np.all((target_indices >= 0) & (target_indices < V)), "an index outside [0, V)"


@kprop.invariant(name="top1_is_argmax", tensors={"idx": "target.indices"})
def _top1(idx, logits):
    kprop.assume(logits.shape[-1] > 1 and np.all(np.isfinite(logits)), "a row with -inf or one logit")
    best = logits.max(axis=-1)
    return logits[np.arange(len(idx)), idx[:, 0]] == best


def test_python_invariants_run_next_to_the_spec(example, corpus):
    mod = example("softmax_topk")
    extra = [probs_in_unit_interval, indices_in_range, _top1]
    result = kprop.check("softmax_topk", mod.softmax_topk, extra_invariants=extra, seed=SEED, trials=60,
                         corpus=corpus)
    names = [i.name for i in result.invariants]
    assert {"probs_in_unit_interval", "indices_in_range", "top1_is_argmax"} <= set(names)
    assert set(kprop.spec_info("softmax_topk")["invariants"]) <= set(names)  # the spec's own still run
    by_name = {i.name: i for i in result.invariants}
    assert by_name["probs_in_unit_interval"].passed >= 60
    assert by_name["top1_is_argmax"].discarded > 0  # assume() discards, never passes
    assert by_name["top1_is_argmax"].passed >= 60


def test_a_python_invariant_catches_a_bug_and_shrinks(example, corpus):
    mod = example("softmax_topk")
    mod.BUG = "unsorted_output"

    @kprop.invariant
    def sorted_descending(target_probs):
        return np.all(np.diff(target_probs, axis=-1) <= 0)

    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", mod.softmax_topk, extra_invariants=[sorted_descending],
                    invariants=["sorted_descending"], seed=SEED, trials=300, corpus=corpus)
    f = excinfo.value.finding
    assert f.invariant == "sorted_descending" and f.message == "sorted_descending returned False"
    assert f.size <= f.original_size and os.path.exists(f.path)
    assert "extra_invariants=[sorted_descending]" in f.replay


def test_a_false_element_is_shown_with_the_arguments_values_there(example, corpus):
    # An array answer's failure names the element and each argument's value
    # there (it named the element alone: the values took a debugger).
    mod = example("softmax_topk")
    mod.BUG = "probs_scaled"

    @kprop.invariant
    def probs_at_most_one(target_probs, target_indices, V):
        return target_probs <= 1

    with pytest.raises(kprop.Counterexample) as excinfo:
        kprop.check("softmax_topk", mod.softmax_topk, extra_invariants=[probs_at_most_one],
                    invariants=["probs_at_most_one"], seed=SEED, trials=300, corpus=corpus)
    f = excinfo.value.finding
    assert f.message.startswith("probs_at_most_one: 1 of 1 elements false, first at [0, 0]; there "
                                "target_probs = 1.5, target_indices = 0"), f.message
    assert "V =" not in f.message  # a scalar says nothing of the element


def test_an_invariant_that_raises_fails_with_its_error(example, corpus):
    mod = example("softmax_topk")

    @kprop.invariant
    def broken(target_probs):
        raise ZeroDivisionError("oops")

    with pytest.raises(kprop.Counterexample, match="broken raised ZeroDivisionError: oops"):
        kprop.check("softmax_topk", mod.softmax_topk, extra_invariants=[broken], invariants=["broken"], seed=SEED,
                    trials=5, corpus=corpus)


def test_an_invariant_that_discards_everything_is_not_a_pass(example, corpus):
    mod = example("softmax_topk")

    @kprop.invariant
    def never(target_probs):
        kprop.assume(False, "never")

    with pytest.raises(kprop.HealthCheckFailure, match="never") as excinfo:
        kprop.check("softmax_topk", mod.softmax_topk, extra_invariants=[never], invariants=["never"], seed=SEED,
                    trials=5, corpus=corpus)
    result = excinfo.value.result
    assert result.status == "gave_up" and result.invariants[0].status == "gave_up"
    assert result.invariants[0].passed == 0 and result.invariants[0].discard_reasons == {"never": 51}


def test_an_invariant_reading_no_target_output_is_refused(corpus):
    # An invariant of the inputs alone holds or breaks whatever the kernel
    # does (as a spec's expect: reading no target.* tensor, a load error).
    @kprop.invariant
    def logits_shape(logits, R, V):
        return logits.shape == (int(R), int(V))

    def raises(**_):
        raise RuntimeError("never called")

    with pytest.raises(ValueError, match=r"invariant logits_shape reads no output of the target \(target\.\*\)"):
        kprop.check("softmax_topk", raises, extra_invariants=[logits_shape], invariants=["logits_shape"],
                    seed=SEED, trials=20, corpus=corpus)


@pytest.mark.parametrize("answer", [[False], (False, "why"), "no", float("nan"), 0.0, np.float64(1.0)])
def test_an_invariant_answer_with_no_one_truth_value_is_never_a_pass(example, corpus, answer):
    good = example("softmax_topk")

    @kprop.invariant
    def odd_answer(target_probs):
        return answer

    with pytest.raises(kprop.Counterexample, match="must return True, False, None or an array of bools"):
        kprop.check("softmax_topk", good.softmax_topk, extra_invariants=[odd_answer], invariants=["odd_answer"],
                    seed=SEED, trials=5, corpus=corpus)


def test_an_empty_bool_array_is_a_discard_never_a_pass(example, corpus):
    # A slice past the end compares nothing: it passed every case, as an
    # expression's `compares no element on this case` is discarded.
    good = example("softmax_topk")

    @kprop.invariant
    def past_the_end(target_probs, K):
        return target_probs[..., int(K):] == 0

    with pytest.raises(kprop.HealthCheckFailure, match=r"past_the_end returned an empty array \(shape "
                                                       r"\(.*\)\): it judges nothing on this case") as excinfo:
        kprop.check("softmax_topk", good.softmax_topk, extra_invariants=[past_the_end],
                    invariants=["past_the_end"], seed=SEED, trials=10, corpus=corpus)
    (row,) = excinfo.value.result.invariants
    assert row.passed == 0 and row.discarded > 0


def test_assume_of_an_array_is_the_invariants_mistake_not_the_kernels(example, corpus):
    # bool(array) raised NumPy's "truth value ... is ambiguous" inside the
    # invariant: reported as the kernel's failure, shrunk and stored as a
    # counterexample of a correct kernel. It stops the run, stores nothing.
    good = example("softmax_topk")

    @kprop.invariant
    def assumes_an_array(target_probs):
        kprop.assume(target_probs > 0)
        return True

    with pytest.raises(TypeError, match=r"kprop.assume\(\) takes one truth value, not an array of \d+ "
                                        r"elements: write cond.all\(\) or cond.any\(\)"):
        kprop.check("softmax_topk", good.softmax_topk, extra_invariants=[assumes_an_array],
                    invariants=["assumes_an_array"], seed=SEED, trials=10, corpus=corpus)
    assert not os.path.exists(corpus)


def test_bad_invariant_declarations_are_clear_errors(example, corpus):
    mod = example("softmax_topk")

    @kprop.invariant
    def unknown(target_nothing):
        return True

    with pytest.raises(ValueError, match="parameter 'target_nothing' names no tensor of family softmax_topk"):
        kprop.check("softmax_topk", mod.softmax_topk, extra_invariants=[unknown], corpus=corpus)

    # A near miss is named, and the example is the family's own (it was target.o, an attention tensor).
    @kprop.invariant
    def misspelled(target_prob):
        return True

    with pytest.raises(ValueError) as excinfo:
        kprop.check("softmax_topk", mod.softmax_topk, extra_invariants=[misspelled], corpus=corpus)
    assert "(did you mean 'target_probs'?)" in str(excinfo.value)
    assert "target.o" not in str(excinfo.value)
    # So is a near miss among the spec's invariants.
    with pytest.raises(ValueError, match="spec softmax_topk has no invariant 'sortd' .*did you mean 'sorted'"):
        kprop.check("softmax_topk", mod.softmax_topk, invariants=["sortd"], corpus=corpus)

    @kprop.invariant(name="sorted")
    def clash(target_probs):
        return True

    with pytest.raises(ValueError, match="already one of spec softmax_topk's invariants"):
        kprop.check("softmax_topk", mod.softmax_topk, extra_invariants=[clash], corpus=corpus)

    with pytest.raises(TypeError, match="cannot name tensors"):
        @kprop.invariant
        def star(**tensors):
            return True


# ------------------------------------------------------------------- profile=
def test_profile_selects_the_specs_profile(example, corpus):
    info = kprop.spec_info("softmax_topk", profile="gpu")
    assert info["profile"] == "gpu" and "gpu" in info["profiles"]
    with pytest.raises(ValueError, match="profile"):
        kprop.spec_info("softmax_topk", profile="no_such_profile")
    with pytest.raises(ValueError, match="profile must name"):  # "" is no profile, not the base spec
        kprop.spec_info("softmax_topk", profile="")
    mod = example("softmax_topk")
    result = kprop.check("softmax_topk", mod.softmax_topk, profile="gpu", seed=SEED, trials=3, corpus=corpus)
    assert result.passed and result.largest_case > 0


def test_docs_attention_invariant_example(example, corpus):
    # docs/PYTHON.md's example, as written there.
    @kprop.invariant
    def lse_not_below_max_score(target_lse, reference_s):  # target.lse, reference.s
        """LSE >= the row's largest visible score"""
        kprop.assume(np.isfinite(target_lse).all(), "a fully masked row")
        m = reference_s.max(axis=-1)
        return np.all(target_lse >= m - 1e-4 * (1 + np.abs(m)))  # LSE is f32: a few ulps, far below 1e-4

    mod = example("attention_fwd")
    result = kprop.check("attention_fwd", mod.attention_fwd, extra_invariants=[lse_not_below_max_score], seed=SEED,
                         trials=60, invariants=["lse_not_below_max_score"], corpus=corpus)
    assert result.passed and result.invariants[0].passed >= 60
