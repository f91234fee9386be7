#!/usr/bin/env python3
"""Per-dtype correctness table of a spec's target, as Markdown.

    scripts/dtype_table.py specs/attention_fwd.yaml [--key dtypes] [--dtypes f16,bf16,f32,f64]
                           [--trials 10000] [--seed 1] [--target NAME] [--runner build/prop_runner]

For each dtype, writes a copy of the spec (in a temporary folder) whose
domain draws that dtype only, runs
`prop_runner --spec COPY --trials N --seed S --no-corpus --format json` and
reports: the run's status, cases checked, and per invariant that reports a
margin the largest error/allowed ratio seen (1 = at the bound). Exits 1 if
any run did not pass.

Specs that name files relative to their own folder (an op spec's
`reference: exec:...`) are not supported: the copy lives elsewhere.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import yaml


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec")
    ap.add_argument("--key", default=None, help="the domain key listing dtypes (default: dtypes or dtype)")
    ap.add_argument("--dtypes", default=None, help="comma-separated (default: those the spec lists)")
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--target", default=None)
    ap.add_argument("--runner", default="build/prop_runner")
    args = ap.parse_args()

    with open(args.spec) as f:
        spec = yaml.safe_load(f)
    domain = spec.get("domain", {})
    key = args.key or next((k for k in ("dtypes", "dtype") if k in domain), None)
    if key is None:
        sys.exit(f"{args.spec}: no domain key 'dtypes' or 'dtype'; pass --key")
    dtypes = args.dtypes.split(",") if args.dtypes else list(domain[key])

    print(f"{spec.get('spec')} target {args.target or spec.get('target')}, seed {args.seed}, "
          f"{args.trials} trials per dtype\n")
    print("| dtype | status | cases checked | largest error/allowed (invariant) |")
    print("|---|---|---|---|")
    failed = False
    folder = tempfile.mkdtemp(prefix="dtype_table_")
    for dtype in dtypes:
        copy = dict(spec)
        copy["domain"] = dict(domain, **{key: [dtype]})
        path = os.path.join(folder, f"{spec.get('spec', 'spec')}_{dtype}.yaml")
        try:
            with open(path, "w") as f:
                yaml.safe_dump(copy, f, sort_keys=False)
            cmd = [args.runner, "--spec", path, "--trials", str(args.trials), "--seed", str(args.seed),
                   "--no-corpus", "--format", "json"]
            if args.target:
                cmd += ["--target", args.target]
            out = subprocess.run(cmd, capture_output=True, text=True)
        finally:
            os.remove(path)
        if out.returncode not in (0, 1):
            print(f"| {dtype} | exit {out.returncode}: {out.stderr.strip()[:200]} | | |")
            failed = True
            continue
        run = json.loads(out.stdout)
        failed = failed or run["status"] != "passed"
        ratios = [(i["max_error_ratio"], i["name"]) for i in run["invariants"] if "max_error_ratio" in i]
        worst = max(ratios) if ratios else None
        margin = f"{worst[0]:.3f} ({worst[1]})" if worst else "-"
        print(f"| {dtype} | {run['status']} | {run['checked']} | {margin} |")
    os.rmdir(folder)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
