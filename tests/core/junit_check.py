#!/usr/bin/env python3
"""Checks a JUnit XML report the way CI systems read it.

Parses with the standard library's XML parser and checks the structure that
Jenkins/GitLab/GitHub JUnit readers rely on (the common subset of the
Ant/Surefire JUnit schema): <testsuites> of <testsuite name tests failures
errors skipped time>, each <testcase classname name> with at most one of
<failure>/<error>/<skipped>, and the suite's counts equal to its children.
Prints one line per problem and exits 1 if there is any.

usage: junit_check.py FILE [--expect-errors N] [--expect-failures N] [--expect-skipped N]
"""
import sys
import xml.etree.ElementTree as ET


def main(argv):
    path = argv[1]
    expect = {}
    for i in range(2, len(argv), 2):
        expect[argv[i].lstrip("-").replace("expect-", "")] = int(argv[i + 1])
    problems = []
    root = ET.parse(path).getroot()
    if root.tag != "testsuites":
        problems.append(f"root element is <{root.tag}>, expected <testsuites>")
    totals = {"failures": 0, "errors": 0, "skipped": 0}
    for suite in root.iter("testsuite"):
        for attr in ("name", "tests", "failures", "errors", "skipped", "time"):
            if attr not in suite.attrib:
                problems.append(f"testsuite {suite.get('name')} lacks attribute {attr}")
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for case in suite.findall("testcase"):
            counts["tests"] += 1
            if "name" not in case.attrib or "classname" not in case.attrib:
                problems.append("testcase without name or classname")
            outcomes = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
            if len(outcomes) > 1:
                problems.append(f"testcase {case.get('name')} has {outcomes}")
            for tag, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
                if tag in outcomes:
                    counts[key] += 1
            for c in case:
                if c.tag in ("failure", "error") and "message" not in c.attrib:
                    problems.append(f"testcase {case.get('name')}: <{c.tag}> without message")
        for key, n in counts.items():
            declared = suite.get(key)
            if declared is not None and int(declared) != n:
                problems.append(f"testsuite {suite.get('name')}: {key}={declared} but {n} testcase(s)")
        for key in totals:
            totals[key] += counts[key]
    for key, n in expect.items():
        if totals.get(key) != n:
            problems.append(f"expected {n} {key}, found {totals.get(key)}")
    for p in problems:
        print(f"{path}: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
