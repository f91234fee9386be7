"""kprop.check: a spec run in process with a Python function as the target."""

import difflib
import functools
import glob
import importlib.machinery
import inspect
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _half, _kprop, _wire

__all__ = ["check", "replay", "invariant", "assume", "Unsupported", "Discard", "Counterexample",
           "HealthCheckFailure", "Skipped", "CheckResult", "InvariantResult", "Finding", "spec_info",
           "shipped_specs", "SPECS_DIR"]

SPECS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "specs")


class Unsupported(Exception):
    """Raised by the target for a case it cannot run (a dtype it lacks): the
    case is declined, counted apart and never checked; a run whose every case
    is declined is skipped, never passed."""


class Discard(Exception):
    """Raised by a @kprop.invariant function for a case it cannot judge: the
    case is discarded for that invariant (counted with the reason), never
    passed. kprop.assume(condition) raises it."""


class _Misuse(TypeError):
    """A mistake in an invariant's own code that no case could excuse
    (kprop.assume of an array): it stops the run and is raised, never
    judged as the kernel's failure and stored as its counterexample."""


def assume(condition, why: str = "") -> None:
    """Inside a @kprop.invariant: discard the case unless `condition` holds
    (as Hypothesis's assume)."""
    if isinstance(condition, np.ndarray) and condition.size != 1:
        raise _Misuse("kprop.assume() takes one truth value, not an array of %d elements: write "
                        "cond.all() or cond.any()" % condition.size)
    if not condition:
        raise Discard(why or "kprop.assume() was false")


def _is_unsupported(e: BaseException) -> bool:
    # kprop_worker.Unsupported (python/kprop_worker.py, the examples) counts too.
    return isinstance(e, Unsupported) or (type(e).__name__ == "Unsupported"
                                          and type(e).__module__ in ("kprop_worker", "kprop"))


def _is_pytest_skip(e: BaseException) -> bool:
    pytest = sys.modules.get("pytest")
    base = getattr(getattr(pytest, "skip", None), "Exception", None)
    return isinstance(base, type) and isinstance(e, base)


class Counterexample(AssertionError):
    """An invariant failed (or the target raised, crashed or hung) on a case;
    the message holds the invariant, the measured values, the shrunk case as
    YAML and how to replay it. `.finding` and `.result` carry the details;
    `.result` is None when a stored case (replay_stored) failed, since then
    no case was drawn and there is no run to report."""

    def __init__(self, message: str, finding: "Finding", result: Optional["CheckResult"] = None):
        super().__init__(message)
        self.finding = finding
        self.result = result


class HealthCheckFailure(Exception):
    """The run checked too little to be trusted (every case discarded, the
    time budget hit early, ...): not a pass. `.result` has the statistics."""

    def __init__(self, message: str, result: "CheckResult"):
        super().__init__(message)
        self.result = result


class Skipped(Exception):
    """The target declined every case, or no selected invariant applies to it
    (every one n/a): skipped, not passed. Under pytest the exception raised is
    also pytest's skip (whatever was imported first), so pytest reports it as
    skipped, with or without kprop's plugin."""

    def __init__(self, message: str, result: Optional["CheckResult"] = None):
        super().__init__(message)
        self.result = result


class ArgumentMismatch(TypeError):
    """The target's (or reference's) signature does not take the arguments its
    op passes: a mistake in how it is wired to the spec (a parameter that is
    neither an input nor an attribute of the op, such as a pytest fixture; a
    @pytest.mark.parametrize name that is also one of the op's), not a
    failure of the kernel. The run stops and this is raised; nothing is
    stored."""


def _argument_mismatch(f, kwargs, role: str, op: str) -> Optional["ArgumentMismatch"]:
    """An ArgumentMismatch when f's signature cannot take kwargs, else None
    (a TypeError raised inside f is then f's own)."""
    why = _wire.argument_mismatch(f, kwargs, role, op)
    return None if why is None else ArgumentMismatch(why)


_PYTEST_SKIPPED: Dict[type, type] = {}


def _skipped(message: str, result: Optional["CheckResult"] = None) -> Skipped:
    """A Skipped to raise: one that is also pytest's skip exception when
    pytest is loaded now (decided when raised, not when kprop was imported)."""
    pytest = sys.modules.get("pytest")
    base = getattr(getattr(pytest, "skip", None), "Exception", None)
    if not isinstance(base, type) or not issubclass(base, BaseException):
        return Skipped(message, result)
    cls = _PYTEST_SKIPPED.get(base)
    if cls is None:
        def __init__(self, message, result=None):
            base.__init__(self, message)  # msg, pytrace, ... as pytest reads them
            self.result = result
            # pytest -rs shows the test's own place, not this line of kprop's
            # (pytest's attribute; one it does not read is harmless).
            self._use_item_location = True

        # __module__ "builtins", as pytest's own Skipped: reported as "Skipped: <why>".
        cls = type("Skipped", (Skipped, base), {"__init__": __init__, "__module__": "builtins",
                                                "__qualname__": "Skipped", "__str__": Exception.__str__,
                                                "__repr__": Exception.__repr__})
        _PYTEST_SKIPPED[base] = cls
    return cls(message, result)


