"""The pytest plugin (@kprop.spec), through pytester."""
import os
import xml.etree.ElementTree as ET

import pytest

from conftest import EXAMPLES, REPO

HEADER = """
import importlib.util
import kprop

def load(tag, bug=None):
    spec = importlib.util.spec_from_file_location("ex_" + tag, {path!r})
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.BUG = bug
    return module

good = load("good")
bad = load("bad", "unsorted_output")
""".format(path=os.path.join(EXAMPLES, "softmax_topk.py"))

TESTS = HEADER + """
@kprop.spec("softmax_topk", seed=20261122, trials=30)
def test_good(logits, k, **attrs):
    return good.softmax_topk(logits, k, **attrs)

@kprop.spec("softmax_topk", seed=20261122, trials=300, invariants=["sorted"])
def test_bad(logits, k, **attrs):
    return bad.softmax_topk(logits, k, **attrs)

@kprop.spec("softmax_topk", seed=20261122, trials=10, invariants=["no_nan"])
def test_declines(logits, k, **attrs):
    raise kprop.Unsupported("not here")

@kprop.spec("softmax_topk")
def helper_not_a_test(logits, k, **attrs):
    raise AssertionError("never collected: not named test_*")
"""

def _count_invariants(path):
    """Entries of the spec's `invariants:` list (one pytest item each)."""
    count, inside = 0, False
    with open(path) as f:
        for line in f:
            if line.startswith("invariants:"):
                inside = True
            elif inside and line.startswith("  - "):
                count += 1
            elif inside and line.strip() and not line.startswith(" "):
                break
    return count


N_INVARIANTS = _count_invariants(os.path.join(os.path.dirname(__file__), "..", "..", "specs", "softmax_topk.yaml"))


def test_one_item_per_invariant_failures_render_the_shrunk_case(pytester, tmp_path):
    pytester.makepyfile(test_sm=TESTS)
    corpus = tmp_path / "corpus"
    junit = tmp_path / "out.xml"
    result = pytester.runpytest("--kprop-corpus", str(corpus), "--junitxml", str(junit), "-v")
    result.assert_outcomes(passed=N_INVARIANTS, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*test_good?matches_reference? PASSED*", "*test_bad?sorted? FAILED*",
                                 "*test_declines?no_nan? SKIPPED*"])
    result.stdout.fnmatch_lines(["*invariant sorted failed*", "*shrunk case*", "*replay: kprop.replay*"])
    assert "helper_not_a_test" not in result.stdout.str()
    # JUnit through pytest's own --junitxml, the failure with its case.
    failures = [tc for tc in ET.parse(junit).getroot().iter("testcase") if tc.find("failure") is not None]
    assert [tc.get("name") for tc in failures] == ["test_bad[sorted]"]
    assert "shrunk case" in failures[0].find("failure").text
    stored = os.listdir(corpus / "softmax_topk")
    assert len(stored) == 1

    # Next run: the stored counterexample replays first, as its own item for each spec test.
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-v", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*test_good?stored:%s? PASSED*" % stored[0],
                                 "*test_bad?stored:%s? FAILED*" % stored[0]])
    # test_bad fails twice (stored + sorted); test_declines checks no_nan only, so the case sorted found
    # is no item of its (it was one, skipped as "declined by the target, or no invariant could check it").
    result.assert_outcomes(passed=N_INVARIANTS + 1, failed=2, skipped=1)
    assert "test_declines[stored:" not in result.stdout.str()


def test_a_skip_is_reported_at_the_test(pytester):
    # pytest -rs named the line of kprop that raised the skip (_check.py:1373).
    pytester.makepyfile(test_sm=TESTS)
    result = pytester.runpytest("--kprop-no-corpus", "-rs", "-k", "test_declines")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_sm.py:*"])
    assert "_check.py" not in result.stdout.str()


def test_show_statistics(pytester):
    pytester.makepyfile(test_sm=TESTS)
    result = pytester.runpytest("--kprop-no-corpus", "-k", "test_good and (sorted or no_nan) and not expr",
                                "--kprop-show-statistics")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*= kprop statistics =*", "test_sm.py::test_good?sorted?:",
                                 "*softmax_topk: passed on python:test_good, seed 20261122: * cases drawn, * checked*",
                                 "*sorted * passed*", "test_sm.py::test_good?no_nan?:"])


