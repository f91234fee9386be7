#!/usr/bin/env python3
"""Trials to kill a mutant with and without the targeted search, over many seeds.

    scripts/search_kill_stats.py specs/layernorm.yaml [--mutant NAME ...] [--seeds 20]
        [--random 100] [--search 400] [--runner build/prop_runner]

For each mutant (default: every mutant of the spec's family) and seed
S = 1..N, runs the mutant twice at the same case budget:
  - random only:   prop_runner --target M --seed S --trials RANDOM+SEARCH
  - with search:   prop_runner --target M --seed S --trials RANDOM --search --search-trials SEARCH
(--no-corpus --format json; the spec's time budgets stay), and reads the trial
at which the first invariant failed (random cases first, then search cases).
Prints a Markdown table: per mutant and mode, kill rate, median and max trials
to kill (over the killing seeds), and which invariant killed it.
"""
import argparse
import collections
import json
import statistics
import subprocess
import sys


def mutants_of(runner, spec):
    out = subprocess.run([runner, "--list", "--format", "json"], capture_output=True, text=True, check=True)
    family = None
    with open(spec) as f:
        for line in f:
            if line.startswith("family:"):
                family = line.split(":", 1)[1].split("#")[0].strip()
    for fam in json.loads(out.stdout)["families"]:
        if fam["name"] == family:
            return [i["name"] for i in fam["implementations"] if i["kind"] == "mutant"]
    sys.exit(f"{spec}: family {family} not in prop_runner --list")


def run_once(runner, spec, mutant, seed, args):
    cmd = [runner, "--spec", spec, "--target", mutant, "--seed", str(seed), "--no-corpus", "--format", "json"]
    cmd += args
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 1, 3):
        sys.exit(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()[-500:]}")
    report = json.loads(out.stdout)
    failed = [i for i in report["invariants"] if i["status"] == "FAILED"]
    if failed:
        first = min(failed, key=lambda i: i["trials_to_fail"])
        return first["trials_to_fail"], first["name"], report.get("search", {}).get("cases", 0)
    if report["status"] == "crashed":
        return report["trials"] + report.get("search", {}).get("cases", 0), "crash", 0
    return None, None, report.get("search", {}).get("cases", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec")
    ap.add_argument("--mutant", action="append", default=[])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--random", type=int, default=100, help="random cases before the search")
    ap.add_argument("--search", type=int, default=400, help="search cases after them")
    ap.add_argument("--runner", default="build/prop_runner")
    args = ap.parse_args()
    mutants = args.mutant or mutants_of(args.runner, args.spec)
    budget = args.random + args.search
    modes = {
        "random": ["--trials", str(budget)],
        "search": ["--trials", str(args.random), "--search", "--search-trials", str(args.search)],
    }
    print(f"{args.spec}: seeds 1..{args.seeds}; random only: {budget} cases; "
          f"with search: {args.random} random + {args.search} search cases\n")
    print("| mutant | mode | killed | median trials | max trials | killed by |")
    print("|---|---|---|---|---|---|")
    for m in mutants:
        for mode, extra in modes.items():
            trials, by = [], collections.Counter()
            for seed in range(1, args.seeds + 1):
                t, inv, _ = run_once(args.runner, args.spec, m, seed, extra)
                if t is not None:
                    trials.append(t)
                    by[inv] += 1
            med = f"{statistics.median(trials):g}" if trials else "-"
            mx = f"{max(trials)}" if trials else "-"
            who = ", ".join(f"{k} ({v})" for k, v in by.most_common())
            print(f"| {m} | {mode} | {len(trials)}/{args.seeds} | {med} | {mx} | {who} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
