"""pytest plugin of kprop (entry point pytest11): @kprop.spec tests.

    @kprop.spec("attention_fwd", seed=1)
    def test_attention(q, k, v, scale, mask, key_lengths=None, allowed=None, **_):
        return my_attention(q, k, v, scale, mask, key_lengths, allowed)

collects one item per invariant of the spec, `test_attention[matches_reference]`,
..., so -k, -x and markers select them; every stored counterexample under
the corpus folder (--kprop-corpus, default .kprop/ in the rootdir) for that
spec comes first as its own item, `test_attention[stored:<file>]`, as
Hypothesis replays its database (none with replay_stored=False; a case found
by an invariant the test does not check, such as another test's selection or
extra invariant, is left to the tests that check it; one outside the test's
domain, its profile and domain=, is skipped unrun). Each invariant item
replays the stored cases of its invariant (and the target's failures) before
drawing, unless its stored item saw them pass: one that fails again fails it,
and nothing new is stored.
@pytest.mark.parametrize above the decorator repeats them per variant, its
arguments bound to the target. A failure renders the shrunk case; a run
whose every case is declined, or an item whose invariant is n/a for the
target, is skipped; JUnit comes from --junitxml.
"""

import argparse
import difflib
import functools
import glob
import inspect
import itertools
import math
import os
import sys

import numpy as np
import pytest

from . import _check