def test_k_selects_invariants_and_options_override(pytester, tmp_path):
    pytester.makepyfile(test_sm=TESTS)
    result = pytester.runpytest("--kprop-no-corpus", "-k", "test_good and sorted and not expr", "--kprop-trials", "5",
                                "--kprop-seed", "7", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*kprop: corpus (none), seed 7*", "*test_good?sorted? PASSED*"])


def test_a_trial_count_out_of_range_is_a_usage_error(pytester):
    # It failed every item at run time instead (never green, but no usage error).
    pytester.makepyfile(test_sm=TESTS)
    result = pytester.runpytest("--kprop-no-corpus", "--kprop-trials", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--kprop-trials*must be in [[]1, 10**9], got 0*"])
    # So are a seed and a time budget out of range.
    for flag, value, words in (("--kprop-seed", "-1", "must be in [[]0, *], got -1"),
                               ("--kprop-time", "-5", "must be a finite number of seconds, 0 or more, got -5"),
                               ("--kprop-time", "nan", "must be a finite number of seconds, 0 or more, got nan"),
                               # Not numbers: argparse named the parser ("invalid _trials value").
                               ("--kprop-trials", "abc", "must be an integer number of cases, got 'abc'"),
                               ("--kprop-seed", "x1", "must be an integer seed, got 'x1'"),
                               ("--kprop-time", "soon", "must be a number of seconds, got 'soon'")):
        result = pytester.runpytest("--kprop-no-corpus", flag, value)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, (flag, value)
        result.stderr.fnmatch_lines(["*%s*%s*" % (flag, words)])


def test_x_stops_at_the_first_failure(pytester, tmp_path):
    pytester.makepyfile(test_sm=TESTS)
    result = pytester.runpytest("--kprop-no-corpus", "-x", "-k", "test_bad")
    result.assert_outcomes(failed=1)


def test_markers_reach_the_items(pytester):
    pytester.makepyfile(test_sm=HEADER + """
import pytest

@pytest.mark.slow
@kprop.spec("softmax_topk", seed=1, trials=5)
def test_marked(logits, k, **attrs):
    return good.softmax_topk(logits, k, **attrs)
""")
    pytester.makeini("[pytest]\nmarkers = slow\n")
    result = pytester.runpytest("--kprop-no-corpus", "-m", "not slow")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result = pytester.runpytest("--kprop-no-corpus", "-m", "slow")
    result.assert_outcomes(passed=N_INVARIANTS)


# A decorator that names no spec, or an option the decorator does not take,
# fails collection with the reason.
@pytest.mark.parametrize("arguments, reason", [
    ('"no_such_spec"', "*no spec file 'no_such_spec'*looked for beside the test module*under pytest's rootdir*"),
    ('"softmax_topk", invariants=["sortd"]', "*spec softmax_topk has no invariant sortd (did you mean 'sorted'?)*"),
    ('"softmax_topk", trails=5', "*unknown option 'trails' (did you mean 'trials'?)*"),
    ('"softmax_topk", invariants=[]', "*invariants=[[]] names no invariant to check*"),  # it meant every one
    # Settings kprop.check refuses before it runs: each item failed with a
    # traceback of some 800 lines, one item per invariant.
    ('"softmax_topk", domain={"vocab": [100, 10]}', "*test_x: domain=: 'vocab' is an inverted range*"),
    ('"softmax_topk", case_timeout=1', "*test_x: case_timeout needs isolate=True*"),
    ('"softmax_topk", trials=0', "*test_x: trials must be in [[]1, 10**9[]]*"),
], ids=["unknown_spec", "unknown_invariant", "unknown_option", "no_invariants", "bad_domain", "timeout_in_process",
        "no_trials"])
def test_a_bad_decorator_is_a_collection_error(pytester, arguments, reason):
    pytester.makepyfile(test_sm="""
import kprop

@kprop.spec(%s)
def test_x(**_):
    pass
""" % arguments)
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([reason])


def test_generators_of_invariants_and_extra_invariants_are_read_once(pytester):
    # A generator of names made no items (the unknown-name check read it);
    # one of functions was read by collection and ran nothing.
    pytester.makepyfile(test_sm=HEADER + """
import numpy as np

@kprop.invariant
def probs_nonnegative(target_probs):
    return np.all(target_probs >= 0)

@kprop.spec("softmax_topk", seed=1, trials=5, invariants=(n for n in ["sorted", "probs_nonnegative"]),
            extra_invariants=(f for f in [probs_nonnegative]))
def test_x(logits, k, **attrs):
    return good.softmax_topk(logits, k, **attrs)
""")
    result = pytester.runpytest("--kprop-no-corpus", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_x?sorted? PASSED*", "*test_x?probs_nonnegative? PASSED*"])


def test_extra_invariants_are_items_and_the_profile_option(pytester):
    pytester.makepyfile(test_sm=HEADER + """
import numpy as np

@kprop.invariant
def probs_nonnegative(target_probs):
    return np.all(target_probs >= 0)

@kprop.spec("softmax_topk", seed=1, trials=5, invariants=["sorted", "probs_nonnegative"],
            extra_invariants=[probs_nonnegative], reference=good.softmax_topk)
def test_x(logits, k, **attrs):
    return good.softmax_topk(logits, k, **attrs)
""")
    result = pytester.runpytest("--kprop-no-corpus", "--kprop-profile", "gpu", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*kprop: corpus (none), profile gpu*", "*test_x?sorted? PASSED*",
                                 "*test_x?probs_nonnegative? PASSED*"])
    result = pytester.runpytest("--kprop-no-corpus", "--kprop-profile", "no_such_profile")
    result.assert_outcomes(failed=1)  # the test's item fails (it cannot run as asked), never passes
    result.stdout.fnmatch_lines(["*test_x?profile:no_such_profile?*", "*unknown profile 'no_such_profile'*"])


def test_a_spec_without_the_profile_fails_its_test_only(pytester):
    # --kprop-profile gpu with -k or a node id, in a module where another
    # test's spec has no profile gpu: the whole module failed to collect
    # ("unknown profile 'gpu' for spec rmsnorm"), the selected test never ran.
    pytester.makepyfile(test_mixed=HEADER + """
@kprop.spec({rmsnorm!r}, invariants=["matches_reference"])
def test_rms(x, w, eps, **_):
    raise AssertionError("never run: spec rmsnorm has no profile gpu")

@kprop.spec("softmax_topk", seed=1, trials=5, invariants=["sorted"])
def test_sm(logits, k, **attrs):
    return good.softmax_topk(logits, k, **attrs)
""".format(rmsnorm=os.path.join(REPO, "specs", "ops", "rmsnorm.yaml")))
    for selection in (["-k", "test_sm"], ["test_mixed.py::test_sm[sorted]"]):
        result = pytester.runpytest("--kprop-no-corpus", "--kprop-profile", "gpu", "-v", *selection)
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["*test_sm?sorted? PASSED*"])
    result = pytester.runpytest("--kprop-no-corpus", "--kprop-profile", "gpu", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_rms?profile:gpu? FAILED*",
                                 "*kprop: test_rms: --kprop-profile gpu: *unknown profile 'gpu' for spec rmsnorm*"])


