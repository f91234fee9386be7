#!/usr/bin/env python3
"""Per-mutant kill statistics over many seeds, as a Markdown table.

    scripts/mutant_stats.py specs/dflash.yaml [--seeds 20] [--runner build/prop_runner]

Runs `prop_runner --spec SPEC --mutants --seed S --no-corpus --format json` for
S = 1..N and reports, per mutant: how many seeds killed it, the median seconds
and trials to the kill, which invariants killed it, and the shrunk sizes.
Exits 1 if any mutant survived any seed.
"""
import argparse
import collections
import json
import statistics
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--runner", default="build/prop_runner")
    args = ap.parse_args()

    rows = collections.defaultdict(lambda: {"killed": 0, "seconds": [], "trials": [], "by": collections.Counter(),
                                            "sizes": [], "summary": collections.Counter()})
    for seed in range(1, args.seeds + 1):
        out = subprocess.run([args.runner, "--spec", args.spec, "--mutants", "--seed", str(seed), "--no-corpus",
                              "--format", "json"], capture_output=True, text=True)
        if out.returncode not in (0, 1):
            sys.exit(f"seed {seed}: prop_runner exited {out.returncode}: {out.stderr.strip()}")
        for m in json.loads(out.stdout)["mutants"]:
            row = rows[m["mutant"]]
            run = m["run"]
            if not m["killed"]:
                continue
            row["killed"] += 1
            row["by"][m["killed_by"]] += 1
            failed = [i for i in run["invariants"] if i["status"] == "FAILED"]
            if failed:
                row["seconds"].append(failed[0]["seconds_to_fail"])
                row["trials"].append(failed[0]["trials_to_fail"])
                cx = failed[0].get("counterexample")
                if cx:
                    row["sizes"].append(cx["size"])
                    row["summary"][cx["summary"]] += 1
            else:  # killed by a crash
                row["seconds"].append(run["seconds"])
                row["trials"].append(run["trials"])

    print(f"{args.spec}: {args.seeds} seeds (1..{args.seeds})\n")
    print("| mutant | killed | median s | median trials | killed by | shrunk size min/median/max |")
    print("|---|---|---|---|---|---|")
    survived = False
    for name, r in rows.items():
        survived |= r["killed"] < args.seeds
        med = lambda xs: statistics.median(xs) if xs else float("nan")
        sizes = r["sizes"]
        size_text = f"{min(sizes)}/{med(sizes):g}/{max(sizes)}" if sizes else "-"
        by = ", ".join(f"{k} ({v})" for k, v in r["by"].most_common())
        print(f"| {name} | {r['killed']}/{args.seeds} | {med(r['seconds']):.3f} | {med(r['trials']):g} | {by} | {size_text} |")
    print()
    for name, r in rows.items():
        if r["summary"]:
            print(f"- {name}: typical shrunk case: {r['summary'].most_common(1)[0][0]}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