def _clear_frames(e: Optional[BaseException]):
    """Clears the locals of every frame in e's traceback and in those of the
    exceptions it chains to. Raised again after the call, an exception that
    stopped the run kept the frames of fn, the trampoline and the invariants,
    and with them views of kprop's buffers, freed when the call returned:
    `pytest -l`, a debugger or any code reading them saw other data, or
    crashed. Their source lines stay in the traceback; their locals go."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__


# What a WiringError from the runner says (src/external.cpp): a worker's fn
# cannot take its op's arguments.
_WIRING = "cannot be called with the op's arguments"


class _Stop:
    """A BaseException that is not an Exception (SystemExit, pytest.skip's and
    pytest.fail's outcomes, GeneratorExit) raised by the target, the reference
    or an invariant: the run is stopped (as by Ctrl-C, the only way to stop
    it from inside) and the exception is raised again, unchanged, once it has
    stopped. Nothing of that case is judged or stored; but a counterexample
    the run found before the stop is raised (as a Counterexample whose
    __cause__ is the exception), never hidden behind it: see finish()."""

    def __init__(self):
        self.exception: Optional[BaseException] = None
        self._stderr: Optional[int] = None

    def stop(self, e: BaseException):
        if self.exception is None:
            self.exception = e
            # kprop's interrupt handler says "interrupted ... (Ctrl-C again to
            # quit)" on fd 2, which is not what happened: fd 2 is muted until
            # the run has stopped (call() restores it).
            try:
                sys.stderr.flush()
                saved = os.dup(2)
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 2)
                os.close(devnull)
                self._stderr = saved
            except OSError:
                pass
        raise KeyboardInterrupt("kprop: stopped by %s" % type(e).__name__) from e

    def call(self, f, *args, interrupted_result=False):
        """f(*args) (the extension's run or replay: a dict with "stopped").
        Stopped by Ctrl-C: KeyboardInterrupt, or with interrupted_result the
        result (the caller raises KeyboardInterrupt once it has said what
        was saved: see _interrupted()). Stopped by this object's
        exception: the result, which the caller reads for what was found
        before the stop, then calls finish()."""
        try:
            result = f(*args)
        except TypeError as e:
            # A worker's fn (isolate=True) that cannot take its op's
            # arguments: the run stopped (a WiringError, exit 2 on the
            # command line); raised as in process, with the worker's words.
            message = str(e)
            if _WIRING not in message:
                raise
            raise ArgumentMismatch(message[message.find("kprop: "):] if "kprop: " in message else message) from None
        finally:
            if self._stderr is not None:
                os.dup2(self._stderr, 2)
                os.close(self._stderr)
                self._stderr = None
        if result["stopped"] and self.exception is None and not interrupted_result:
            raise KeyboardInterrupt("kprop: interrupted")
        return result

    def finish(self, counterexample: Optional[BaseException] = None):
        """After a stopped call: the counterexample found before the stop, if
        any (caused by the stopping exception), else that exception, raised;
        nothing without a stop (a counterexample is the caller's to raise)."""
        if self.exception is None:
            return
        _clear_frames(self.exception)
        if counterexample is not None:
            raise counterexample from self.exception
        raise self.exception


@dataclass
class Finding:
    invariant: str  # "" for a target failure
    kind: str  # invariant, crash, hang, error, replay
    message: str
    measured: List[Tuple[str, float]]
    case_yaml: str
    path: str  # the case file ("" if none could be written)
    replay: str  # how to replay it
    size: int = 0
    original_size: int = 0
    shrink_steps: int = 0
    summary: str = ""
    traceback: str = ""  # the target's Python traceback, for errors raised by fn
    in_corpus: bool = False  # path is in the corpus folder the run was given
    store_note: str = ""  # why the case is not where it was meant to go ("" if it is)
    corpus: Optional[str] = None  # the corpus folder the run was given (None: none)
    # A target failure's: the invariant being checked when it happened (it may
    # call fn on a case it derives from this one, which the replay repeats).
    while_checking: str = ""


@dataclass
class InvariantResult:
    name: str
    status: str  # passed, failed, gave_up, not_run, not_applicable
    passed: int  # cases checked that held
    discarded: int
    declined: int
    not_applicable: int
    discard_reasons: Dict[str, int]
    counterexample: Optional[Finding]


# A target failure's kind, as a run's summary says it.
_TARGET_FAILURES = {"error": "target error", "crash": "crashed", "hang": "hung"}


@dataclass
class CheckResult:
    """What a run did: never counts a declined or discarded case as passed."""
    spec: str
    family: str
    target: str
    status: str  # passed, failed, gave_up, crashed, skipped, interrupted
    seed: int
    trials: int  # cases drawn
    trials_wanted: int
    checked: int  # cases on which at least one invariant gave a verdict
    declined: int
    decline_reasons: Dict[str, int]
    seconds: float
    max_size: int
    size_reached: int
    largest_case: int
    time_budget_hit: bool
    invariants: List[InvariantResult]
    health: List[Tuple[str, str]]
    detail: str
    replayed: int = 0  # stored cases checked first (one the target declined is not counted)
    # Stored cases not replayed because they lie outside this run's domain (its profile and domain=):
    # found by a wider run, they are that run's to replay, not cases this target was asked to take.
    replay_outside_domain: int = 0
    discarded_cases: int = 0  # cases every invariant discarded: neither checked nor declined
    stopped_at_failure: bool = False  # fail_fast=True: the first counterexample ended the run
    search_cases: int = 0  # search=: cases the targeted search ran, on top of `trials` (see report["search"])
    # Cases drawn from a focus, by its narrowed fields ("{dtypes: [f16, bf16]}"): where every invariant
    # still checking observes, not the whole domain (the spec docs, "Where a run draws its cases").
    focused: Dict[str, int] = field(default_factory=dict)
    findings: List[Finding] = field(default_factory=list)
    report: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def discarded(self) -> int:
        """Discards summed over the invariants (not cases: see each invariant's)."""
        return sum(i.discarded for i in self.invariants)

    @property
    def cases_per_second(self) -> float:
        return self.trials / self.seconds if self.seconds > 0 else float("inf")

    def _status_words(self) -> str:
        """The status as summary() says it: "crashed" (the runner's one
        status for every target failure) said as what the target did."""
        if self.status == "crashed":
            kinds = [f.kind for f in self.findings if f.kind in _TARGET_FAILURES]
            if kinds:
                return _TARGET_FAILURES[kinds[-1]]
        return self.status

    def summary(self) -> str:
        # Discards are per invariant (a case one invariant discards another
        # may check): their sum is no count of cases, and says so.
        # size_reached -1: no case was drawn (prop_runner's "no size reached").
        sizes = ("size reached %d of %d" % (self.size_reached, self.max_size) if self.size_reached >= 0
                 else "no size reached (max_size %d)" % self.max_size)
        parts = ["%s: %s on %s, seed %d: %d cases drawn%s, %d checked, %d discarded by every invariant still "
                 "checking, %d declined, %d discards over the invariants, %s, %.2f s" % (
                     self.spec, self._status_words(), self.target, self.seed, self.trials,
                     " + %d by the search" % self.search_cases if self.search_cases else "", self.checked,
                     self.discarded_cases, self.declined, self.discarded, sizes, self.seconds)]
        # The corpus replayed before the fresh cases: what guarded the run
        # besides them (a run with none stored says nothing).
        if self.replayed or self.replay_outside_domain:
            parts.append("  stored cases: %d replayed%s" % (
                self.replayed, ", %d left alone (outside this run's domain)" % self.replay_outside_domain
                if self.replay_outside_domain else ""))
        for i in self.invariants:
            parts.append("  %-28s %-14s %d %s, %d discarded, %d declined" % (
                i.name, i.status, i.passed, "checked" if i.status == "not_run" else "passed", i.discarded,
                i.declined))
        if self.focused:
            parts.append("  focused: of the cases drawn, %s, where every invariant still checking observes" % "; ".join(
                "%d came from %s" % (n, where) for where, n in sorted(self.focused.items())))
        if self.stopped_at_failure:
            parts.append("  " + self.detail + " (fail_fast)")
        if self.decline_reasons:
            parts.append("  declined: " + "; ".join("%s (%d)" % kv for kv in self.decline_reasons.items()))
        return "\n".join(parts)


# ----------------------------------------------------------------------- specs
def shipped_specs() -> List[str]:
    return sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(SPECS_DIR, "*.yaml")))


# Old names of renamed shipped specs (the C++ loader's renamed_specs()).
_RENAMED_SPECS = {"flash_fwd": "attention_fwd", "flash_bwd": "attention_bwd"}


def _resolve_spec(spec) -> Tuple[str, bool]:
    """(path or text, is_text) for a path, a shipped spec name or a dict."""
    if isinstance(spec, Mapping):
        return json.dumps(_plain(spec, "spec")), True  # JSON is YAML
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError("kprop: spec must be a spec file's path, a shipped spec's name or a dict, got %r" % (spec,))
    spec = os.fspath(spec)
    if os.path.isfile(spec):  # a folder of the same name (kernels/layernorm/) does not hide a shipped spec
        return spec, False
    shipped = os.path.join(SPECS_DIR, _RENAMED_SPECS.get(spec, spec) + ".yaml")
    if os.sep not in spec and not spec.endswith((".yaml", ".yml")) and os.path.exists(shipped):
        return shipped, False
    raise ValueError("kprop: no spec file %r and no shipped spec of that name (shipped: %s)"
                     % (spec, ", ".join(shipped_specs())))


def _plain(value, where: str):
    """value in JSON's types (NumPy scalars and arrays as numbers and lists),
    or a TypeError naming where the value that has none is."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, np.ndarray):
        return _plain(value.tolist(), where)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError("kprop: %s has a key %r that is not a str" % (where, key))
            out[str(key)] = _plain(item, "%s[%r]" % (where, str(key)))
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, "%s[%d]" % (where, i)) for i, item in enumerate(value)]
    raise TypeError("kprop: %s is a %s (%.60r): give numbers, strings, bools, lists and dicts"
                    % (where, type(value).__name__, value))


def spec_info(spec, profile: Optional[str] = None, max_case_mb: Optional[int] = None,
              domain: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The spec's name, family, ops, invariants, run settings, profiles and
    the named tensors its family publishes (name -> (shape, dtype, meaning):
    what @kprop.invariant functions and the spec's expressions read).
    max_case_mb and domain: as kprop.check's (the memory budget of one case;
    domain keys replaced, checked against the spec as a run checks them)."""
    # None is the base spec; "" names no profile (prop_runner --profile '' is refused too).
    if profile is not None and (not isinstance(profile, str) or not profile):
        raise ValueError("kprop: profile must name one of the spec's profiles, not %r" % (profile,))
    if domain is not None:
        max_case_mb, domain = _settings(max_case_mb=max_case_mb, domain=domain)[4:6]
    text, is_text = _resolve_spec(spec)
    try:
        return _kprop.spec_info(text, is_text, profile or "", max_case_mb or 0, json.dumps(domain) if domain else "")
    except ValueError as e:
        message = str(e)
        if isinstance(spec, Mapping):  # "<dict>:1:237:" named a column of JSON the caller never saw
            m = re.match(r"<dict>:1:(\d+): ", message)
            where = _json_path_at(text, int(m.group(1)) - 1) if m else None
            if where is not None:
                message = where + ": " + message[m.end():]
        raise ValueError("kprop: %s" % message) from None


def _json_path_at(text: str, offset: int) -> Optional[str]:
    """Where in a dict spec the character at `offset` of its JSON text
    (_resolve_spec's json.dumps) is, as _plain names places:
    spec['invariants'][0]['bogus'] for that key or its value; None if the
    offset is past the text. (The JSON is one line, so a spec error's
    line:column says nothing to the dict's author; its keys do.)"""
    path: List[list] = []  # per open container: [is_object, its current key or index]
    at_key = False
    i = 0
    while i < len(text) and i <= offset:
        c = text[i]
        if c == '"':
            end = i + 1
            while text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if at_key:
                path[-1][1] = json.loads(text[i:end + 1])
                at_key = False
            if offset <= end:
                break
            i = end + 1
            continue
        if i == offset and c not in " ,:":
            break
        if c in "{[":
            path.append([c == "{", None if c == "{" else 0])
            at_key = c == "{"
        elif c in "}]":
            path.pop()
        elif c == ",":
            if path[-1][0]:
                at_key = True
            else:
                path[-1][1] += 1
        i += 1
    else:
        return None
    return "spec" + "".join("[%r]" % key for _, key in path if key is not None)


# ------------------------------------------------------------ invariants
class _InvariantDef:
    def __init__(self, fn, name, description, tensors):
        if not callable(fn):
            raise TypeError("kprop.invariant: decorates a function, not %r" % (fn,))
        for what, value in (("name", name), ("description", description)):
            if value is not None and not isinstance(value, str):
                raise TypeError("kprop.invariant: %s= must be a str, got %r" % (what, value))
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or type(fn).__name__
        self.description = description or (inspect.getdoc(fn) or "").split("\n")[0]
        if tensors is not None and (not isinstance(tensors, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in tensors.items())):
            raise TypeError("kprop.invariant %s: tensors= must be a dict {parameter: tensor name} of str "
                            "(e.g. {'o': 'target.o'}), got %r" % (self.name, tensors))
        self.tensors = dict(tensors or {})
        self.params = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError("kprop.invariant %s: *args/**kwargs cannot name tensors; name each one "
                                "(e.g. target_o for target.o)" % self.name)
            self.params.append((p.name, p.default is not p.empty))
        unknown = sorted(set(self.tensors) - {param for param, _ in self.params})
        if unknown:
            raise TypeError("kprop.invariant %s: tensors= maps %s, which the function has no parameter for"
                            % (self.name, ", ".join(repr(u) for u in unknown)))

    def resolve(self, published: Mapping[str, Any], family: str) -> List[Tuple[str, str]]:
        """(parameter, tensor name) for each parameter of fn: its tensors=
        mapping, else the tensor of that very name, else the one whose dots
        become underscores (target.o: target_o, err.o: err_o), as derived
        from the names the family publishes."""
        dotted: Dict[str, List[str]] = {}
        for tensor in published:
            if "." in tensor:
                dotted.setdefault(tensor.replace(".", "_"), []).append(tensor)
        out = []
        for param, has_default in self.params:
            name = self.tensors.get(param)
            if name is None:
                name = param if param in published else None
            if name is None and param in dotted:
                if len(dotted[param]) > 1:
                    raise ValueError("kprop: invariant %s: parameter %r could be any of %s: map it, e.g. "
                                     "@kprop.invariant(tensors={%r: %r})" % (
                                         self.name, param, ", ".join(sorted(dotted[param])), param,
                                         sorted(dotted[param])[0]))
                name = dotted[param][0]
            if name is None or name not in published:
                if has_default and name is None:
                    continue
                # The family's own names in the examples, and the nearest as a guess.
                spelled = sorted(dotted) + sorted(published)
                close = difflib.get_close_matches(param, spelled, n=1)
                example = next((t for t in sorted(published) if t.startswith("target.")), "target.o")
                raise ValueError("kprop: invariant %s: parameter %r names no tensor of family %s%s (write %s as %s, "
                                 "or map it: @kprop.invariant(tensors={%r: %r})); the family publishes: %s" % (
                                     self.name, param, family, " (did you mean %r?)" % close[0] if close else "",
                                     example, example.replace(".", "_"), param, example,
                                     ", ".join(sorted(published))))
            out.append((param, name))
        return out


def invariant(fn=None, *, name: Optional[str] = None, description: Optional[str] = None,
              tensors: Optional[Mapping[str, str]] = None):
    """Declares a Python invariant over the spec's named tensors, to pass to
    kprop.check(..., extra_invariants=[f]) or @kprop.spec(..., extra_invariants=[f]).

        @kprop.invariant
        def lse_bounds_o(target_lse, target_o, reference_o):   # target.lse, target.o, reference.o
            return np.all(np.isfinite(target_lse) | np.isneginf(target_lse))

    Each parameter names a tensor (kprop.spec_info(spec)["tensors"]): a
    prefix and a dot become an underscore (target.o: target_o); `tensors=`
    maps a parameter to a name explicitly. Arrays are float64 (real), int64
    or bool copies; a tensor this case does not have is None. The function
    holds when it returns None, True or an array of all True; it fails when it
    returns False (or any False) or raises (AssertionError's message is
    reported); kprop.assume(cond) / raising kprop.Discard discards the case.
    The target and reference run only if a parameter reads their outputs."""

    def mark(f):
        f._kprop_invariant = _InvariantDef(f, name, description, tensors)
        return f

    return mark(fn) if fn is not None else mark


class _InvariantCall:
    """The trampoline kprop calls for a Python invariant: the named tensors
    in, None (holds) or (kind, message) out."""

    def __init__(self, defn: _InvariantDef, mapping: List[Tuple[str, str]], stopper: "_Stop"):
        self.defn = defn
        self.mapping = mapping
        self.stopper = stopper

    def __call__(self, tensors):
        if self.stopper.exception is not None:  # the run is stopping: judge nothing more
            return ("discard", "the run was stopped by %s" % type(self.stopper.exception).__name__)
        args = {param: tensors[name] for param, name in self.mapping}
        try:
            answer = self.defn.fn(**args)
        except Discard as e:
            return ("discard", str(e) or "discarded")
        except AssertionError as e:
            return ("fail", "%s: %s" % (self.defn.name, e) if str(e) else
                    "%s: assertion failed\n%s" % (self.defn.name, _short_traceback()))
        except _Misuse as e:
            self.stopper.stop(e)
        except Exception as e:  # KeyboardInterrupt goes through: it stops the run
            return ("fail", "%s raised %s: %s\n%s" % (self.defn.name, type(e).__name__, e, _short_traceback()))
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # SystemExit, pytest.skip(), ...: the run stops, e is raised again
            self.stopper.stop(e)
        if answer is None:
            return None
        if isinstance(answer, (bool, np.bool_)):
            return None if answer else ("fail", "%s returned False" % self.defn.name)
        if not isinstance(answer, (np.ndarray, list, tuple, str, bytes)) and hasattr(answer, "__array__"):
            answer = np.asarray(answer)  # a torch tensor (on the CPU), a NumPy-like array
        if isinstance(answer, np.ndarray) and answer.dtype == np.bool_:
            # No element, no verdict: a discard, as an expression's `compares
            # no element on this case` (it passed every case, checking nothing).
            if answer.size == 0:
                return ("discard", "%s returned an empty array (shape %s): it judges nothing on this case" % (
                    self.defn.name, answer.shape))
            if bool(np.all(answer)):
                return None
            bad = np.argwhere(~answer)
            return ("fail", "%s: %d of %d elements false, first at %s%s" % (
                self.defn.name, len(bad), answer.size, list(map(int, bad[0])),
                _values_at(args, answer.shape, tuple(bad[0]))))
        # Anything else has no one truth value that could be meant (a list
        # of False is truthy, NaN is truthy): a mistake in the invariant, said
        # as its failure on every case rather than passed.
        return ("fail", "%s must return True, False, None or an array of bools, not %s %.80r" % (
            self.defn.name, type(answer).__name__, answer))


def _values_at(args: Mapping[str, Any], shape: Tuple[int, ...], index: Tuple[int, ...]) -> str:
    """"; there target_y = 1.5, x = 0.75": the value at `index` of each
    argument of a Python invariant whose shape broadcasts to its answer's,
    as an expression's failure names its operands' values (a scalar or an
    array that does not line up with the answer says nothing of the element)."""
    shown = []
    for param, value in args.items():
        if not isinstance(value, np.ndarray) or value.ndim == 0 or value.ndim > len(shape):
            continue
        try:
            shown.append("%s = %r" % (param, np.broadcast_to(value, shape)[index].item()))
        except ValueError:  # does not broadcast to the answer's shape
            continue
    return "; there " + ", ".join(shown) if shown else ""


def _short_traceback() -> str:
    lines = traceback.format_exc().rstrip().splitlines()
    return "\n".join(lines[-6:])


def _extra_invariants(extra, info, stopper: Optional[_Stop] = None) -> list:
    out = []
    seen = set()
    for f in extra or []:
        defn = getattr(f, "_kprop_invariant", None)
        if defn is None:
            if not callable(f):
                raise TypeError("kprop: extra_invariants takes @kprop.invariant functions, not %r" % (f,))
            defn = invariant(f)._kprop_invariant
        if defn.name in seen:
            raise ValueError("kprop: two extra invariants are named %r" % defn.name)
        seen.add(defn.name)
        mapping = defn.resolve(info["tensors"], info["family"])
        if not any(name.startswith(("target.", "transformed.target.")) for _, name in mapping):
            # As a spec's expect: that reads no target output: it would pass whatever the kernel does.
            raise ValueError("kprop: invariant %s reads no output of the target (target.*), so no kernel can "
                             "fail it; take a target tensor (e.g. target_o for target.o)" % defn.name)
        out.append((defn.name, [name for _, name in mapping], defn.description,
                    _InvariantCall(defn, mapping, stopper or _Stop())))
    return out


# ------------------------------------------------------------------ the target
def _to_numpy(value):
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, on any device
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # NumPy has no bfloat16: its raw bits, as kprop carries them
            import torch
            return value.contiguous().view(torch.int16).numpy().view(np.uint16)
        value = value.numpy()
    return np.asarray(value)


def _write_outputs(op: str, outputs, result) -> None:
    """Fills kprop's output buffers from fn's result (dict by name, or a tuple
    in declared order), converted to the declared dtype, shape-checked."""
    names = [name for name, _, _ in outputs]
    if isinstance(result, (tuple, list)):
        if len(result) != len(outputs):
            raise ValueError("%s returned %d outputs, expected %d (%s)" % (op, len(result), len(outputs),
                                                                         ", ".join(names)))
        result = dict(zip(names, result))
    elif not isinstance(result, Mapping):
        if len(outputs) == 1 and result is not None:
            result = {names[0]: result}
        else:
            raise TypeError("%s must return a dict of outputs or a tuple (%s), not %s"
                            % (op, ", ".join(names), type(result).__name__))
    if len(result) != len(names):
        extra = set(result) - set(names)
        if extra:
            raise KeyError("%s returned outputs nobody asked for: %s" % (op, ", ".join(sorted(extra))))
    for name, dtype, out in outputs:
        if name not in result:
            raise KeyError("%s returned no output '%s'" % (op, name))
        a = result[name]
        if type(a) is not np.ndarray:
            a = _to_numpy(a)
        # Real numbers only: a complex output would lose its imaginary part, a
        # string or object array would be parsed, each without a word.
        if a.dtype.kind not in "biuf" and not getattr(a.dtype.type, "__module__", "").startswith("ml_dtypes"):
            raise TypeError("%s: output '%s' has dtype %s: return real numbers (%s)" % (op, name, a.dtype, dtype))
        if a.dtype == np.bool_ and (dtype == "bf16" or not np.issubdtype(out.dtype, np.integer)):
            # A mask where values are due (a comparison returned): stored as 0/1 it would be judged as numbers.
            raise TypeError("%s: output '%s' is a bool array: return the %s values, not a mask" % (op, name, dtype))
        if a.shape != out.shape:
            raise ValueError("%s: output '%s' has shape %s, expected %s"
                             % (op, name, list(a.shape), list(out.shape)))
        if np.issubdtype(out.dtype, np.integer) and dtype != "bf16":
            out[...] = _wire.integer_output(op, name, a, out.dtype)
        elif dtype == "bf16" and out.dtype == np.uint16 and _half.BFLOAT16 is not None and a.dtype == _half.BFLOAT16:
            out[...] = a.view(np.uint16)  # ml_dtypes bfloat16: its bits, as they are
        elif dtype == "bf16" and out.dtype == np.uint16 and a.dtype != np.uint16:
            # bf16 outputs are raw bits here (NumPy has no bfloat16): floats round once, to nearest even.
            out[...] = _half.float32_to_bf16(a)
        elif a.dtype == out.dtype or out.dtype.itemsize >= a.dtype.itemsize:
            out[...] = a
        else:
            with np.errstate(over="ignore"):  # a value past the dtype's range stores as inf, as a kernel's would
                out[...] = a


class _Target:
    """The trampoline kprop's in-process transport calls for each request."""

    def __init__(self, fn, ops: Sequence[str], tensors: str = "numpy", device: Optional[str] = None,
                 role: str = "the target", stopper: Optional[_Stop] = None):
        if tensors not in ("numpy", "torch"):
            raise ValueError("kprop: tensors must be 'numpy' or 'torch', not %r" % (tensors,))
        if device is not None and tensors != "torch":
            raise ValueError("kprop: device=%r applies to tensors='torch' (NumPy arrays live on the CPU)" % (device,))
        if isinstance(fn, Mapping):
            missing = [op for op in ops if op not in fn]
            if missing:
                raise ValueError("kprop: no function for op(s) %s (the dict serves %s)"
                                 % (", ".join(missing), ", ".join(sorted(map(str, fn)))))
        elif not callable(fn):
            plugin = isinstance(fn, str) and fn.split(":", 1)[0] in ("plugin", "exec")
            raise TypeError("kprop: %s must be a function or a dict {op: function}, not %s%s"
                            % (role, type(fn).__name__,
                               " (%r is prop_runner's: prop_runner --spec SPEC %s %s)"
                               % (fn, "--reference" if role.startswith("reference") else "--target",
                                  shlex.quote(fn))
                               if plugin else ""))
        self.fn = fn
        self.role = role
        self.multi_op = len(ops) > 1
        self.tensors = tensors
        self.device = device
        self.tracebacks: Dict[str, str] = {}
        self.places: Dict[str, tuple] = {}
        self.declines: Dict[str, int] = {}
        # In process (kprop.check): a SystemExit or pytest.skip() from fn stops
        # the run and is raised again. A worker has none: it lets them end it.
        self.stopper = stopper
        if tensors == "torch":
            try:
                import torch  # noqa: F401
            except ImportError as e:
                raise ImportError("kprop: tensors='torch' needs PyTorch, which this Python cannot import (%s); "
                                  "install it, or pass NumPy arrays (tensors='numpy')" % e) from e
            if self.device is None:
                self.device = "cuda" if torch.cuda.is_available() else "cpu"

    def _inputs(self, inputs):
        if self.tensors == "numpy":
            if _half.BFLOAT16 is None:
                return inputs  # bf16 as uint16 arrays of its raw bits (NumPy has no bfloat16)
            # bf16 as ml_dtypes.bfloat16 arrays, as the workers (isolate=True, exec:) hand them:
            # in process the buffers are uint16 bits (the only uint16 kprop carries), viewed without a
            # copy. The view's base is kprop's array, so a function keeping the view is still caught.
            return {name: a.view(_half.BFLOAT16) if a.dtype == np.uint16 else a for name, a in inputs.items()}
        import torch
        import warnings
        out = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # from_numpy on a read-only view warns; the view is not written
            for name, a in inputs.items():
                if a.dtype == np.uint16 or (_half.BFLOAT16 is not None and a.dtype == _half.BFLOAT16):
                    # bf16: its raw bits (in process) or an ml_dtypes array (a worker), which torch cannot take
                    t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
                else:
                    t = torch.from_numpy(a)
                out[name] = t.to(self.device) if self.device != "cpu" else t
        return out

    def _failed(self, e: Exception):
        """fn's exception as the trampoline answers it: a decline, or the case's error."""
        message = "%s: %s" % (type(e).__name__, e) if not _is_unsupported(e) else str(e)
        if _is_unsupported(e):
            return ("unsupported", message)
        # Shrinking repeats the failure many times: one traceback per distinct error.
        self.tracebacks.setdefault(message, traceback.format_exc())
        # Where it was raised (type, innermost frame): kprop.worker prints
        # one traceback per place, a shrink's messages naming each shape.
        frames = traceback.extract_tb(e.__traceback__)
        self.places.setdefault(
            message, (type(e).__name__,) + ((frames[-1].filename, frames[-1].lineno) if frames else (message,)))
        return ("error", message)

    def __call__(self, op, attrs, inputs, outputs, dims=None):
        try:
            if isinstance(self.fn, Mapping):
                f = self.fn[op]
                kwargs = dict(attrs)
            else:
                f = self.fn
                kwargs = dict(attrs)
                if self.multi_op:
                    kwargs["op"] = op
            before = _wire.snapshot(inputs)
            kwargs.update(self._inputs(inputs))
            kwargs.update(_wire.named_dims(f, dims, kwargs))  # a declared op's dims f names
            try:
                returned = f(**kwargs)
            except TypeError:
                mismatch = _argument_mismatch(f, kwargs, self.role, op)
                if mismatch is not None:
                    raise mismatch from None
                raise
            # A write into an input through a raw pointer (NumPy's read-only
            # flag stops only NumPy's own writes) is the kernel's bug; in
            # process it also handed the reference the written input.
            changed = _wire.changed_input("the reference" if self.role.startswith("reference") else "the target",
                                          inputs, before)
            if changed is not None:
                return ("error", changed)
            _write_outputs(op, outputs, returned)
            return None
        except ArgumentMismatch as e:  # the wiring, not the kernel: no verdict on the case
            if self.stopper is not None:
                self.stopper.stop(e)
                return ("error", str(e))
            return ("wiring", str(e))  # in a worker: its reply stops the run (kprop.worker)
        except Exception as e:
            # A module (or the shared library of one) the function imports is
            # missing here (a CI image without torch): the target cannot run
            # on this machine, which is no failure of the kernel (as a
            # mutant's, it read as a kill, and the case was stored to guard an
            # environment). Any other exception is the case's.
            missing = _wire.cannot_run_here(e)
            return ("unavailable", missing) if missing else self._failed(e)
        except KeyboardInterrupt:  # stops the run (kprop's interrupt), raised again after it
            raise
        except BaseException as e:  # SystemExit, pytest.skip(), ...: not a failure of fn's
            if self.stopper is not None:
                self.stopper.stop(e)
            if _is_pytest_skip(e):  # in a worker, which cannot stop the run: the case is declined
                return ("unsupported", "%s: %s" % (type(e).__name__, e))
            raise  # in a worker: it ends, a crash


def _target_name(fn) -> str:
    if isinstance(fn, Mapping):
        return "python:" + "+".join(sorted(fn))
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return "python:" + name


def _isolated_name(fn) -> str:
    """What messages call a target run by the worker (isolate=True): its
    module and name, not the worker's command line (this process's whole
    sys.path), which runs it and is in its printed replay."""
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return "python:%s (isolated)" % (name if module in ("", "__main__") else "%s.%s" % (module, name))


def _importable(fn) -> str:
    """"module:qualname" (or "path.py:qualname" for __main__) for the worker."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    # A bound method's qualname names its class's function, not the object
    # it is bound to (a classmethod's class is importable: its binding is too).
    method = inspect.ismethod(fn) and not inspect.isclass(getattr(fn, "__self__", None))
    if isinstance(fn, Mapping) or method or not module or not qualname or "<" in qualname:
        raise ValueError("kprop: isolate=True runs fn in a worker process, which imports it: fn must be "
                         "a module-level function (not a lambda, closure, bound method, callable object "
                         "or dict), got %r" % (fn,))
    if module == "__main__" or not _on_path(module):
        # A script, or a module imported from outside sys.path (pytest's
        # --import-mode=importlib): the worker loads its file.
        path = getattr(sys.modules.get(module), "__file__", None)
        if not path:
            raise ValueError("kprop: isolate=True cannot import %s from %s: it has no file" % (
                qualname, "an interactive __main__" if module == "__main__" else "module " + module))
        return "%s:%s" % (os.path.abspath(path), qualname)
    return "%s:%s" % (module, qualname)


def _on_path(module: str) -> bool:
    """Whether a worker given this process's sys.path imports `module` by name."""
    try:
        return importlib.machinery.PathFinder.find_spec(module.split(".")[0], sys.path) is not None or \
            module.split(".")[0] in sys.builtin_module_names
    except (ImportError, ValueError):
        return False


def _worker_command(fn, tensors: str) -> str:
    # (Run as `python -m kprop.worker`, the worker is __main__.)
    loading = next(filter(None, (getattr(sys.modules.get(name), "_KPROP_WORKER_LOADING", None)
                                 for name in ("kprop.worker", "__main__"))), None)
    if loading:
        raise RuntimeError("kprop: isolate=True while kprop.worker imports %s to serve it: that import runs "
                           "kprop.check, so each worker would start another; put the call under "
                           "`if __name__ == \"__main__\":`" % loading)
    # This process's sys.path, with the folder of this very kprop first (a
    # source tree's python/ on sys.path, as the examples add it, must not win).
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = []
    for p in [here] + sys.path:
        p = os.path.abspath(p or os.getcwd())
        if p not in paths:
            paths.append(p)
    env = "PYTHONPATH=" + shlex.quote(os.pathsep.join(paths))
    args = [sys.executable, "-m", "kprop.worker", _importable(fn)]
    if tensors != "numpy":
        args += ["--tensors", tensors]
    return env + " exec " + " ".join(shlex.quote(a) for a in args)


_RUNNER: List[Optional[str]] = []


def _prop_runner() -> Optional[str]:
    """The absolute path of a prop_runner this package can name in a printed
    replay: the one of the build it is part of (build/prop_runner beside
    build/python/), else the one on PATH; None if it finds none."""
    if not _RUNNER:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        found = None
        for candidate in (os.path.join(os.path.dirname(here), "prop_runner"), shutil.which("prop_runner")):
            if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                found = os.path.abspath(candidate)
                break
        _RUNNER.append(found)
    return _RUNNER[0]


def _with_runner(command: str) -> str:
    """A replay command of the runner's ("prop_runner --spec ..."), naming
    the prop_runner this package found, so that it runs as printed."""
    runner = _prop_runner()
    if runner and command.startswith("prop_runner "):
        return shlex.quote(runner) + command[len("prop_runner"):]
    return command


# --------------------------------------------------------------------- results
def _finding(d, targets, replay_text, command: Optional[str], corpus: Optional[str] = None,
             opts: Optional[Mapping[str, Any]] = None) -> Finding:
    # An error's message is "op: TypeName: text"; the traceback was kept by that text.
    tb = _traceback_for(targets, d["message"]) if d["kind"] == "error" else ""
    if command and not _by_extra_invariant(d["invariant"], opts or {}):
        replay = _with_runner(d["replay_command"])
    elif d["path"]:
        replay = replay_text(d["path"], d["invariant"]) if d["kind"] == "invariant" else replay_text(d["path"])
    else:
        replay = ""
    return Finding(invariant=d["invariant"], kind=d["kind"], message=d["message"], measured=list(d["measured"]),
                   case_yaml=d["case_yaml"], path=d["path"], replay=replay, size=d["size"],
                   original_size=d["original_size"], shrink_steps=d["shrink_steps"], summary=d["summary"],
                   traceback=tb, in_corpus=bool(d["in_corpus"]), store_note=d["store_note"],
                   corpus=None if corpus is None else os.fspath(corpus), while_checking=d["while_checking"])


def _status(text: str) -> str:
    """The runner's status words ("gave up", "FAILED", "n/a", ...) as the
    identifiers CheckResult and InvariantResult document."""
    return {"n/a": "not_applicable"}.get(text, text.lower().replace(" ", "_"))


def _result(r, findings, replayed=0) -> CheckResult:
    invariants = []
    by_name = {}
    for f in findings:
        by_name.setdefault(f.invariant, f)
    for i in r["invariants"]:
        invariants.append(InvariantResult(
            name=i["name"], status=_status(i["status"]), passed=i["passed"], discarded=i["discarded"],
            declined=i["declined"], not_applicable=i["not_applicable"], discard_reasons=dict(i["discard_reasons"]),
            counterexample=by_name.get(i["name"]) if i["counterexample"] is not None else None))
    return CheckResult(spec=r["spec"], family=r["family"], target=r["target"], status=_status(r["status"]), seed=r["seed"],
                       trials=r["trials"], trials_wanted=r["trials_wanted"], checked=r["checked"],
                       declined=r["declined"], decline_reasons=dict(r["decline_reasons"]), seconds=r["seconds"],
                       max_size=r["max_size"], size_reached=r["size_reached"], largest_case=r["largest_case"],
                       time_budget_hit=r["time_budget_hit"], invariants=invariants, health=list(r["health"]),
                       detail=r["detail"], replayed=replayed, findings=findings,
                       discarded_cases=r["discarded"], focused=dict(r["focused"]),
                       search_cases=r["search"]["cases"] if r["search"] is not None else 0,
                       stopped_at_failure=r["stopped_at_failure"], report=r)


def _shown_case(case_yaml: str, path: str, line_chars: int = 2000, total_chars: int = 20000) -> str:
    """The case as a message shows it, as prop_runner's text report does:
    whole when small or stored nowhere; else cut, saying where it is."""
    if not path:
        return case_yaml
    out, cut, at, shown = [], False, 0, 0  # at: characters read; shown: characters written (the limit)
    for line in case_yaml.split("\n"):
        if shown >= total_chars and at < len(case_yaml):
            out.append("... (%d more characters)" % (len(case_yaml) - at))
            cut = True
            break
        if len(line) > line_chars:
            out.append("%s ... (%d more characters)" % (line[:line_chars], len(line) - line_chars))
            cut = True
        else:
            out.append(line)
        at += len(line) + 1
        shown += len(out[-1]) + 1
    if not cut:
        return case_yaml
    return "\n".join(out).rstrip("\n") + "\n(cut short: the whole case is in %s)\n" % path


def _number(v) -> str:
    """A measured value as the shortest text that reads back as the same
    double (repr): 6 significant digits printed 1.00000001 as 1, next to a
    message that says it exceeds 1."""
    try:
        return repr(float(v))
    except (TypeError, ValueError):
        return str(v)


def format_finding(f: Finding, spec: str, target: str, seed: Optional[int] = None) -> str:
    if f.kind == "invariant":
        head = "kprop: %s: invariant %s failed on %s" % (spec, f.invariant, target)
    elif f.kind == "replay":
        head = "kprop: %s: a stored counterexample fails again on %s" % (spec, target)
    else:
        head = "kprop: %s: the target %s (%s)" % (spec, {"error": "raised an error", "crash": "crashed",
                                                      "hang": "hung"}.get(f.kind, f.kind), target)
    lines = [head + (", seed %d" % seed if seed is not None else ""), "  " + f.message.replace("\n", "\n  ")]
    if f.while_checking:
        lines.append("  while checking: %s (an invariant may call the target on a case it derives from this one: "
                     "the replay repeats that call)" % f.while_checking)
    if f.measured:
        lines.append("  measured: " + ", ".join("%s = %s" % (n, _number(v)) for n, v in f.measured))
    if f.traceback:
        lines.append("  raised by the target:\n    " + f.traceback.rstrip().replace("\n", "\n    "))
    if f.kind == "hang":  # a hang is not shrunk: each try would cost the timeout
        lines.append("case (not shrunk: a hang; size %d)%s:" % (f.size, ": " + f.summary if f.summary else ""))
    elif f.kind != "replay":
        lines.append("shrunk case (size %d, from %d in %d steps)%s:" % (f.size, f.original_size, f.shrink_steps,
                                                                      ": " + f.summary if f.summary else ""))
    else:
        lines.append("case:")
    lines.append("  " + _shown_case(f.case_yaml, f.path).rstrip().replace("\n", "\n  "))
    if f.store_note:  # the corpus could not be written (the case went elsewhere), shrinking stopped, ...
        lines.append("note: " + f.store_note.replace("\n", " "))
    if f.path:
        lines.append("saved: " + f.path + (" (NOT in the corpus %s)" % f.corpus
                                           if f.corpus is not None and not f.in_corpus and f.kind != "replay"
                                           else ""))
    elif f.kind != "replay":
        lines.append("saved: nowhere (the case is printed above)")
    if f.replay:
        lines.append("replay: " + f.replay)
    return "\n".join(lines)


# The replay check's child: the finding's printed replay, run as printed
# where the target is in scope (its module's names), in a fresh interpreter
# with this process's sys.argv (a script's flags configure its kernel). Its
# answer is the last line that starts with the marker (the module under test
# may print when it is imported). A module whose import runs kprop.check (a
# script without `if __name__ == "__main__":`) is not re-run: that check
# would run whole in the child (_RecheckImport).
_RECHECK_MARK = "KPROP_RECHECK "
_RECHECK_SCRIPT = """
import importlib, importlib.util, json, sys
import kprop
from kprop import _check
a = json.loads(sys.argv[1])
sys.argv = a["argv"]
_check._RECHECK_IMPORTING = True
try:
    if a["file"]:
        spec = importlib.util.spec_from_file_location("__kprop_main__", a["module"])
        module = importlib.util.module_from_spec(spec)
        sys.modules["__kprop_main__"] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(a["module"])
except _check._RecheckImport:
    print(%r + json.dumps({"skipped": True}), flush=True)
    sys.exit(0)
_check._RECHECK_IMPORTING = False
scope = dict(vars(module), kprop=kprop)
try:
    exec(compile(a["replay"], "<replay>", "exec"), scope)
    out = {"failed": False, "detail": "the case passed"}
except kprop.Counterexample as e:
    out = {"failed": True, "detail": e.finding.message.split("\\n")[0]}
print(%r + json.dumps(out), flush=True)
""" % (_RECHECK_MARK, _RECHECK_MARK)
_RECHECK_IMPORTING = False


class _RecheckImport(BaseException):
    """Raised by kprop.check while the replay check's child imports the
    module under test (a BaseException: the module's own `except Exception`
    does not swallow it)."""


def _recheck_in_fresh_process(found, fn, replay_text, case_timeout) -> None:
    """prop_runner's replay check, for kprop.check: each finding's printed
    replay run as printed in a fresh interpreter, where the target's module
    is imported anew. A failure that needs this process's history (state the
    kernel keeps between calls: a cache, an autotuner, a counter; or a flag
    the caller set on the module) passes there, and the finding says so: its
    printed replay alone does not reproduce it. The file stays where it is:
    kprop.check's own replay of the corpus calls this very function. `found`
    are the run's finding dicts, changed in place. Only a function the
    printed line names as this run called it is re-run: a module-level
    function, or a pytest item's with its parametrize values bound; not a
    dict of functions, a method of a configured instance, a partial or a
    closure (whose printed lines run only where the caller has them)."""
    found = [d for d in found if d["path"]]
    if not found or os.environ.get("KPROP_RECHECK_CHILD"):
        return
    target = getattr(fn, "__wrapped__", fn)  # a pytest item's bound parametrize values (functools.wraps)
    if inspect.ismethod(target) and inspect.isclass(target.__self__):
        target = target.__func__  # a classmethod: its class is in scope
    if not inspect.isfunction(target):
        return  # a dict, a bound method of an instance, a partial, a callable object
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None) or ""
    if not module or not qualname or "<" in qualname:
        return
    file = module == "__main__" or not _on_path(module)
    if file:
        module = getattr(sys.modules.get(module), "__file__", None)
        if not module:
            return  # an interactive __main__
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, KPROP_RECHECK_CHILD="1", PYTHONPATH=os.pathsep.join(
        dict.fromkeys(os.path.abspath(p or os.getcwd()) for p in [here] + sys.path)))
    for d in found:
        replay = replay_text(d["path"], d["invariant"]) if d["kind"] == "invariant" else replay_text(d["path"])
        arg = json.dumps({"module": module, "file": file, "replay": replay, "argv": list(sys.argv)})
        try:
            r = subprocess.run([sys.executable, "-c", _RECHECK_SCRIPT, arg], env=env, capture_output=True,
                               text=True, timeout=2 * case_timeout + 60)
            lines = [l for l in r.stdout.splitlines() if l.startswith(_RECHECK_MARK)]
            got = json.loads(lines[-1][len(_RECHECK_MARK):]) if lines else None
        except (OSError, ValueError, subprocess.TimeoutExpired) as e:
            got, r = None, e
        if got is not None and got.get("skipped"):
            return  # importing the module runs kprop.check
        if got is None:
            why = getattr(r, "stderr", None) or str(r)
            if isinstance(why, bytes):  # a TimeoutExpired's output is bytes
                why = why.decode("utf-8", "replace")
            d["store_note"] = _joined(d["store_note"], "not known to reproduce: its printed replay, re-run in a "
                                                       "fresh process, did not run through (%s)" %
                                      (why.strip().splitlines() or ["no output"])[-1])
            continue
        # An invariant's failure again (the replay's message starts with its
        # name), or the target's failure again: reproduced.
        if got["failed"] and (d["kind"] != "invariant" or got["detail"].startswith(d["invariant"] + ": ")):
            continue
        why = got["detail"] if not got["failed"] else "it failed otherwise: %s" % got["detail"]
        d["store_note"] = _joined(d["store_note"], (
            "WARNING: re-run in a fresh process, the printed replay did not fail (%s). The failure depends on "
            "state outside the stored case: state the target keeps between calls, a setting made before the "
            "call (a flag set on its module), uninitialised memory, a race; the file alone does not reproduce "
            "it" % why))