def test_methods_options_and_the_decorators_corpus(pytester, tmp_path):
    # A method of a test class is bound to an instance; invariants= may be one
    # name; the decorator's corpus= is where cases are stored and replayed from.
    corpus = tmp_path / "mine"
    pytester.makepyfile(test_sm=HEADER + """
class TestKernel:
    @kprop.spec("softmax_topk", seed=20261122, trials=300, invariants="sorted", corpus=%r)
    def test_bad(self, logits, k, **attrs):
        assert isinstance(self, TestKernel)
        return bad.softmax_topk(logits, k, **attrs)
""" % str(corpus))
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TestKernel::test_bad?sorted? FAILED*", "*invariant sorted failed*"])
    stored = os.listdir(corpus / "softmax_topk")
    assert len(stored) == 1
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*TestKernel::test_bad?stored:%s? FAILED*" % stored[0]])
    # --kprop-no-corpus wins over the decorator: nothing replayed, nothing stored.
    result = pytester.runpytest("-v", "-p", "no:cacheprovider", "--kprop-no-corpus")
    result.assert_outcomes(failed=1)
    assert os.listdir(corpus / "softmax_topk") == stored


def test_parametrize_makes_one_set_of_items_per_variant(pytester):
    # Each variant's items call the target with its arguments bound; ids,
    # pytest.param's id and marks, and stacked marks as pytest makes them.
    pytester.makepyfile(test_sm=HEADER + """
import pytest

@pytest.mark.parametrize("impl", [good, pytest.param(bad, id="buggy")])
@pytest.mark.parametrize("scale", [1.0, pytest.param(2.0, marks=pytest.mark.skip("not this one"))])
@kprop.spec("softmax_topk", seed=20261122, trials=300, invariants=["sorted"])
def test_x(logits, k, impl, scale, **attrs):
    assert scale == 1.0
    return impl.softmax_topk(logits, k, **attrs)
""")
    result = pytester.runpytest("--kprop-no-corpus", "-v")
    result.assert_outcomes(passed=1, failed=1, skipped=2)
    result.stdout.fnmatch_lines(["*test_x?sorted-1.0-impl0? PASSED*", "*test_x?sorted-1.0-buggy? FAILED*",
                                 "*invariant sorted failed on python:functools.partial(test_x, scale=1.0, impl=ex_bad)*"])


