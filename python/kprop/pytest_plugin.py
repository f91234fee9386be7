"""pytest plugin of kprop (entry point pytest11): @kprop.spec tests.

    @kprop.spec("attention_fwd", seed=1)
    def test_attention(q, k, v, scale, mask, key_lengths=None, allowed=None, **_):
        return my_attention(q, k, v, scale, mask, key_lengths, allowed)

collects one item per invariant of the spec, `test_attention[matches_reference]`,
..., so -k, -x and markers select them; every stored counterexample under
the corpus folder (--kprop-corpus, default .kprop/ in the rootdir) for that
spec comes first as its own item, `test_attention[stored:<file>]`, as
Hypothesis replays its database. A failure renders the shrunk case; a run
whose every case is declined is skipped; JUnit comes from --junitxml.
"""

import glob
import inspect
import os

import pytest

from . import _check


def pytest_addoption(parser):
    group = parser.getgroup("kprop", "kprop property tests (@kprop.spec)")
    group.addoption("--kprop-seed", type=int, default=None,
                    help="seed of every @kprop.spec run (overrides the decorator and the spec; 0: a fresh one)")
    group.addoption("--kprop-trials", type=int, default=None, help="cases per invariant (overrides the spec)")
    group.addoption("--kprop-time", type=float, default=None, help="time budget per item in seconds")
    group.addoption("--kprop-profile", default=None,
                    help="the specs' profile (their `profiles:`; overrides the decorator's profile=)")
    group.addoption("--kprop-corpus", default=None,
                    help="folder of stored counterexamples, replayed first (default: .kprop/ in the rootdir)")
    group.addoption("--kprop-no-corpus", action="store_true",
                    help="neither replay nor store counterexamples")
    group.addoption("--kprop-show-statistics", action="store_true",
                    help="after the run, each kprop item's statistics: cases drawn, checked, declined (with "
                         "reasons), discarded, sizes reached, time (as --hypothesis-show-statistics)")


_STATS = pytest.StashKey[list]()


def pytest_configure(config):
    config.addinivalue_line("markers", "kprop: a kprop property item (added by @kprop.spec)")
    config.stash[_STATS] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not config.getoption("kprop_show_statistics"):
        return
    terminalreporter.write_sep("=", "kprop statistics")
    for nodeid, result in config.stash[_STATS]:
        terminalreporter.write_line("%s:" % nodeid)
        terminalreporter.write_line("  " + result.summary().replace("\n", "\n  "))


def _corpus(config, options=None):
    """The corpus an item stores into and replays from: none with
    --kprop-no-corpus, else --kprop-corpus, else the decorator's corpus=,
    else .kprop/ in the rootdir. One answer for both, so what is stored is
    what the next session replays."""
    if config.getoption("kprop_no_corpus"):
        return None
    given = config.getoption("kprop_corpus")
    if given is not None:
        return given
    if options and "corpus" in options:
        return options["corpus"]
    return str(config.rootpath / ".kprop")


def pytest_report_header(config):
    seed = config.getoption("kprop_seed")
    profile = config.getoption("kprop_profile")
    return "kprop: corpus %s%s%s" % (_corpus(config) or "(none)", "" if seed is None else ", seed %d" % seed,
                                     "" if profile is None else ", profile %s" % profile)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector, name, obj):
    marked = getattr(obj, "_kprop_spec", None)
    if marked is None or not inspect.isfunction(obj) or not collector.funcnamefilter(name):
        return None
    spec, options = marked
    options = dict(options)
    method = isinstance(collector, pytest.Class)
    if method and options.get("isolate"):
        raise collector.CollectError("kprop: %s: isolate=True runs the target in a worker process, which imports "
                                     "it: make it a module-level function, not a method" % name)
    profile = collector.config.getoption("kprop_profile")
    if profile is not None:
        options["profile"] = profile
    try:
        info = _check.spec_info(spec, options.get("profile"))
        extra = [name for name, _, _, _ in _check._extra_invariants(options.get("extra_invariants"), info)]
    except Exception as e:
        raise collector.CollectError("kprop: %s: %s" % (name, e))
    known = info["invariants"] + extra
    invariants = options.pop("invariants", None) or known
    if isinstance(invariants, str):
        invariants = [invariants]  # one name, not its letters
    unknown = [i for i in invariants if i not in known]
    if unknown:
        raise collector.CollectError("kprop: %s: spec %s has no invariant %s (it has: %s)"
                                     % (name, info["name"], ", ".join(unknown), ", ".join(known)))
    items = []
    corpus = _corpus(collector.config, options)
    if corpus is not None:
        for path in sorted(glob.glob(os.path.join(corpus, info["name"], "*.yaml"))):
            items.append(KpropItem.from_parent(collector, name="%s[stored:%s]" % (name, os.path.basename(path)),
                                               fn=obj, spec=spec, options=options, invariants=invariants,
                                               stored=path))
    for invariant in invariants:
        items.append(KpropItem.from_parent(collector, name="%s[%s]" % (name, invariant), fn=obj, spec=spec,
                                           options=options, invariants=[invariant], stored=None))
    for item in items:
        item.add_marker("kprop")
        item.own_markers.extend(getattr(obj, "pytestmark", []))  # -m, skip and xfail marks
    return items


class KpropItem(pytest.Item):
    def __init__(self, *, fn, spec, options, invariants, stored, **kwargs):
        super().__init__(**kwargs)
        self.fn = fn
        self.spec = spec
        self.options = options
        self.invariants = invariants
        self.stored = stored

    def _target(self):
        # A method of a test class: bound to a fresh instance, as pytest does.
        if isinstance(self.parent, pytest.Class):
            return self.fn.__get__(self.parent.newinstance())
        return self.fn

    def runtest(self):
        config = self.config
        options = dict(self.options)
        fn = self._target()
        if self.stored is not None:
            options = {k: v for k, v in options.items()
                       if k in ("isolate", "tensors", "device", "case_timeout", "reference", "extra_invariants",
                                "profile", "domain")}
            checked = _check.replay(self.spec, fn, self.stored, invariants=self.invariants, **options)
            if checked == 0:
                pytest.skip("kprop: the stored case %s was not checked (declined by the target, or no invariant "
                            "could check it)" % self.stored)
            return
        for flag, key in (("kprop_seed", "seed"), ("kprop_trials", "trials"), ("kprop_time", "time")):
            if config.getoption(flag) is not None:
                options[key] = config.getoption(flag)
        options["corpus"] = _corpus(config, self.options)
        options["replay_stored"] = False  # the stored cases are items of their own
        try:
            result = _check.check(self.spec, fn, invariants=self.invariants, **options)
        except (_check.Counterexample, _check.HealthCheckFailure, _check.Skipped) as e:
            if getattr(e, "result", None) is not None:
                config.stash[_STATS].append((self.nodeid, e.result))
            raise
        config.stash[_STATS].append((self.nodeid, result))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (_check.Counterexample, _check.HealthCheckFailure)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        code = getattr(self.fn, "__code__", None)
        return self.path, (code.co_firstlineno - 1 if code else None), self.name