def _joined(note: str, more: str) -> str:
    return more if not note else note + "; " + more


def _scratch(corpus: Optional[str]) -> str:
    if corpus is not None:
        return os.path.join(corpus, "findings")
    return os.path.join(tempfile.gettempdir(), "kprop-findings-%d" % os.getuid())


# ---------------------------------------------------------------------- entry
def _impl(name: str, call, fn, tensors: str, isolate: bool) -> Dict[str, Any]:
    return {"name": name, "call": call, "exec": _worker_command(fn, tensors) if isolate else None}


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


# prop_runner's --seed range: a seed printed here can be given to it.
MAX_SEED = 9200000000000000000


def _search_args(search, search_time):
    """search= and search_time= as the extension takes them: (on/off/None,
    its case budget or None, its time budget or None), as prop_runner's
    --search[=false], --search-trials and --search-time."""
    if search is not None and not isinstance(search, (bool, np.bool_)) and not _is_int(search):
        raise TypeError("kprop: search must be True, False, a number of search cases or None, got %r" % (search,))
    trials = None
    if search is not None and not isinstance(search, (bool, np.bool_)):
        if not 1 <= search <= 10 ** 9:
            raise ValueError("kprop: search=N must be in [1, 10**9] search cases, got %d" % search)
        trials, search = int(search), True
    if search_time is not None:
        if not isinstance(search_time, (int, float, np.integer, np.floating)) or isinstance(search_time, (bool, np.bool_)):
            raise TypeError("kprop: search_time must be a number of seconds, got %r" % (search_time,))
        if not math.isfinite(search_time) or search_time < 0:
            raise ValueError("kprop: search_time must be finite and 0 or more seconds, got %r" % (search_time,))
        if search is False:
            raise ValueError("kprop: search=False contradicts search_time, which turns the search on")
        search = True
    return (None if search is None else bool(search)), trials, (None if search_time is None else float(search_time))