def test_parametrize_errors_are_collection_errors(pytester):
    # A name the function lacks, or indirect=, is said at collection: the
    # target is never called without its argument (it was, and the TypeError
    # was shrunk and stored as the kernel's counterexample).
    for decorator, said in (('@pytest.mark.parametrize("nope", [1])', "the function has no argument 'nope'"),
                            ('@pytest.mark.parametrize("impl", [1], indirect=True)', "indirect=")):
        pytester.makepyfile(test_sm="""
import kprop, pytest

%s
@kprop.spec("softmax_topk")
def test_x(logits, k, impl=None, **attrs):
    pass
""" % decorator)
        result = pytester.runpytest("--kprop-no-corpus")
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["*kprop: test_x: *%s*" % said])


def test_a_decorator_without_its_spec_is_said(pytester):
    pytester.makepyfile(test_sm="""
import kprop

@kprop.spec
def test_x(**_):
    pass
""")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(['*kprop.spec: name the spec, as @kprop.spec("attention_fwd")*'])


def test_fixtures_are_refused_never_a_counterexample(pytester, tmp_path):
    # A kprop item runs no pytest fixture. usefixtures is a collection error;
    # an autouse fixture that would not run is warned of; a fixture argument
    # (or a parametrize name the op also passes) stops the run with
    # ArgumentMismatch, and nothing is stored (the TypeError of the call was
    # shrunk and stored as the kernel's counterexample).
    corpus = tmp_path / "corpus"
    pytester.makeconftest("""
import pytest

@pytest.fixture(autouse=True)
def seeded():
    yield
""")
    pytester.makepyfile(test_sm=HEADER + """
import pytest

@pytest.fixture
def scale():
    return 2.0

@kprop.spec("softmax_topk", seed=1, trials=10, invariants=["sorted"])
def test_fixture_arg(logits, k, scale, **attrs):
    return good.softmax_topk(logits, k, **attrs)

@pytest.mark.parametrize("k", [1, 2])
@kprop.spec("softmax_topk", seed=1, trials=10, invariants=["sorted"])
def test_clash(logits, k, **attrs):
    return good.softmax_topk(logits, k, **attrs)
""")
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-p", "no:cacheprovider")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines([
        "*the target test_fixture_arg cannot take the arguments of op softmax_topk: missing a required "
        "argument: 'scale'*",
        "*@pytest.mark.parametrize names 'k', which the spec's op also passes to test_clash*",
        "*autouse fixture(s) seeded do not run for @kprop.spec items*"])
    assert not corpus.exists() or not any(corpus.rglob("*.yaml"))
    pytester.makepyfile(test_sm=HEADER + """
import pytest

@pytest.fixture
def setup():
    pass

@pytest.mark.usefixtures("setup")
@kprop.spec("softmax_topk", seed=1, trials=10, invariants=["sorted"])
def test_x(logits, k, **attrs):
    return good.softmax_topk(logits, k, **attrs)
""")
    result = pytester.runpytest("--kprop-no-corpus")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*kprop: test_x: @pytest.mark.usefixtures does not apply to @kprop.spec*"])


def test_a_relative_spec_path_is_the_test_files_or_the_rootdirs(pytester, monkeypatch):
    # Whatever folder pytest runs from: beside the test module first, then
    # under the rootdir (it was the current folder's).
    spec = open(os.path.join(os.path.dirname(__file__), "..", "..", "specs", "softmax_topk.yaml")).read()
    pytester.mkdir("specs")
    pytester.path.joinpath("specs", "mine.yaml").write_text(spec.replace("spec: softmax_topk", "spec: mine"))
    tests = pytester.mkdir("tests")
    tests.joinpath("beside.yaml").write_text(spec.replace("spec: softmax_topk", "spec: beside"))
    tests.joinpath("test_rel.py").write_text(HEADER + """
@kprop.spec("specs/mine.yaml", seed=1, trials=5, invariants=["sorted"])
def test_rootdir(logits, k, **attrs):
    return good.softmax_topk(logits, k, **attrs)

@kprop.spec("beside.yaml", seed=1, trials=5, invariants=["sorted"])
def test_beside(logits, k, **attrs):
    return good.softmax_topk(logits, k, **attrs)
""")
    pytester.makeini("[pytest]\n")
    monkeypatch.chdir(tests)
    result = pytester.runpytest("--kprop-no-corpus", "--rootdir", str(pytester.path))
    result.assert_outcomes(passed=2)



