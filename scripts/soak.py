#!/usr/bin/env python3
"""False-positive soak: every spec x every correct implementation.

Runs prop_runner on each spec's reference and optimized implementations (never
mutants) over several seeds, on one core, and prints trials and failures per
pair. A correct implementation must never fail: any failure is a false alarm
of an invariant (or a real bug), printed with its replay command.

  scripts/soak.py [--build build] [--total 100000] [--seeds 5] [--specs a,b] [--search N]

--total is split evenly over the (spec, implementation) pairs and then over
the seeds. CUDA implementations are skipped without a device (and reported
as such). A spec's profile named after an implementation (kvcache's `int8`)
is that implementation's domain and is selected for it. Exit 0 only if no
pair failed, crashed or failed a health check.
Not part of CI (it takes tens of minutes); CI runs the short version
(--total 2000) through ctest's soak.short.
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def implementations(runner):
    """{family: [(name, kind, device)]} from prop_runner --list."""
    out = subprocess.run([runner, "--list"], check=True, capture_output=True, text=True).stdout
    impls, family, section = {}, None, None
    for line in out.splitlines():
        m = re.match(r"^family (\S+) ", line)
        if m:
            family, section = m.group(1), None
            impls[family] = []
            continue
        if line.startswith("  ") and not line.startswith("   "):
            section = line.strip().rstrip(":").split(" ")[0]
            continue
        m = re.match(r"^    (\S+)\s+(reference|optimized|mutant|external)\s+(cpu|cuda)\b", line)
        if family and section == "implementations" and m:
            impls[family].append((m.group(1), m.group(2), m.group(3)))
    return impls


def spec_family(path):
    for line in path.read_text().splitlines():
        m = re.match(r"^family:\s*(\S+)", line)
        if m:
            return m.group(1)
    return None


def spec_profiles(path):
    """Names under the spec's top-level `profiles:` (two-space-indented keys)."""
    names, inside = set(), False
    for line in path.read_text().splitlines():
        if re.match(r"^\S", line):
            inside = line.startswith("profiles:")
            continue
        m = re.match(r"^  ([A-Za-z0-9_.-]+):", line)
        if inside and m:
            names.add(m.group(1))
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--total", type=int, default=100000, help="trials over all pairs and seeds")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--specs", default="", help="comma-separated spec names (default: all in specs/)")
    ap.add_argument("--first-seed", type=int, default=20261123)
    ap.add_argument("--search", type=int, default=0, metavar="N",
                    help="after the random trials, N cases of the targeted search per run (--search): "
                         "the search climbs toward the largest error/allowed ratios, where a loose "
                         "domain or a bound that misses a rounding shows as a false alarm")
    ap.add_argument("--any-core", action="store_true",
                    help="leave the runs to the scheduler, not pinned to core 0 (ctest's soak.short and "
                         "soak.search.short: pinned, both shared core 0 with whatever else ran there)")
    args = ap.parse_args()

    runner = str(Path(args.build).resolve() / "prop_runner")
    impls = implementations(runner)
    specs = sorted((ROOT / "specs").glob("*.yaml"))
    if args.specs:
        wanted = set(args.specs.split(","))
        specs = [s for s in specs if s.stem in wanted]
    pairs = []
    for spec in specs:
        for name, kind, device in impls.get(spec_family(spec), []):
            if kind in ("reference", "optimized"):
                pairs.append((spec, name, device))
    per_run = max(1, args.total // max(1, len(pairs) * args.seeds))
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") and not args.any_core else []
    scratch = tempfile.mkdtemp(prefix="kprop-soak-")
    print(f"kprop soak: {len(pairs)} pairs x {args.seeds} seeds x {per_run} trials, "
          f"{'any core' if not pin else 'one core'}; "
          f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}", flush=True)
    rows, bad = [], 0
    for spec, name, device in pairs:
        trials = failures = checked = declined = 0
        status_seen, seconds, notes = set(), 0.0, []
        for k in range(args.seeds):
            seed = args.first_seed + k
            cmd = pin + [runner, "--spec", str(spec), "--target", name, "--seed", str(seed), "--trials",
                         str(per_run), "--time", "0", "--no-corpus", "--format", "json"]
            if name in spec_profiles(spec):  # a profile named after the implementation: its domain
                cmd += ["--profile", name]
            if args.search:
                cmd += ["--search", "--search-trials", str(args.search)]
            t0 = time.time()
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=scratch)
            seconds += time.time() - t0
            try:
                r = json.loads(p.stdout)
            except json.JSONDecodeError:
                status_seen.add(f"exit {p.returncode}")
                notes.append(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "no report")
                continue
            status_seen.add(r["status"])
            trials += r["trials"]
            checked += r["checked"]
            declined += r["declined"]
            for inv in r["invariants"]:
                cx = inv.get("counterexample")
                if cx:
                    failures += 1
                    notes.append(f"{inv['name']} (seed {seed}): {cx['message']}\n      replay: {cx['replay']}")
            if r.get("crash"):
                failures += 1
                notes.append(f"crash (seed {seed}): {r['crash']['message']}")
            for h in r.get("health_checks_failed", []):
                notes.append(f"health check {h['check']} (seed {seed}): {h['message']}")
        skipped = status_seen == {"skipped"}
        ok = failures == 0 and status_seen <= {"passed", "skipped"}
        bad += not ok
        rows.append((spec.stem, name, device, trials, checked, declined, failures,
                     "skipped" if skipped else ("ok" if ok else "/".join(sorted(status_seen))), seconds, notes))
        print(f"  {spec.stem:<14} {name:<18} {trials:>7} trials {checked:>7} checked {failures:>3} failures  "
              f"{rows[-1][7]}  {seconds:6.1f} s", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    print("\n| spec | implementation | device | trials | checked | declined | failures | verdict | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec, name, device, trials, checked, declined, failures, verdict, seconds, _ in rows:
        print(f"| {spec} | {name} | {device} | {trials} | {checked} | {declined} | {failures} | {verdict} | "
              f"{seconds:.1f} |")
    total = sum(r[3] for r in rows)
    print(f"\n{total} trials in total, {sum(r[6] for r in rows)} failures, {bad} pair(s) not ok")
    for row in rows:
        for note in row[9]:
            print(f"  {row[0]} {row[1]}: {note}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