def _check_run_args(seed, trials, time, case_timeout, isolate, invariants=None, fail_fast=False) -> None:
    """The run settings' types and ranges, as prop_runner checks its flags:
    a clear TypeError or ValueError here, not a cast error in the extension."""
    for name, value in (("isolate", isolate), ("fail_fast", fail_fast)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError("kprop: %s must be True or False, got %r" % (name, value))
    if invariants is not None and (isinstance(invariants, (bytes, Mapping)) or not all(
            isinstance(name, str) for name in invariants)):
        raise TypeError("kprop: invariants must be invariant names (str), got %r" % (invariants,))
    if invariants is not None and len(invariants) == 0:
        # An empty selection checks nothing; None (the default) is every invariant.
        raise ValueError("kprop: invariants=[] names no invariant to check; leave it out (None) to check every one")
    if seed is not None:
        if not _is_int(seed):
            raise TypeError("kprop: seed must be an int, got %r" % (seed,))
        if not 0 <= seed <= MAX_SEED:
            raise ValueError("kprop: seed must be in [0, %d] (prop_runner's --seed range), got %d" % (MAX_SEED, seed))
    if trials is not None:
        if not _is_int(trials):
            raise TypeError("kprop: trials must be an int, got %r" % (trials,))
        if not 1 <= trials <= 10 ** 9:
            raise ValueError("kprop: trials must be in [1, 10**9], got %d" % trials)
    # case_timeout as run.case_timeout_s: below a millisecond the deadline was 0 ns, which is none.
    for name, value, low in (("time", time, "0 or more"), ("case_timeout", case_timeout, "in [0.001, 1e7]")):
        if value is None:
            continue
        if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, (bool, np.bool_)):
            raise TypeError("kprop: %s must be a number of seconds, got %r" % (name, value))
        if not math.isfinite(value) or value < 0 or (name == "case_timeout" and not 0.001 <= value <= 1e7):
            raise ValueError("kprop: %s must be finite and %s seconds, got %r" % (name, low, value))
    if case_timeout is not None and not isolate:
        raise ValueError("kprop: case_timeout needs isolate=True: in process a case has no time limit (a timed-out "
                         "call could only be stopped by ending this interpreter)")


