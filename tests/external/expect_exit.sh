#!/usr/bin/env bash
# expect_exit.sh CODE PATTERN COMMAND...: runs COMMAND, prints its output and
# passes only when it exits with CODE and its output matches PATTERN
# (grep -E, across lines with -z). For ctests that must see a specific
# failure, where PASS_REGULAR_EXPRESSION alone would ignore the exit code.
want="$1" pattern="$2"
shift 2
out=$("$@" 2>&1)
got=$?
printf '%s\n' "$out"
[ "$got" -eq "$want" ] || { echo "expect_exit: exit $got, expected $want"; exit 1; }
printf '%s' "$out" | grep -Ezq -- "$pattern" || { echo "expect_exit: output lacks /$pattern/"; exit 1; }
