"""Cases per second of one NumPy target, in process vs the exec: worker.

    [KPROP_BENCH_SPEC=attention_fwd] PYTHONPATH=build/python .venv/bin/python python/bench/check_vs_worker.py [--trials 300]

Runs examples/python/<example>.py's function on the spec with a fixed seed
and trial count, first in process (kprop.check), then with isolate=True
(python -m kprop.worker: the exec: worker protocol of docs/EXTERNAL.md,
the path `prop_runner --target exec:...` takes), and prints both rates.
"""
import argparse
import importlib.util
import os
import sys

import kprop

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = {"attention_fwd": ("attention_fwd", "attention_fwd"), "layernorm": ("layernorm", "layernorm"),
            "softmax_topk": ("softmax_topk", "softmax_topk")}
SPEC = os.environ.get("KPROP_BENCH_SPEC", "attention_fwd")
_file, _name = EXAMPLES[SPEC]
_spec = importlib.util.spec_from_file_location("bench_example",
                                               os.path.join(HERE, "..", "..", "examples", "python", _file + ".py"))
_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_example)


def target(**kwargs):
    return getattr(_example, _name)(**kwargs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20261122)
    args = parser.parse_args()
    rates = {}
    for mode, isolate in (("in process", False), ("exec: worker", True)):
        r = kprop.check(SPEC, target, seed=args.seed, trials=args.trials, corpus=None, isolate=isolate)
        rates[mode] = r.cases_per_second
        print("%-13s %s: %d cases (%d checked) in %.2f s: %.1f cases/s"
              % (mode, SPEC, r.trials, r.checked, r.seconds, r.cases_per_second))
    print("in process / worker: %.2fx" % (rates["in process"] / rates["exec: worker"]))


if __name__ == "__main__":
    if "--spec" in sys.argv:
        sys.exit("set KPROP_BENCH_SPEC=name instead (the worker re-imports this file)")
    main()