def _settings(*, seed=None, trials=None, time=None, case_timeout=None, isolate=False, invariants=None,
              fail_fast=False, search=None, search_time=None, max_case_mb=None, domain=None, corpus=None,
              suppress_health_check=None):
    """kprop.check's run settings checked (types and ranges, as prop_runner
    checks its flags) and made plain: (invariants, search on/off, search
    cases, search time, max_case_mb, domain, suppress_health_check). What the
    spec says of the domain= keys is spec_info(domain=)'s to check."""
    if isinstance(invariants, str):
        invariants = [invariants]  # one name, not its letters
    elif invariants is not None and not isinstance(invariants, (bytes, Mapping)):
        try:
            invariants = list(invariants)  # a generator is read once, here
        except TypeError:
            raise TypeError("kprop: invariants must be invariant names (str), got %r" % (invariants,)) from None
    _check_run_args(seed, trials, time, case_timeout, isolate, invariants, fail_fast)
    search_on, search_trials, search_time = _search_args(search, search_time)
    if max_case_mb is not None:
        if not _is_int(max_case_mb) or not 1 <= max_case_mb <= 1 << 30:  # a NumPy integer too, as seed's
            raise ValueError("kprop: max_case_mb must be an integer of MB in [1, 2^30] (the memory one case "
                             "may take here), got %r" % (max_case_mb,))
        max_case_mb = int(max_case_mb)
    if domain is not None and not isinstance(domain, Mapping):
        raise TypeError("kprop: domain must be a dict of domain keys (e.g. {'dtypes': ['f32']}), got %r" % (domain,))
    if corpus is not None and not isinstance(corpus, (str, os.PathLike)):
        raise TypeError("kprop: corpus must be a folder's path or None, got %r" % (corpus,))
    domain = _plain(domain, "domain") if domain is not None else None
    return (invariants, search_on, search_trials, search_time, max_case_mb, domain,
            _health_checks(suppress_health_check))