def _number(text, kind, what):
    """text as an int or float; argparse's own words for a ValueError named
    the function ("invalid _trials value: 'abc'")."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be %s, got %r" % (what, text)) from None


def _trials(text):
    """--kprop-trials: a usage error at once, not a failure of every item."""
    n = _number(text, int, "an integer number of cases")
    if not 1 <= n <= 10 ** 9:
        raise argparse.ArgumentTypeError("must be in [1, 10**9], got %s" % text)
    return n


def _seed(text):
    """--kprop-seed, checked as --kprop-trials is (prop_runner's --seed range)."""
    n = _number(text, int, "an integer seed")
    if not 0 <= n <= _check.MAX_SEED:
        raise argparse.ArgumentTypeError("must be in [0, %d], got %s" % (_check.MAX_SEED, text))
    return n


def _time(text):
    """--kprop-time, checked as --kprop-trials is."""
    t = _number(text, float, "a number of seconds")
    if not math.isfinite(t) or t < 0:
        raise argparse.ArgumentTypeError("must be a finite number of seconds, 0 or more, got %s" % text)
    return t


def pytest_addoption(parser):
    group = parser.getgroup("kprop", "kprop property tests (@kprop.spec)")
    group.addoption("--kprop-seed", type=_seed, default=None,
                    help="seed of every @kprop.spec run (overrides the decorator and the spec; 0: a fresh one)")
    group.addoption("--kprop-trials", type=_trials, default=None, help="cases per invariant (overrides the spec)")
    group.addoption("--kprop-time", type=_time, default=None, help="time budget per item in seconds")
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
# (test variant, stored case) pairs a stored item checked and every invariant held on.
_HELD = pytest.StashKey[set]()


def pytest_configure(config):
    config.addinivalue_line("markers", "kprop: a kprop property item (added by @kprop.spec)")
    config.stash[_STATS] = []
    config.stash[_HELD] = set()


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


def _param_id(argname, value, index):
    """pytest's default id of one parameter value."""
    if value is None or isinstance(value, (str, int, float, bool, complex)):
        return str(value)
    name = getattr(value, "__name__", None)
    if isinstance(name, str) and (inspect.isclass(value) or callable(value)):
        return name
    return "%s%d" % (argname, index)


def _marks(obj):
    """pytest's marks of a test: a staticmethod's or classmethod's own (those
    above it) and its function's (those below)."""
    marks = list(getattr(obj, "pytestmark", []))
    if isinstance(obj, (staticmethod, classmethod)):
        marks += [m for m in getattr(obj.__func__, "pytestmark", []) if m not in marks]
    return marks


def _parametrize(fn, marks=None):
    """The variants of a test's @pytest.mark.parametrize marks: (id, params,
    marks) each, their cross product over stacked marks, as pytest makes
    them; [("", {}, [])] without any. Every variant's items bind its params
    to the target; what this does not take (indirect=, a name the function
    does not have) is a ValueError, not a case the target fails on."""
    try:
        accepted = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        accepted = {}
    axes = []
    for mark in getattr(fn, "pytestmark", []) if marks is None else marks:
        if mark.name != "parametrize":
            continue
        args, kwargs = list(mark.args), dict(mark.kwargs)
        argnames = kwargs.pop("argnames", None) or (args.pop(0) if args else None)
        argvalues = kwargs.pop("argvalues", None) if "argvalues" in kwargs else (args.pop(0) if args else None)
        ids = kwargs.pop("ids", None) or (args.pop(0) if args else None)
        if kwargs.pop("indirect", False):
            raise ValueError("@pytest.mark.parametrize(indirect=...) does not apply to @kprop.spec: its "
                             "arguments are not fixtures")
        kwargs.pop("scope", None)
        if kwargs or args or argnames is None or argvalues is None:
            raise ValueError("@pytest.mark.parametrize%r: kprop takes argnames, argvalues and ids" % (mark.args,))
        names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        names = [n for n in names if n]
        missing = [n for n in names if n not in accepted]
        if missing:
            raise ValueError("@pytest.mark.parametrize: the function has no argument %s" % ", ".join(
                repr(n) for n in missing))
        axis = []
        for index, value in enumerate(argvalues):
            marks, given = (), None
            if isinstance(value, type(pytest.param(None))):
                values, marks, given = tuple(value.values), value.marks, value.id
            else:
                values = (value,) if len(names) == 1 else tuple(value)
            if len(values) != len(names):
                raise ValueError("@pytest.mark.parametrize(%r): value #%d has %d entries for %d names"
                                 % (argnames, index, len(values), len(names)))
            if given is None and ids is not None and not callable(ids) and index < len(ids):
                given = ids[index]
            if given is None:
                parts = [ids(v) if callable(ids) else None for v in values]
                given = "-".join(p if p is not None else _param_id(n, v, index)
                                 for p, n, v in zip(parts, names, values))
            axis.append((str(given), dict(zip(names, values)), list(marks)))
        axes.append(axis)
    variants = []
    for combo in itertools.product(*axes):
        params, marks = {}, []
        for _, p, m in combo:
            params.update(p)
            marks.extend(m)
        variants.append(("-".join(i for i, _, _ in combo), params, marks))
    return variants


def _bind(fn, params):
    """The target of one variant: fn with its parametrize arguments given."""
    if not params:
        return fn

    @functools.wraps(fn)
    def bound(*args, **kwargs):
        clash = sorted(set(params) & set(kwargs))
        if clash:
            raise _check.ArgumentMismatch(
                "kprop: @pytest.mark.parametrize names %s, which the spec's op also passes to %s: rename "
                "the parametrize argument" % (", ".join(repr(c) for c in clash), fn.__name__))
        return fn(*args, **params, **kwargs)

    # Its signature is fn's less the bound parameters (what the op must fill).
    try:
        signature = inspect.signature(fn)
        bound.__signature__ = signature.replace(
            parameters=[p for name, p in signature.parameters.items() if name not in params])
    except (TypeError, ValueError):
        pass

    modules = set()
    shown = ", ".join("%s=%s" % (k, _source(v, modules, fn.__module__)) for k, v in params.items())
    bound.__name__ = bound.__qualname__ = "functools.partial(%s, %s)" % (_check._fn_text(fn), shown)
    bound._kprop_replay_imports = sorted(modules)  # what the shown values name
    return bound


def _source(value, modules, home):
    """Python source for a parametrize value, so that the printed replay runs
    where the test function is in scope (a bare __name__ printed
    `dt=float32` for np.float32, and repr `dt=inf`: NameErrors). A class or
    function from another module by its module's name (numpy.float32, the
    module added to `modules`); one from the test's own module (`home`) by
    its name; inf and nan through float(); NumPy scalars, dtypes and ufuncs
    through numpy; anything else by repr."""
    if isinstance(value, float) and not isinstance(value, np.generic) and not math.isfinite(value):
        return "float(%r)" % repr(value)
    if isinstance(value, (np.generic, np.dtype, np.ufunc)):
        modules.add("numpy")
        if isinstance(value, np.ufunc):
            return "numpy." + value.__name__
        if isinstance(value, np.dtype):
            return "numpy.dtype(%r)" % (value.name if np.dtype(value.name) == value else value.str)
        return "numpy.%s(%s)" % (type(value).__name__, _source(value.item(), modules, home))
    if inspect.ismodule(value):
        if sys.modules.get(value.__name__) is value:
            modules.add(value.__name__)
        return value.__name__
    if inspect.isclass(value) or inspect.isroutine(value):
        module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        # Only where `import module` finds it (not a file loaded under a made-up name).
        if name and "<" not in name and module not in (None, "builtins", home) and module in sys.modules:
            found = sys.modules[module]
            for part in name.split("."):
                found = getattr(found, part, None)
            if found is value:
                modules.add(module)
                return "%s.%s" % (module, name)
        return getattr(value, "__name__", None) or repr(value)
    return repr(value)


def _spec_path(spec, collector):
    """A relative spec path names a file beside the test module, else one
    under pytest's rootdir (whatever the folder pytest runs from), as an
    absolute path; a shipped spec's name, a dict or an absolute path is
    kept."""
    if not isinstance(spec, (str, os.PathLike)) or os.path.isabs(os.fspath(spec)):
        return spec
    for base in (os.path.dirname(os.fspath(collector.path)), os.fspath(collector.config.rootpath)):
        candidate = os.path.join(base, os.fspath(spec))
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return spec


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector, name, obj):
    # @kprop.spec above @staticmethod or @classmethod marks the descriptor,
    # below it the function: either way the function is the test (it was
    # left to pytest, which asked for its arguments as fixtures: "fixture
    # 'logits' not found"). The descriptor is kept: bound to the test
    # class's instance it gives the function, or the method of the class.
    descriptor = isinstance(obj, (staticmethod, classmethod))
    func = obj.__func__ if descriptor else obj
    marked = getattr(obj, "_kprop_spec", None) or getattr(func, "_kprop_spec", None)
    if marked is None or not inspect.isfunction(func) or not collector.funcnamefilter(name):
        return None
    if descriptor and not isinstance(collector, pytest.Class):
        return None  # a staticmethod object outside a class is nothing pytest collects either
    spec, options = marked
    options = dict(options)
    method = isinstance(collector, pytest.Class)
    if method and options.get("isolate"):
        raise collector.CollectError("kprop: %s: isolate=True runs the target in a worker process, which imports "
                                     "it: make it a module-level function, not a method" % name)
    profile = collector.config.getoption("kprop_profile")
    own_profile = options.get("profile")
    if profile is not None:
        options["profile"] = profile
    spec = _spec_path(spec, collector)
    if profile is not None and profile != own_profile:
        missing = _profile_missing(spec, profile, own_profile)
        if missing is not None:
            # This test's spec has no profile `profile`: this test cannot run
            # as asked, which fails it (never a pass) -- one item, not the
            # module's collection: the other tests of the module, and a -k or
            # node id selecting them, still run.
            item = KpropProfileMissing.from_parent(collector, name="%s[profile:%s]" % (name, profile),
                                                   message="kprop: %s: %s" % (name, missing), fn=obj)
            item.add_marker("kprop")
            return [item]
    try:
        # The run settings and the domain= override checked as kprop.check
        # checks them before it runs: a mistake there is this collection's
        # one error, not a traceback in every item.
        # (invariants= is read below: a generator of names is read once.)
        _check._settings(**{k: options[k] for k in ("seed", "trials", "time", "case_timeout", "isolate", "search",
                                                    "search_time", "max_case_mb", "domain", "corpus",
                                                    "suppress_health_check")
                            if k in options})
        info = _check.spec_info(spec, options.get("profile"), options.get("max_case_mb"), options.get("domain"))
        if options.get("extra_invariants") is not None:  # a generator is read once, here
            options["extra_invariants"] = _check._extra_list(options["extra_invariants"])
        extra = [name for name, _, _, _ in _check._extra_invariants(options.get("extra_invariants"), info)]
    except Exception as e:
        message = str(e)
        if message.startswith("kprop: no spec file ") and isinstance(spec, (str, os.PathLike)):
            message += " (a relative path is looked for beside the test module, %s, then under pytest's rootdir, " \
                       "%s)" % (os.path.dirname(os.fspath(collector.path)), collector.config.rootpath)
        raise collector.CollectError("kprop: %s: %s" % (name, message[len("kprop: "):] if message.startswith(
            "kprop: ") else message))
    known = info["invariants"] + extra
    invariants = options.pop("invariants", None)
    if isinstance(invariants, str):
        invariants = [invariants]  # one name, not its letters
    elif invariants is not None:
        invariants = list(invariants)  # a generator is read once, here
        if not invariants:  # as kprop.check: an empty selection would check nothing
            raise collector.CollectError("kprop: %s: invariants=[] names no invariant to check; leave it out to "
                                         "check every one" % name)
    # As kprop.check: invariants= selects among the spec's invariants, and
    # each extra invariant is an item whatever it names.
    every = not invariants
    invariants = invariants + [e for e in extra if e not in invariants] if invariants else known
    unknown = [i for i in invariants if i not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        raise collector.CollectError("kprop: %s: spec %s has no invariant %s%s (it has: %s)"
                                     % (name, info["name"], ", ".join(unknown),
                                        " (did you mean %r?)" % close[0] if close else "", ", ".join(known)))
    try:
        variants = _parametrize(func, _marks(obj))
    except ValueError as e:
        raise collector.CollectError("kprop: %s: %s" % (name, e))
    # A kprop item is no pytest.Function: no fixture runs for it. Asked for
    # one by name, that is an error; an autouse fixture that applies here
    # would silently not run, which the item says (a warning).
    if any(mark.name == "usefixtures" for mark in _marks(obj)):
        raise collector.CollectError("kprop: %s: @pytest.mark.usefixtures does not apply to @kprop.spec: its "
                                     "items run no pytest fixtures (set up what the target needs in it, or at "
                                     "import)" % name)
    try:
        autouse = sorted(set(collector.session._fixturemanager._getautousenames(collector)))
    except Exception:  # pytest's private API moved: nothing to say
        autouse = []
    if autouse:
        collector.warn(pytest.PytestWarning(
            "kprop: %s: autouse fixture(s) %s do not run for @kprop.spec items (they run no pytest "
            "fixtures)" % (name, ", ".join(autouse))))
    if options.get("isolate") and variants[0][1]:
        raise collector.CollectError("kprop: %s: isolate=True runs the target in a worker process, which imports "
                                     "it by name: its parametrize arguments cannot travel there" % name)
    corpus = _corpus(collector.config, options)
    stored = []
    if corpus is not None and options.get("replay_stored", True):
        # Only a case found by one of this test's invariants, or one the
        # target failed (raised, crashed, hung): a case found by another
        # invariant (another test's selection or extra invariant) is that
        # test's to replay, and passing the others here would say nothing of it.
        stored = [path for path in sorted(glob.glob(os.path.join(corpus, info["name"], "*.yaml")))
                  if _stored_for(path, invariants, every, info["family"])]
    own = [m for m in _marks(obj) if m.name != "parametrize"]  # -m, skip and xfail marks
    items = []
    for variant, params, marks in variants:
        suffix = "-" + variant if variant else ""
        made = [KpropItem.from_parent(collector, name="%s[stored:%s%s]" % (name, os.path.basename(path), suffix),
                                      fn=obj, params=params, spec=spec, options=options, invariants=invariants,
                                      stored=path, variant=variant) for path in stored]
        made += [KpropItem.from_parent(collector, name="%s[%s%s]" % (name, invariant, suffix), fn=obj,
                                       params=params, spec=spec, options=options, invariants=[invariant],
                                       stored=None, variant=variant) for invariant in invariants]
        for item in made:
            item.add_marker("kprop")
            item.own_markers.extend(own + marks)
        items += made
    return items


def _profile_missing(spec, profile, own_profile):
    """Why `spec` cannot be loaded under --kprop-profile `profile` when it
    can under the test's own (decorator's) profile, else None: any other
    error of the spec is the collection's, as before."""
    try:
        _check.spec_info(spec, profile)
        return None
    except Exception as e:
        message = str(e)
    try:
        _check.spec_info(spec, own_profile)
    except Exception:
        return None
    return ("--kprop-profile %s: %s (select the tests whose specs declare it: a path, -k or a node id)"
            % (profile, message[len("kprop: "):] if message.startswith("kprop: ") else message))


class KpropProfileMissing(pytest.Item):
    """A @kprop.spec test whose spec lacks the --kprop-profile asked for: it
    fails when run, saying so; deselected (-k, a node id) it is not run."""

    def __init__(self, *, message, fn, **kwargs):
        super().__init__(**kwargs)
        self.message = message
        self.fn = fn

    def runtest(self):
        raise _ProfileMissing(self.message)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, _ProfileMissing):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        code = getattr(getattr(self.fn, "__func__", self.fn), "__code__", None)
        return self.path, (code.co_firstlineno - 1 if code else None), self.name


