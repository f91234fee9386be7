#!/usr/bin/env python3
"""Kill table and false-positive count of the shipped declared-op examples.

    scripts/op_examples_stats.py [--runner build/prop_runner] [--python /usr/bin/python3]
                                 [--seeds 10] [--correct-seeds 4] [--correct-trials 5000]
                                 [--per-dtype] [EXAMPLE ...]

For each example (specs/ops/NAME.yaml with examples/ops/NAME.py; default: all):
  - every `--bug` the worker lists, run with seeds 1..--seeds at the spec's
    trial budget: killed on how many seeds, median trials and seconds to the
    first failing invariant, which invariants failed first, the shrunk dims;
  - the correct worker, --correct-seeds seeds (1001, 1002, ...) x
    --correct-trials trials: checked cases and failures (want 0), and the
    largest error/allowed ratio the tolerance checks reported; with
    --per-dtype, once per case dtype the spec lists (a temporary copy of the
    spec drawing that dtype only: the first input listing floating dtypes).
Prints Markdown tables; exits 1 if a bug survived a seed or the correct worker failed.
"""
import argparse
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(runner, spec, target, seed, trials=None):
    cmd = [runner, "--spec", spec, "--seed", str(seed), "--no-corpus", "--format", "json", "--target", target]
    if trials:
        cmd += ["--trials", str(trials), "--time", "0"]  # all the trials, past the spec's time budget
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()[-2000:]}")
    return out.returncode, json.loads(out.stdout)


def spec_per_dtype(spec, per_dtype):
    """[(dtype, spec path)]: the spec itself ("all"), or a temporary copy per case dtype."""
    if not per_dtype:
        return [("all", spec)]
    with open(spec) as f:
        doc = yaml.safe_load(f)
    floating = {"f16", "bf16", "f32", "f64"}
    for decl in (doc.get("op") or {}).get("inputs", {}).values():
        dts = decl.get("dtype") if isinstance(decl, dict) else None
        dts = [dts] if isinstance(dts, str) else dts
        if dts and dts[0] in floating:
            break
    else:
        return [("f32,f64", spec)]  # no input lists dtypes: the default
    folder = tempfile.mkdtemp(prefix="op_examples_stats_")
    out = []
    for dt in dts:
        decl["dtype"] = [dt]
        path = os.path.join(folder, f"{os.path.basename(spec)[:-5]}_{dt}.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
        out.append((dt, path))
    return out


def bugs_of(worker):
    text = open(worker).read()
    m = re.search(r"^BUGS = \(([^)]*)\)", text, re.M)
    return re.findall(r'"([a-z0-9_]+)"', m.group(1)) if m else []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("examples", nargs="*")
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "prop_runner"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--correct-seeds", type=int, default=4)
    ap.add_argument("--correct-trials", type=int, default=5000)
    ap.add_argument("--per-dtype", action="store_true", help="the correct worker once per case dtype")
    args = ap.parse_args()
    workers = glob.glob(os.path.join(ROOT, "examples/ops/*.py"))
    # Workers with a spec of their name (sort_reference.py is a reference, not an example).
    names = args.examples or sorted(
        os.path.basename(p)[:-3]
        for p in workers
        if os.path.exists(os.path.join(ROOT, "specs/ops", os.path.basename(p)[:-3] + ".yaml")))
    bad = False
    kills, correct = [], []
    for name in names:
        spec = os.path.join(ROOT, "specs/ops", name + ".yaml")
        worker = os.path.join(ROOT, "examples/ops", name + ".py")
        target = f"exec:{args.python} {worker}"
        for bug in bugs_of(worker):
            trials, seconds, first, dims = [], [], collections.Counter(), collections.Counter()
            for seed in range(1, args.seeds + 1):
                rc, rep = run(args.runner, spec, f"{target} --bug {bug}", seed)
                failed = [i for i in rep["invariants"] if i["status"] == "FAILED"]
                if rc != 1 or not failed:
                    continue
                f = min(failed, key=lambda i: (i["trials_to_fail"], i["seconds_to_fail"]))
                trials.append(f["trials_to_fail"])
                seconds.append(f["seconds_to_fail"])
                first[f["name"]] += 1
                cx = f.get("counterexample")
                if cx:
                    dims[re.sub(r" b?f(16|32|64)$", "", cx["summary"])] += 1
            bad |= len(trials) < args.seeds
            kills.append((name, bug, len(trials), trials, seconds, first, dims))
            print(f"  {name} --bug {bug}: killed {len(trials)}/{args.seeds}", file=sys.stderr)
        for dtype, path in spec_per_dtype(spec, args.per_dtype):
            drawn, checked, failures, ratio = 0, 0, 0, {}
            for k in range(args.correct_seeds):
                rc, rep = run(args.runner, path, target, 1001 + k, args.correct_trials)
                drawn += rep["trials"]
                checked += rep["checked"]
                failures += sum(1 for i in rep["invariants"] if i["status"] == "FAILED")
                for i in rep["invariants"]:
                    if i.get("max_error_ratio") is not None:
                        ratio[i["name"]] = max(ratio.get(i["name"], 0), i["max_error_ratio"])
            bad |= failures > 0
            worst = max(ratio.items(), key=lambda kv: kv[1]) if ratio else None
            correct.append((name, dtype, drawn, checked, failures, worst))
            print(f"  {name} correct ({dtype}): {checked} checked, {failures} failures", file=sys.stderr)

    med = lambda xs: f"{statistics.median(xs):g}" if xs else "-"
    print(f"Kill table: seeds 1..{args.seeds}, the spec's trial budget\n")
    print("| example | bug | killed | median trials | median s | first failing invariant | shrunk dims |")
    print("|---|---|---|---|---|---|---|")
    for name, bug, killed, trials, seconds, first, dims in kills:
        inv = ", ".join(f"{k} ({v})" for k, v in first.most_common())
        shr = ", ".join(f"{k} ({v})" for k, v in dims.most_common())
        print(f"| {name} | {bug} | {killed}/{args.seeds} | {med(trials)} | {med(seconds)} | {inv} | {shr} |")
    print(f"\nCorrect workers: seeds 1001..{1000 + args.correct_seeds} x {args.correct_trials} trials\n")
    print("| example | dtype | trials | cases checked | invariants failed | largest error/allowed (invariant) |")
    print("|---|---|---|---|---|---|")
    for name, dtype, drawn, checked, failures, worst in correct:
        w = f"{worst[1]:.3g} ({worst[0]})" if worst else "-"
        print(f"| {name} | {dtype} | {drawn} | {checked} | {failures} | {w} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
