#!/usr/bin/env python3
"""Peak memory of a case against the family's estimate (run.max_case_mb).

For each spec's `large` profile, the domain is pinned to its largest case
(the dims max_case_bytes counts), `prop_runner --list` gives the estimate,
and a run of a few cases on one job (--jobs 1: each job holds its own case)
gives the process's peak resident memory, less that of a run of the base
spec's own small cases (the program and the spec). A ratio above 1 is
a budget that under-counts: a machine sized by run.max_case_mb could run out
of memory.

    python3 bench/case_memory.py [--runner build/prop_runner] [--target NAME] [--examples]

--examples measures specs/examples/<family>_expr.yaml instead, whose
expression invariants and metamorphic relations add to the estimate.

Not a test (no timing or memory assertions in tests): its table goes in
notes, before/after a change to a family's generator or estimate.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each large profile's largest case.
PINS = {
    "attention_bwd": "{nq: {one_of: [8193]}, nk: {one_of: [17]}, dim: {one_of: [257]}, masks: [none]}",
    "attention_fwd": "{group: [2, 2], nq: {one_of: [8193]}, nk: {one_of: [17]}, dim: {one_of: [257]}, masks: [none]}",
    "beam": "{batch: [2, 2], prompt_len: [2, 2], vocab: {one_of: [151936]}, max_new_tokens: [3, 3]}",
    "dflash": "{prompt_len: [4, 4], vocab: {one_of: [151936]}, cycles: [2, 2]}",
    "kvcache": "{batch: [2, 2], prompt_len: {one_of: [4100]}, decode_steps: [4, 4], head_dim: {one_of: [2]}}",
    "layernorm": "{rows: [2, 2], dim: {one_of: [131073]}, dim_one_rate: 0}",
    "softmax_topk": "{rows: [2, 2], vocab: {one_of: [262144]}}",
    "ternary": "{tokens: [2, 2], in_features: {one_of: [65537]}, out_features: [4, 4]}",
}


def peak_mb(cmd):
    """Peak resident memory (MB) of one run, in a fresh child of its own."""
    wrapper = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
               "stderr=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", wrapper] + cmd, capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) / 1024.0


def first_optimized(runner, family):
    """The family's first optimized CPU implementation (prop_runner --list)."""
    text = subprocess.run([runner, "--list"], capture_output=True, text=True).stdout
    block = text.split("family " + family + " ", 1)[1].split("\nfamily ", 1)[0]
    m = re.search(r"^    (\S+) +optimized +cpu ", block, re.M)
    return m.group(1) if m else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "prop_runner"))
    ap.add_argument("--target", default="",
                    help="implementation to run (default: the spec's target); 'optimized': each family's "
                    "first optimized CPU implementation")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--examples", action="store_true",
                    help="the expression examples (specs/examples/<family>_expr.yaml) instead of specs/")
    args = ap.parse_args()
    print(f"{'spec':<14} {'target':<12} {'largest case':<58} {'estimate':>9} {'peak':>9} {'ratio':>6}")
    for spec, largest in PINS.items():
        path = os.path.join(ROOT, "specs", "examples", spec + "_expr.yaml") if args.examples else \
            os.path.join(ROOT, "specs", spec + ".yaml")
        base = [args.runner, "--spec", path, "--profile", "large"]
        listing = subprocess.run(base + ["--domain", largest, "--list"], capture_output=True, text=True)
        m = re.search(r"^memory: the largest case needs ~(\d+) MB \((.*)\), of", listing.stdout, re.M)
        if not m:
            print(f"{spec:<14} (no estimate: {listing.stderr.strip() or listing.stdout[-200:]})")
            continue
        run = ["--jobs", "1", "--trials", str(args.trials), "--seed", "1", "--no-corpus"]
        target = args.target
        if target == "optimized":
            target = first_optimized(args.runner, re.search(r"\(family (\S+)\)", listing.stdout).group(1))
        if target:
            run += ["--target", target]
        small = peak_mb([args.runner, "--spec", path] + run)
        peak = peak_mb(base + run + ["--domain", largest]) - small
        estimate = float(m.group(1))
        print(f"{spec:<14} {target or '(spec)':<12} {m.group(2):<58} {estimate:>6.0f} MB {peak:>6.0f} MB "
              f"{peak / max(estimate, 1):>6.2f}")


if __name__ == "__main__":
    main()