def test_a_parametrized_items_replay_runs_as_printed(pytester):
    # Parametrize values print as source that names them where the test
    # function is in scope: np.float32 as numpy.float32 (imported), inf as
    # float('inf'), a NumPy scalar through its type. (They printed as
    # `dt=float32` and `dt=inf`: NameErrors.)
    pytester.makepyfile(test_sm=HEADER + """
import numpy as np
import pytest

@pytest.mark.parametrize("dt", [np.float32, float("inf"), np.float64(-np.inf)])
@kprop.spec("softmax_topk", seed=20261122, trials=300, invariants=["sorted"])
def test_x(logits, k, dt, **attrs):
    return bad.softmax_topk(logits, k, **attrs)
""")
    result = pytester.runpytest("--kprop-no-corpus", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=3)
    # (A set: under CI=true pytest's short summary repeats each message whole.)
    replays = sorted({line[len("replay: "):] for line in result.stdout.lines if line.startswith("replay: ")})
    shown = sorted(line.split("functools.partial(test_x, ")[1].split("), ")[0] for line in replays)
    assert shown == ["dt=float('inf')", "dt=numpy.float32", "dt=numpy.float64(float('-inf'))"], replays
    for line in replays:
        run = pytester.runpython_c("from test_sm import *\n" + line)
        assert "a stored counterexample fails again" in run.stderr.str(), (line, run.stderr.str())


def test_a_stored_case_outside_the_tests_domain_is_skipped_not_replayed(pytester, tmp_path):
    # test_wide (every dtype) stores a half-dtype case its kernel fails; the
    # f32-only test, narrowed with domain= as docs/PYTHON.md recommends, gets a
    # stored item for it that is skipped, saying why (it failed: the kernel
    # was handed a dtype outside its domain), never passed.
    pytester.makepyfile(test_dom=HEADER + """
import numpy as np

@kprop.spec("softmax_topk", seed=20261122, trials=50, invariants=["sorted"])
def test_wide(logits, k, **attrs):
    if logits.dtype != np.float32:
        raise RuntimeError("no half kernel")
    return good.softmax_topk(logits, k, **attrs)

@kprop.spec("softmax_topk", seed=20261122, trials=20, invariants=["sorted"], domain={"dtypes": ["f32"]})
def test_f32(logits, k, **attrs):
    if logits.dtype != np.float32:
        raise TypeError("f32 kernel called with %s" % logits.dtype)
    return good.softmax_topk(logits, k, **attrs)
""")
    corpus = tmp_path / "corpus"
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    (stored,) = os.listdir(corpus / "softmax_topk")
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-p", "no:cacheprovider", "-v", "-rs")
    result.stdout.fnmatch_lines(["*test_f32?stored:%s? SKIPPED*" % stored, "*test_f32?sorted? PASSED*"])
    assert "lies outside this test's domain (domain={'dtypes': ['f32']}), so it is not replayed here: " \
           "dtypes = " in result.stdout.str()
    assert "f32 kernel called with" not in result.stdout.str()


def test_a_failing_test_replays_its_stored_case_instead_of_storing_new_ones(pytester, tmp_path):
    # The invariant item drew fresh cases (its stored cases are items of
    # their own), found the same bug again, shrank it to a slightly different
    # case and stored another file: every run of a failing test grew the
    # corpus. Now the stored case that fails again fails the item, as
    # kprop.check's replay does, and nothing new is drawn or stored.
    pytester.makepyfile(test_grow=HEADER + """
@kprop.spec("softmax_topk", trials=300, invariants=["sorted"])
def test_bad(logits, k, **attrs):
    return bad.softmax_topk(logits, k, **attrs)
""")
    corpus = tmp_path / "corpus"
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-p", "no:cacheprovider", "--kprop-seed", "11")
    result.assert_outcomes(failed=1)
    (stored,) = os.listdir(corpus / "softmax_topk")
    for seed in ("12", "13", "14"):  # fresh seeds: a fresh search would shrink to other cases
        result = pytester.runpytest("--kprop-corpus", str(corpus), "-p", "no:cacheprovider", "--kprop-seed", seed,
                                    "-v")
        result.assert_outcomes(failed=2)
        result.stdout.fnmatch_lines(["*test_bad?stored:%s? FAILED*" % stored, "*test_bad?sorted? FAILED*"])
        result.stdout.fnmatch_lines(["*_ test_bad?sorted? _*", "*a stored counterexample fails again*",
                                     "saved: *%s" % stored])
        assert os.listdir(corpus / "softmax_topk") == [stored]
    # The invariant item selected alone replays it too (no stored item ran before it).
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-p", "no:cacheprovider", "--kprop-seed", "15",
                                "test_grow.py::test_bad[sorted]")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*a stored counterexample fails again*"])
    assert os.listdir(corpus / "softmax_topk") == [stored]
    # A fixed kernel passes: the stored item and the invariant item (which need not replay it again).
    pytester.makepyfile(test_grow=HEADER + """
@kprop.spec("softmax_topk", trials=30, invariants=["sorted"])
def test_bad(logits, k, **attrs):
    return good.softmax_topk(logits, k, **attrs)
""")
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=2)