class _ProfileMissing(Exception):
    pass


def _stored_for(path, invariants, every, family):
    """Whether a test checking `invariants` replays the stored case at path:
    one found by any of them or by a failure of the target (invariant ""),
    or one that does not read (its item says why); and, for a test that
    checks `every` invariant of the spec, one found by an invariant the
    family registers that the spec does not list (the replay checks it, as
    kprop.check's does)."""
    names = _check._stored_invariants(path)
    return not names or any(not name or name in invariants or (every and _check._registered(family, name))
                            for name in names)


def _domain_words(options) -> str:
    """The run's domain as a skip reason names it: its profile and domain=."""
    parts = []
    if options.get("profile"):
        parts.append("profile %s" % options["profile"])
    if options.get("domain"):
        parts.append("domain=%r" % (dict(options["domain"]),))
    return ", ".join(parts) or "the spec's own"


def _replay_options(options):
    """The decorator's options a replay takes (_check._replay's keyword-only
    parameters): max_case_mb too, which a wide domain= needs (it was left
    out, so every stored case of such a test failed on the memory budget)."""
    replayed = [p.name for p in inspect.signature(_check._replay).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "invariants"]
    return {k: v for k, v in options.items() if k in replayed}


class KpropItem(pytest.Item):
    def __init__(self, *, fn, params, spec, options, invariants, stored, variant="", **kwargs):
        super().__init__(**kwargs)
        self.fn = fn
        self.variant = variant  # its @pytest.mark.parametrize id ("" without)
        self.params = params  # its @pytest.mark.parametrize arguments
        self.spec = spec
        self.options = options
        self.invariants = invariants
        self.stored = stored

    def _target(self):
        # A method of a test class: bound to a fresh instance, as pytest does.
        fn = self.fn.__get__(self.parent.newinstance()) if isinstance(self.parent, pytest.Class) else self.fn
        return _bind(fn, self.params)

    def runtest(self):
        config = self.config
        options = dict(self.options)
        fn = self._target()
        if self.stored is not None:
            options = _replay_options(options)
            # A case outside this test's domain (its profile and domain=),
            # found by a wider test or an earlier, wider run of this one, is
            # no case this target takes: replayed, a correct f32-only kernel
            # failed on a bf16 case. Skipped, never passed.
            outside = _check._stored_outside_domain(self.spec, self.stored, **options)
            if outside:
                pytest.skip("kprop: the stored case %s lies outside this test's domain (%s), so it is not "
                            "replayed here: %s" % (self.stored, _domain_words(options), outside))
            checked, unchecked = _check._replay(self.spec, fn, self.stored, invariants=self.invariants, **options)
            if checked == 0:
                pytest.skip("kprop: the stored case %s was not checked: %s" % (
                    self.stored, "; ".join(unchecked) or "no invariant checked it"))
            # Every invariant of the test holds on it: the invariant items need not replay it again.
            config.stash[_HELD].add((self._test_key(), os.path.realpath(self.stored)))
            return
        for flag, key in (("kprop_seed", "seed"), ("kprop_trials", "trials"), ("kprop_time", "time")):
            if config.getoption(flag) is not None:
                options[key] = config.getoption(flag)
        options["corpus"] = _corpus(config, self.options)
        replay_stored = options.get("replay_stored", True)
        options["replay_stored"] = False  # the stored cases are items of their own
        if options.get("extra_invariants"):  # each extra invariant runs in its own item only
            options["extra_invariants"] = [f for f in options["extra_invariants"]
                                           if _check._extra_name(f) in self.invariants] or None
        if replay_stored and options["corpus"] is not None:
            self._replay_own_stored(fn, options)
        try:
            result = _check.check(self.spec, fn, invariants=self.invariants, **options)
        except (_check.Counterexample, _check.HealthCheckFailure, _check.Skipped) as e:
            if getattr(e, "result", None) is not None:
                config.stash[_STATS].append((self.nodeid, e.result))
            raise
        config.stash[_STATS].append((self.nodeid, result))

    def _test_key(self):
        """This test's variant: its stored items and invariant items share it."""
        return (self.parent.nodeid, self.name.split("[", 1)[0], self.variant)

    def _replay_own_stored(self, fn, options):
        """Before drawing fresh cases: the stored cases of this item's
        invariant (or of a failure of the target), replayed on it; one that
        fails again fails the item, with that case, as kprop.check's replay
        does, and nothing new is drawn or stored. Without this the item drew
        fresh cases (replay_stored=False), found the same bug, shrank it to a
        slightly different case and stored another file on every run: the
        corpus grew without bound. A case this test's stored item already
        saw hold on every invariant is not replayed again; one outside the
        test's domain, or that does not read (its stored item says why), is
        left alone."""
        folder = os.path.join(options["corpus"], _check.spec_info(self.spec, options.get("profile"))["name"])
        options = _replay_options(options)
        held = self.config.stash[_HELD]
        for path in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
            names = _check._stored_invariants(path)
            if not any(not name or name in self.invariants for name in names):
                continue
            if (self._test_key(), os.path.realpath(path)) in held:
                continue
            if _check._stored_outside_domain(self.spec, path, **options):
                continue
            try:
                _check._replay(self.spec, fn, path, invariants=self.invariants, **options)
            except ValueError:  # unreadable, stale, another spec's: its stored item reports it
                continue

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (_check.Counterexample, _check.HealthCheckFailure, _check.ArgumentMismatch)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        code = getattr(getattr(self.fn, "__func__", self.fn), "__code__", None)
        return self.path, (code.co_firstlineno - 1 if code else None), self.name