HEALTH_CHECKS = ("declined", "discarded", "too_slow")


def _health_checks(names) -> List[str]:
    """suppress_health_check= as a list of names (one name, or any
    iterable of them), each one of HEALTH_CHECKS: prop_runner's
    --suppress-health-check, added to the spec's run.suppress_health_check."""
    if names is None:
        return []
    if isinstance(names, str):
        names = [names]  # one name, not its letters
    try:
        names = list(names)
    except TypeError:
        raise TypeError("kprop: suppress_health_check must be health check names (%s), got %r" % (
            ", ".join(HEALTH_CHECKS), names)) from None
    for n in names:
        if n not in HEALTH_CHECKS:
            close = difflib.get_close_matches(str(n), HEALTH_CHECKS, n=1)
            raise ValueError("kprop: suppress_health_check: %r is not a health check%s; valid: %s" % (
                n, " (did you mean %r?)" % close[0] if close else "", ", ".join(HEALTH_CHECKS)))
    return list(dict.fromkeys(names))


def _args(spec, fn, *, reference, extra_invariants, profile, seed, trials, time, invariants, corpus, isolate,
          tensors, device, case_timeout, domain=None, fail_fast=False, search=None, search_time=None,
          max_case_mb=None, suppress_health_check=None):
    """Resolves the spec and builds the extension's arguments: (text, is_text,
    info, args, the target's trampoline, the reference's or None, the run's _Stop)."""
    invariants, search_on, search_trials, search_time, max_case_mb, domain, suppressed = _settings(
        seed=seed, trials=trials, time=time, case_timeout=case_timeout, isolate=isolate, invariants=invariants,
        fail_fast=fail_fast, search=search, search_time=search_time, max_case_mb=max_case_mb, domain=domain,
        corpus=corpus, suppress_health_check=suppress_health_check)
    text, is_text = _resolve_spec(spec)
    info = spec_info(spec, profile, max_case_mb)
    stopper = _Stop()
    target = _Target(fn, info["ops"], tensors, device, stopper=stopper)
    ref_target = None
    a = {"target": _impl(_target_name(fn), target, fn, tensors, isolate), "reference": None}
    if reference is not None:
        ref_target = _Target(reference, info["ops"], tensors, device, role="reference=", stopper=stopper)
        a["reference"] = _impl("python-reference:" + _target_name(reference)[len("python:"):], ref_target,
                               reference, tensors, isolate)
    extra = _extra_invariants(extra_invariants, info, stopper)
    selected = list(invariants or [])
    if selected:
        # invariants= selects among the spec's invariants; a function passed
        # in extra_invariants always runs (left out of the selection, it was
        # silently never called).
        selected += [e[0] for e in extra if e[0] not in selected]
    a.update(extra=extra, profile=profile or "",
             domain=json.dumps(domain) if domain else "", max_case_mb=max_case_mb, seed=seed, trials=trials,
             time=None if time is None else float(time), invariants=selected,
             corpus=None if corpus is None else os.fspath(corpus), scratch=_scratch(corpus),
             case_timeout=None if case_timeout is None else float(case_timeout), fail_fast=bool(fail_fast),
             search=search_on, search_trials=search_trials, search_time=search_time,
             suppress_health_check=suppressed)
    return text, is_text, info, a, target, ref_target, stopper


def _spec_ref(spec, text: str, is_text: bool):
    """What a printed replay names: the spec's name or path, or a dict spec
    itself (repr'd as a literal, so the replay runs as printed)."""
    return spec if isinstance(spec, str) else text if not is_text else _plain(spec, "spec")


def _python_rerun(message: str, spec_ref, fn, opts: Mapping[str, Any]) -> str:
    """A reference failure's error ends "; the case is in PATH (re-run it:
    CALL)", the runner's call without this run's reference= and the other
    options: the call _replay_text makes of them instead."""
    m = re.search(r"; the case is in (.+) \(re-run it: .*\)$", message, re.S)
    if not m:
        return message
    return "%s; the case is in %s (re-run it: %s)" % (message[:m.start()], m.group(1),
                                                      _replay_text(spec_ref, fn, m.group(1), opts))


def _with_case(message: str, path: str, spec_ref, fn, opts: Mapping[str, Any]) -> str:
    """A reference failure's error while replaying the stored case at path,
    ending as a fresh case's does: "; the case is in PATH (re-run it: CALL)"."""
    if "; the case is in " in message:
        return _python_rerun(message, spec_ref, fn, opts)
    return "%s; the case is in %s (re-run it: %s)" % (message, path, _replay_text(spec_ref, fn, path, opts))


def _fn_text(fn) -> str:
    """fn as the printed replay names it, so that it runs where the test's
    class or function is in scope: a method of a class (a pytest test
    class's test_m, bound to a fresh instance) as `TestK().test_m`, a
    classmethod as `TestK.test_c`, a staticmethod's function as
    `TestK.test_s`; a function by its name. The bare name printed for a
    method (`test_m`) was a NameError. A class defined inside a function
    (`<locals>` in its name) cannot be named: its method by its name."""
    if inspect.ismethod(fn):
        owner = fn.__self__
        cls = owner if inspect.isclass(owner) else type(owner)
        if "<" not in cls.__qualname__:
            return "%s%s.%s" % (cls.__qualname__, "" if owner is cls else "()", fn.__name__)
    elif inspect.isfunction(fn):
        qualname = getattr(fn, "__qualname__", "")
        if "." in qualname and "<" not in qualname:
            return qualname
    return getattr(fn, "__name__", "fn")


def _replay_text(spec_ref, fn, path, opts: Mapping[str, Any]) -> str:
    """kprop.replay(...) with the options of the run that found the case
    (those not at their defaults), so that it runs the case the same way."""
    parts = [repr(spec_ref), _fn_text(fn), repr(path)]
    for key, value in opts.items():
        if value is None or value is False or (key == "tensors" and value == "numpy") or (
                key in ("invariants", "extra_invariants", "domain") and not value):
            continue
        if key == "reference":
            text = getattr(value, "__name__", "reference")
        elif key == "extra_invariants":
            text = "[%s]" % ", ".join(getattr(f, "__name__", "f") for f in value)
        elif key == "invariants":
            text = repr([value] if isinstance(value, str) else list(value))
        else:
            text = repr(value)
        parts.append("%s=%s" % (key, text))
    text = "kprop.replay(%s)" % ", ".join(parts)
    # A pytest item's parametrized target is shown as functools.partial(...):
    # the line imports what it names, so that it runs as printed
    # (and the modules its parametrize values name: numpy for np.float32).
    if "functools." not in parts[1]:
        return text
    return "import %s; %s" % (", ".join(["functools"] + list(getattr(fn, "_kprop_replay_imports", []))), text)


