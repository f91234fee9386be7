"""kprop from Python: property-based testing of ML kernels against kprop's specs.

    import kprop

    def attention_fwd(q, k, v, scale, mask, key_lengths=None, allowed=None, **_):
        ...  # NumPy in, NumPy out
        return {"o": o, "lse": lse}

    kprop.check("attention_fwd", attention_fwd)  # raises kprop.Counterexample on a failure

and in pytest (the plugin is registered by the package):

    @kprop.spec("attention_fwd")
    def test_attention(q, k, v, scale, mask, key_lengths=None, allowed=None, **_):
        return attention_fwd(q, k, v, scale, mask, key_lengths, allowed)

See docs/PYTHON.md.
"""

import difflib as _difflib
import inspect as _inspect

from ._check import (SPECS_DIR, ArgumentMismatch, CheckResult, Counterexample, Discard, Finding,
                     HealthCheckFailure, InvariantResult, Skipped, Unsupported, assume, check, format_finding,
                     invariant, replay, shipped_specs, spec_info)
# bf16 helpers: NumPy has no bfloat16, so a bf16 tensor reaches fn as an ml_dtypes.bfloat16 array when
# ml_dtypes is importable (BFLOAT16 is then its dtype), else as a uint16 array of its raw bits (BFLOAT16
# is None), in process and isolated alike (docs/PYTHON.md, "Half precision").
from ._half import BFLOAT16, as_float32, bf16_to_float32, float32_to_bf16

# Mask kinds of attention (KPROP_MASK_* in include/kprop/abi/attention.h).
MASK_NONE, MASK_CAUSAL, MASK_KEY_PADDING, MASK_BOOLEAN = 0, 1, 2, 3

__version__ = "0.1.0"


def spec(name, **options):
    """Marks a test function as a kprop target for the pytest plugin: one
    pytest item per invariant of the spec and per extra invariant (and one per
    stored counterexample of those invariants, or of a target failure,
    replayed first). The function is the target: it receives the op's tensors
    and attributes and returns its outputs, as for kprop.check. `options` are
    kprop.check's (seed, trials, time, invariants, isolate, tensors, ...)."""

    if callable(name):
        # @kprop.spec without its argument: `name` is the decorated function.
        raise TypeError("kprop.spec: name the spec, as @kprop.spec(\"attention_fwd\") or "
                        "@kprop.spec(\"path/to/spec.yaml\"), not %r" % (name,))
    if "fail_fast" in options:
        raise TypeError("kprop.spec(%r): fail_fast does nothing here: each pytest item checks one invariant "
                        "(pytest -x stops at the first failing item)" % (name,))
    valid = [p for p in _inspect.signature(check).parameters if p not in ("spec", "fn", "fail_fast")]
    unknown = [k for k in options if k not in valid]
    if unknown:
        close = _difflib.get_close_matches(unknown[0], valid, n=1)
        raise TypeError("kprop.spec(%r): unknown option %r%s; valid: %s" % (
            name, unknown[0], " (did you mean %r?)" % close[0] if close else "", ", ".join(valid)))

    def mark(fn):
        if not callable(fn) and not isinstance(fn, classmethod):  # a classmethod is a test too (the plugin binds it)
            # A plugin or worker (a "plugin:lib.so" string) is prop_runner's target, not a Python one.
            raise TypeError("kprop.spec(%r) decorates a Python function (the target), not %r%s" % (
                name, fn, "; test a plugin: or exec: target with prop_runner --target" if isinstance(fn, str)
                and fn.split(":", 1)[0] in ("plugin", "exec") else ""))
        fn._kprop_spec = (name, dict(options))
        return fn

    return mark


__all__ = ["check", "replay", "spec", "invariant", "assume", "spec_info", "shipped_specs", "Unsupported",
           "Discard", "Counterexample", "ArgumentMismatch",
           "HealthCheckFailure", "Skipped", "CheckResult", "InvariantResult", "Finding", "format_finding",
           "SPECS_DIR", "BFLOAT16", "as_float32", "bf16_to_float32", "float32_to_bf16", "MASK_NONE", "MASK_CAUSAL", "MASK_KEY_PADDING", "MASK_BOOLEAN"]
