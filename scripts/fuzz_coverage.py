#!/usr/bin/env python3
"""Covered edges of two libFuzzer runs over the code both builds instrument.

libFuzzer's `cov` counts the edges of every instrumented function, so a build
that stops instrumenting some code (fuzz/CMakeLists.txt: the tolerance code
and the fp64 oracles) reports a smaller `cov` without having lost any
guidance. This compares what matters: the covered edges of the functions
instrumented in both builds, from each run's -print_coverage=1 output.

  fuzz_X -seed=1 -max_total_time=60 -print_coverage=1 DIR > before.txt 2>&1
  (rebuild)
  fuzz_X -seed=1 -max_total_time=60 -print_coverage=1 DIR > after.txt 2>&1
  scripts/fuzz_coverage.py before.txt after.txt
"""
import re
import sys

LINE = re.compile(r"^(?:UN)?COVERED_FUNC: hits: \d+ edges: (\d+)/(\d+) (.*)$")


def functions(path):
    """{function and location: (covered edges, edges)} of one log."""
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if m:
                covered, total = int(m.group(1)), int(m.group(2))
                key = m.group(3)
                prev = out.get(key, (0, 0))
                out[key] = (prev[0] + covered, prev[1] + total)
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: fuzz_coverage.py BEFORE_LOG AFTER_LOG")
    before, after = functions(sys.argv[1]), functions(sys.argv[2])
    for name, log in (("before", before), ("after", after)):
        if not log:
            sys.exit(f"fuzz_coverage: no COVERED_FUNC lines in the {name} log (run with -print_coverage=1)")
    both = before.keys() & after.keys()
    cb = sum(before[k][0] for k in both)
    ca = sum(after[k][0] for k in both)
    edges = sum(after[k][1] for k in both)
    print(f"functions instrumented in both: {len(both)} ({edges} edges)")
    print(f"covered edges: before {cb}, after {ca} ({ca - cb:+d})")
    print(f"only instrumented before: {len(before.keys() - after.keys())} functions, "
          f"{sum(before[k][0] for k in before.keys() - after.keys())} covered edges")
    lost = sorted(((before[k][0] - after[k][0], k) for k in both if before[k][0] > after[k][0]), reverse=True)
    if lost:
        print("covered less after (edges, function):")
        for d, k in lost[:10]:
            print(f"  -{d} {k[:150]}")


if __name__ == "__main__":
    main()