def check(spec, fn: Union[Callable, Mapping[str, Callable]], *, seed: Optional[int] = None,
          trials: Optional[int] = None, time: Optional[float] = None,
          invariants: Optional[Sequence[str]] = None, corpus: Optional[str] = ".kprop/",
          isolate: bool = False, tensors: str = "numpy", device: Optional[str] = None,
          replay_stored: bool = True, case_timeout: Optional[float] = None,
          reference: Union[None, Callable, Mapping[str, Callable]] = None,
          extra_invariants: Optional[Sequence[Callable]] = None, profile: Optional[str] = None,
          domain: Optional[Mapping[str, Any]] = None, fail_fast: bool = False,
          search: Union[None, bool, int] = None, search_time: Optional[float] = None,
          max_case_mb: Optional[int] = None,
          suppress_health_check: Union[None, str, Sequence[str]] = None) -> CheckResult:
    """Runs `spec` with `fn` as its target, in this process.

    spec: a path, a shipped spec name ("attention_fwd") or a dict.
    fn: called once per op request with the op's input tensors (read-only
        NumPy views, valid during the call) and attributes as keyword
        arguments; returns the outputs as a dict, a tuple in declared order or
        (one output) the array. Families with several ops: a dict {op: function},
        or one function that also gets op=NAME. Raise kprop.Unsupported to decline.
    seed, trials, time: override the spec's run settings (seed 0: a fresh one).
    invariants: only these of the spec's invariants (every extra_invariants
        function runs whatever it names; naming one there is allowed).
    corpus: folder of stored counterexamples (CORPUS/<spec>/*.yaml): they are
        replayed first (replay_stored), and a new one is stored there. None:
        nothing stored (a failing case goes to a temp folder).
    isolate: run fn (and reference) in a worker process (python -m kprop.worker),
        so a crash or a hang (run.case_timeout_s, or case_timeout) is reported
        with the case saved instead of ending this process; fn must be importable.
    tensors: "numpy" (default) or "torch" (torch.from_numpy, zero-copy, moved to
        `device`, by default CUDA when available).
    reference: your own eager code as the oracle of the comparative invariants
        (instead of the spec's fp64 reference): called like fn, but with every
        floating-point input widened to float64 and its outputs taken in
        float64.
    extra_invariants: @kprop.invariant functions over the named tensors,
        checked next to the spec's own invariants.
    profile: one of the spec's profiles (its domain and run settings).
    domain: domain keys replaced for this run, after the profile (prop_runner's
        --domain), e.g. {"dtypes": ["f32"]} for a kernel that takes f32 only:
        the dtypes it would decline otherwise fail the `declined` health check.
    fail_fast: end the run at the first counterexample (prop_runner
        --fail-fast): the Counterexample carries that one finding, and the
        invariants the run did not finish are "not_run" in its result, never passed.
    search: after the random cases, hill-climb toward the worst error/allowed
        ratio (prop_runner --search): True with the spec's budget, N for N
        search cases, False to turn a spec's search off, None the spec's
        setting. A failure it finds is shrunk, stored and raised like any
        other; result.search_cases counts its cases, result.report["search"]
        the ratios it reached.
    search_time: the search's own time budget in seconds (0: none); implies
        search. `time` bounds the random cases only.
    max_case_mb: the memory one case may take on this machine, in MB
        (prop_runner's --max-case-mb): replaces run.max_case_mb of the spec
        and its profiles, so a domain= whose largest case needs more loads.
    suppress_health_check: health checks that do not fail this run, any of
        "declined", "discarded", "too_slow" (prop_runner's
        --suppress-health-check): added to the spec's run.suppress_health_check.
        An invariant that checked no case still never passes.

    Returns a CheckResult; raises Counterexample (an AssertionError) on a
    failure, Skipped when every case was declined, HealthCheckFailure when the
    run checked too little to count.
    """
    if _RECHECK_IMPORTING:
        raise _RecheckImport()
    extra_invariants = _extra_list(extra_invariants)
    if not isinstance(replay_stored, (bool, np.bool_)):
        raise TypeError("kprop: replay_stored must be True or False, got %r" % (replay_stored,))
    text, is_text, info, args, target, ref_target, stopper = _args(
        spec, fn, reference=reference, extra_invariants=extra_invariants, profile=profile, seed=seed,
        trials=trials, time=time, invariants=invariants, corpus=corpus, isolate=isolate, tensors=tensors,
        device=device, case_timeout=case_timeout, domain=domain, fail_fast=fail_fast, search=search,
        search_time=search_time, max_case_mb=max_case_mb, suppress_health_check=suppress_health_check)
    spec_ref = _spec_ref(spec, text, is_text)
    name = _isolated_name(fn) if isolate else args["target"]["name"]
    targets = [t for t in (target, ref_target) if t is not None]
    command = _runner_replays(args, is_text)
    opts = dict(invariants=invariants, isolate=isolate, tensors=tensors, device=device, case_timeout=case_timeout,
                reference=reference, extra_invariants=extra_invariants, profile=profile, domain=domain,
                max_case_mb=max_case_mb)

    replayed = outside = 0
    if replay_stored and corpus is not None:
        stored_dir = os.path.join(corpus, info["name"])
        files = sorted(glob.glob(os.path.join(stored_dir, "*.yaml"))) if os.path.isdir(stored_dir) else []
        # A case of an invariant this run lacks (another test's extra
        # invariant) is another run's to replay: not read as a broken file.
        known = _known_invariants(info, args)
        files = [p for p in files if _replayable(p, known, info["family"], info["name"])]
        # A case outside this run's domain (found by a wider run: every
        # dtype, where this one is domain={"dtypes": ["f32"]}) is not one
        # this target was asked to take: replayed, it failed a correct
        # f32-only kernel on a bf16 case. Left alone, and counted.
        inside = [p for p in files if not _outside_domain(text, is_text, args, p)]
        outside = len(files) - len(inside)
        for path in inside:  # one by one: the cases left alone are never run
            try:
                got = stopper.call(_kprop.replay, text, is_text, args, path)
            except ValueError as e:  # the reference failed on the stored case: which one, as a fresh case's says
                raise ValueError(_with_case(str(e), path, spec_ref, fn, opts)) from None
            for row in got["rows"]:
                if row["error"]:
                    raise ValueError("kprop: stored case %s cannot be read: %s" % (row["path"], row["error"]))
                if row["stale"]:
                    raise ValueError("kprop: stored case %s: %s" % (row["path"], row["stale"]))
                if not row["ok"]:
                    f = _stored_finding(row, targets, spec_ref, fn, command, opts, corpus)
                    counterexample = Counterexample(format_finding(f, info["name"], name), f)
                    stopper.finish(counterexample)
                    raise counterexample
                # A stored case the target declined, or no invariant could
                # check, was not replayed (kprop.replay does not count it either).
                replayed += bool(row["checked"])
            if got["stopped"]:
                break
        stopper.finish()

    try:
        r = stopper.call(_kprop.run, text, is_text, args, interrupted_result=True)
    except ValueError as e:  # the reference failed on a case: its re-run, as this run was called
        raise ValueError(_python_rerun(str(e), spec_ref, fn, opts)) from None
    def replay_text(path, invariant=""):
        # A finding of one invariant replays that invariant, as prop_runner's
        # --invariant and each pytest item's: with every one, another that
        # the case also fails could be the one the replay raises.
        return _replay_text(spec_ref, fn, path, dict(opts, invariants=[invariant]) if invariant else opts)

    found = [i["counterexample"] for i in r["invariants"] if i["counterexample"] is not None]
    found += [r["crash"]] if r["crash"] is not None else []
    if not r["stopped"] and _status(r["status"]) != "interrupted" and stopper.exception is None:
        _recheck_in_fresh_process(found, fn, replay_text,
                                  case_timeout if case_timeout is not None else info["case_timeout_s"])
    findings = [_finding(d, targets, replay_text, command, corpus, opts) for d in found]
    result = _result(r, findings, replayed)
    result.replay_outside_domain = outside
    if command:  # the worker's command line runs it (result.report["target"]); messages name fn
        result.target = name
    status = result.status
    if status == "gave_up" and not findings and result.invariants and all(
            i.status == "not_applicable" for i in result.invariants):
        # Every selected invariant is n/a for this target (workspace_bounded
        # for a kernel that does not allocate from kprop's Workspace): there
        # was nothing to check, which is a skip, not a failure and not a pass.
        result.status = status = "skipped"
        result.detail = "; ".join("invariant %s is n/a%s" % (
            i["name"], ": " + i["last_discard"] if i["last_discard"] else "") for i in r["invariants"])
    if (status == "interrupted" or r["stopped"]) and stopper.exception is None:  # Ctrl-C: the user's stop wins
        raise _interrupted(findings, result)
    if findings:
        message = "\n\n".join(format_finding(f, result.spec, result.target, result.seed) for f in findings)
        if len(findings) > 1:
            message = "%d failures\n\n%s" % (len(findings), message)
        if stopper.exception is not None:
            message += "\n\n(found before the run was stopped by %s: %s)" % (
                type(stopper.exception).__name__, stopper.exception)
        counterexample = Counterexample(message + "\n\n" + result.summary(), findings[0], result)
        stopper.finish(counterexample)
        raise counterexample
    stopper.finish()
    if status == "skipped":
        raise _skipped("kprop: %s on %s: %s" % (result.spec, result.target, result.detail), result)
    if status == "gave_up":
        raise HealthCheckFailure("kprop: %s on %s checked too little to pass:\n%s\n%s" % (
            result.spec, result.target, "\n".join("  %s: %s" % (name, _in_python_words(text))
                                                   for name, text in result.health), result.summary()),
            result)
    return result