def test_the_printed_replay_of_a_test_method_runs_as_printed(pytester, tmp_path):
    # It printed kprop.replay('softmax_topk', test_m, ...): test_m is no name
    # where the test class is in scope (a NameError). A method of a test
    # class is bound to a fresh instance, as pytest does: TestK().test_m;
    # a parametrized one is a functools.partial of that.
    pytester.makepyfile(test_cls=HEADER + """
import pytest

class TestK:
    @kprop.spec("softmax_topk", seed=20261122, trials=300, invariants=["sorted"])
    def test_m(self, logits, k, **attrs):
        return bad.softmax_topk(logits, k, **attrs)

    @pytest.mark.parametrize("impl", ["bad"])
    @kprop.spec("softmax_topk", seed=20261122, trials=300, invariants=["sorted"])
    def test_p(self, logits, k, impl, **attrs):
        return globals()[impl].softmax_topk(logits, k, **attrs)
""")
    corpus = tmp_path / "corpus"
    result = pytester.runpytest("--kprop-corpus", str(corpus), "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    # (Under CI=true pytest's short summary repeats each message whole: once each here.)
    replays = list(dict.fromkeys(line[len("replay: "):] for line in result.outlines if line.startswith("replay: ")))
    assert len(replays) == 2
    assert replays[0].startswith("kprop.replay('softmax_topk', TestK().test_m, ")
    assert replays[1].startswith("import functools; kprop.replay('softmax_topk', "
                                 "functools.partial(TestK().test_p, impl='bad'), ")
    # Each runs as printed where the test class is in scope, and fails again.
    import importlib.util
    import kprop
    module_spec = importlib.util.spec_from_file_location("printed_replay_cls", str(pytester.path / "test_cls.py"))
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    for line in replays:
        with pytest.raises(kprop.Counterexample, match="a stored counterexample fails again"):
            exec(line, vars(module))


def test_spec_tests_that_are_static_or_class_methods_are_collected(pytester, tmp_path):
    # @kprop.spec above @staticmethod (or below it, or on a classmethod) was
    # left to pytest, which asked for the op's arguments as fixtures
    # ("fixture 'logits' not found"). The function is the test either way.
    pytester.makepyfile(test_static=HEADER + """
import pytest

class TestK:
    @kprop.spec("softmax_topk", seed=20261122, trials=30, invariants=["sorted"])
    @staticmethod
    def test_above(logits, k, **attrs):
        return good.softmax_topk(logits, k, **attrs)

    @staticmethod
    @kprop.spec("softmax_topk", seed=20261122, trials=30, invariants=["sorted"])
    def test_below(logits, k, **attrs):
        return good.softmax_topk(logits, k, **attrs)

    @pytest.mark.parametrize("impl", ["bad"])
    @kprop.spec("softmax_topk", seed=20261122, trials=300, invariants=["sorted"])
    @classmethod
    def test_cls(cls, logits, k, impl, **attrs):
        assert cls is TestK
        return globals()[impl].softmax_topk(logits, k, **attrs)
""")
    result = pytester.runpytest("--kprop-corpus", str(tmp_path / "corpus"), "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*TestK::test_above?sorted? PASSED*", "*TestK::test_below?sorted? PASSED*",
                                 "*TestK::test_cls?sorted-bad? FAILED*",
                                 "*replay: import functools; kprop.replay('softmax_topk', "
                                 "functools.partial(TestK.test_cls, impl='bad'), *"])
    assert "fixture 'logits' not found" not in result.stdout.str()