def _interrupted(findings: List["Finding"], result: "CheckResult") -> KeyboardInterrupt:
    """The KeyboardInterrupt of a run stopped by Ctrl-C: still a
    KeyboardInterrupt (pytest stops), but a counterexample the run had found
    (shrunk as far as it got) was saved, and the user is told where and how
    to replay it: in the message (pytest shows it), on stderr (for code
    that catches the interrupt without printing it), and as the exception's
    `findings` and `result`."""
    message = "kprop: interrupted"
    if findings:
        lines = ["kprop: interrupted; the counterexample%s found so far (shrunk as far as the run got):" % (
            "s" if len(findings) > 1 else "")]
        for f in findings:
            what = ("invariant %s" % f.invariant) if f.invariant else ("target %s" % f.kind)
            lines.append("  %s: %s" % (what, f.message.splitlines()[0] if f.message else ""))
            lines.append("  saved: %s" % (f.path or "(not saved: %s)" % f.store_note))
            lines.append("  replay: %s" % f.replay)
        message = "\n".join(lines)
        try:
            sys.stderr.write(message + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
    e = KeyboardInterrupt(message)
    e.findings = findings
    e.result = result
    return e


def _in_python_words(hint: str) -> str:
    """A health check's advice names prop_runner's flags: check()'s keywords instead."""
    hint = hint.replace("run.time_budget_s (--time)", "time=")
    hint = re.sub(r"\(--suppress-health-check (\w+) for one run\)", r"(suppress_health_check=['\1'] for one run)",
                  hint)
    hint = re.sub(r"prop_runner --domain '\{(\w+): \[\.\.\.\]\}'", r"domain={'\1': [...]}", hint)
    hint = hint.replace("prop_runner --domain '{KEY: VALUE}'", "domain={KEY: VALUE}")
    return hint.replace("--list --spec shows the keys", "kprop.spec_info(spec) shows the keys")


def _traceback_for(targets, message: str) -> str:
    for t in targets:
        for key, text in t.tracebacks.items():
            if message.endswith(key):
                return text
    return ""


def _extra_list(extra) -> Optional[list]:
    """extra_invariants as a list: one function, or any iterable of them (a
    set or a generator, read once, here)."""
    if extra is None:
        return None
    if callable(extra):
        return [extra]  # one function
    try:
        return list(extra)
    except TypeError:
        raise TypeError("kprop: extra_invariants takes @kprop.invariant functions, not %r" % (extra,)) from None


def _extra_name(f) -> Optional[str]:
    """The name an extra invariant runs under (its @kprop.invariant name=, else the function's)."""
    return getattr(getattr(f, "_kprop_invariant", None), "name", None) or getattr(f, "__name__", None)


def _runner_replays(args, is_text: bool) -> Optional[str]:
    """The isolated worker's command when a finding's replay is prop_runner's
    (`prop_runner --spec FILE --target 'exec:...'`), else None: a dict spec
    is no file that --spec could name, so its replay is kprop.replay's
    (with isolate=True)."""
    return None if is_text else args["target"]["exec"]


def _by_extra_invariant(invariant: str, opts: Mapping[str, Any]) -> bool:
    """A finding of an extra (Python) invariant, which prop_runner does not
    know: its replay is kprop.replay's, not a prop_runner command."""
    return bool(invariant) and invariant in {_extra_name(f) for f in _extra_list(opts.get("extra_invariants")) or []}


def _stored_finding(row, targets, spec_ref, fn, command, opts, corpus=None) -> Finding:
    # The case alone, as a fresh finding's case_yaml (the file's header, its
    # spec, invariant and message, is the rest of the Finding); the file's
    # text if it does not read.
    text = _kprop.stored_case(row["path"])
    if not text:
        with open(row["path"]) as f:
            text = f.read()
    # The invariant the case failed here (every invariant of the run checks
    # it), not always the one the file was found by.
    invariant = row["failed_invariant"] or row["invariant"]
    if command and not _by_extra_invariant(invariant, opts):
        # prop_runner's own words for it (the spec's file, the worker, and the
        # run's --reference, --profile, --domain and --case-timeout)
        replay = _with_runner(row["replay_command"])
    else:
        replay = _replay_text(spec_ref, fn, row["path"], opts)
    # A stored case kprop.check replayed from its corpus is in that corpus
    # (it was always said not to be: in_corpus False for its own file).
    in_corpus = corpus is not None and os.path.commonpath(
        [os.path.realpath(row["path"]), os.path.realpath(corpus)]) == os.path.realpath(corpus)
    return Finding(invariant=invariant, kind="replay", message=row["detail"], measured=[], case_yaml=text,
                   path=row["path"], replay=replay, traceback=_traceback_for(targets, row["detail"]),
                   in_corpus=in_corpus, corpus=None if corpus is None else os.fspath(corpus))


def _stored_invariants(path: str) -> list:
    """The invariants a stored case file records: its top-level one, then each
    of its also_found_against ("" for a target that crashed, hung or raised);
    empty for a file that does not read (the replay says why)."""
    return list(_kprop.stored_invariants(os.fspath(path)))


def _outside_domain(text: str, is_text: bool, args: Mapping[str, Any], path: str) -> str:
    """Why the stored case at path lies outside the domain of a run with
    these arguments (_args's: its profile and domain=), in the family's own
    words (its in_domain, what the generator and shrinker keep to); "" when
    inside, or when the file does not read (the replay says why)."""
    return _kprop.stored_outside_domain(text, is_text, args["profile"], args["domain"], args["max_case_mb"] or 0,
                                        os.fspath(path))


def _stored_outside_domain(spec, path: str, *, profile: Optional[str] = None,
                           domain: Optional[Mapping[str, Any]] = None, max_case_mb: Optional[int] = None,
                           **_) -> str:
    """_outside_domain for a run given these options (a pytest item's)."""
    text, is_text = _resolve_spec(spec)
    domain = json.dumps(_plain(domain, "domain")) if domain else ""
    return _kprop.stored_outside_domain(text, is_text, profile or "", domain, max_case_mb or 0, os.fspath(path))


def _known_invariants(info, args) -> set:
    """The invariants a run has: the spec's and its extra_invariants'."""
    return set(info["invariants"]) | {extra[0] for extra in args["extra"]}


_REGISTERED: Dict[Tuple[str, str], bool] = {}


def _registered(family: str, name: str) -> bool:
    """Whether `family` registers an invariant `name` (a stored case may name
    one the spec does not list: the extension replays it)."""
    key = (family, name)
    if key not in _REGISTERED:
        probe = json.dumps({"spec": "kprop_probe", "family": family, "invariants": [name]})
        try:
            _kprop.spec_info(probe, True, "")
            _REGISTERED[key] = True
        except ValueError:
            _REGISTERED[key] = False
    return _REGISTERED[key]


def _corpus_files(folder: str) -> List[str]:
    """The .yaml files of a corpus folder and its subfolders (not hidden
    ones), sorted: what the extension's replay of the folder reads
    (src/corpus.cpp, list_corpus)."""
    out = []
    for root, _, names in os.walk(folder):
        out.extend(os.path.join(root, n) for n in names if n.endswith(".yaml") and not n.startswith("."))
    return sorted(out)


def _replayable(path: str, known: set, family: str, spec_name: str) -> bool:
    """Whether a run with these invariants replays the stored case at path:
    not one kprop.check found (found_by: python) by an invariant it lacks
    (another test's @kprop.invariant). A case of another spec is replayed,
    so that the replay says so (an error, or a skip in that spec's folder
    of a corpus root, as prop_runner's), and so is a hand-written file
    naming an invariant nothing has (a typo: an error, as prop_runner's),
    not left alone as another run's."""
    stored_spec = _kprop.stored_spec(os.fspath(path))
    if stored_spec and stored_spec != spec_name:
        return True
    names = _stored_invariants(path)
    if not names or any(not name or name in known or _registered(family, name) for name in names):
        return True
    return _kprop.stored_found_by(os.fspath(path)) != "python"


def replay(spec, fn, path: str, *, invariants: Optional[Sequence[str]] = None, isolate: bool = False,
           tensors: str = "numpy", device: Optional[str] = None, case_timeout: Optional[float] = None,
           reference: Union[None, Callable, Mapping[str, Callable]] = None,
           extra_invariants: Optional[Sequence[Callable]] = None, profile: Optional[str] = None,
           domain: Optional[Mapping[str, Any]] = None, max_case_mb: Optional[int] = None) -> int:
    """Replays a stored case file (or every case in a folder) on fn: raises
    Counterexample for the first that fails; returns how many were checked
    (a case declined by fn, or one no invariant could check, is not counted;
    in a folder, a case outside this run's domain -- its profile and domain=
    -- is not handed to fn, as kprop.check's corpus replay leaves it)."""
    return _replay(spec, fn, path, invariants=invariants, isolate=isolate, tensors=tensors, device=device,
                   case_timeout=case_timeout, reference=reference, extra_invariants=extra_invariants,
                   profile=profile, domain=domain, max_case_mb=max_case_mb)[0]


def _replay(spec, fn, path: str, *, invariants=None, isolate=False, tensors="numpy", device=None,
            case_timeout=None, reference=None, extra_invariants=None, profile=None,
            domain=None, max_case_mb=None) -> Tuple[int, List[str]]:
    """replay's work: (cases checked, why each case replayed but not counted
    was not: the runner's words, "declined: ...", "no invariant checked it
    (...)", ...)."""
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    extra_invariants = _extra_list(extra_invariants)
    text, is_text, info, args, target, ref_target, stopper = _args(
        spec, fn, reference=reference, extra_invariants=extra_invariants, profile=profile, seed=None,
        trials=None, time=None, invariants=invariants, corpus=None, isolate=isolate, tensors=tensors,
        device=device, case_timeout=case_timeout, domain=domain, max_case_mb=max_case_mb)
    opts = dict(invariants=invariants, isolate=isolate, tensors=tensors, device=device, case_timeout=case_timeout,
                reference=reference, extra_invariants=extra_invariants, profile=profile, domain=domain,
                max_case_mb=max_case_mb)
    path = os.fspath(path)
    known = _known_invariants(info, args)
    outside: List[str] = []
    if os.path.isdir(path):  # a case of an invariant this run lacks is another run's to replay
        # Every file the extension replays: the folder's whole tree (a corpus
        # root holds a folder per spec), as prop_runner --replay lists it.
        files = _corpus_files(path)
        foreign = {os.path.realpath(p) for p in files if not _replayable(p, known, info["family"], info["name"])}
        unknown = [p for p in files if os.path.realpath(p) in foreign]
        # So is a case outside this run's domain (a bf16 case a wider run
        # found, where this one is domain={"dtypes": ["f32"]}), as
        # kprop.check's replay of its corpus leaves it: handed to an
        # f32-only kernel it failed a correct one. A file named on its own
        # replays whatever its domain (as prop_runner --replay does).
        for p in files:
            if os.path.realpath(p) not in foreign:
                why = _outside_domain(text, is_text, args, p)
                if why:
                    foreign.add(os.path.realpath(p))
                    outside.append("%s: outside this run's domain (%s)" % (p, why))
    else:
        foreign, unknown = set(), []
        if not _replayable(path, known, info["family"], info["name"]):
            names = _stored_invariants(path)
            raise ValueError("kprop: stored case %s was found by invariant%s %s, which this run does not have "
                             "(pass the @kprop.invariant function in extra_invariants=)" % (
                                 path, "s" if len(names) > 1 else "", ", ".join("'%s'" % n for n in names)))
    try:
        rows = stopper.call(_kprop.replay, text, is_text, args, path)["rows"]
    except ValueError as e:
        if os.path.isdir(path):
            raise
        raise ValueError(_with_case(str(e), path, _spec_ref(spec, text, is_text), fn, opts)) from None
    checked, unchecked = 0, []
    for row in rows:
        if os.path.realpath(row["path"]) in foreign:
            continue
        if row["error"]:
            raise ValueError("kprop: %s" % row["error"])
        if row["stale"]:
            raise ValueError("kprop: %s: %s" % (row["path"], row["stale"]))
        if not row["ok"]:
            f = _stored_finding(row, [t for t in (target, ref_target) if t is not None],
                                _spec_ref(spec, text, is_text), fn, _runner_replays(args, is_text), opts)
            counterexample = Counterexample(format_finding(
                f, info["name"], _isolated_name(fn) if isolate else args["target"]["name"]), f)
            stopper.finish(counterexample)
            raise counterexample
        checked += row["checked"]
        if not row["checked"]:
            unchecked.append(row["detail"] or "not checked")
    stopper.finish()
    lacking = ["%s: not replayed: found by invariant %s, which this run does not have (pass the "
               "@kprop.invariant function in extra_invariants=)" % (p, ", ".join(
                   "'%s'" % n for n in _stored_invariants(p))) for p in unknown]
    return checked, unchecked + outside + lacking
