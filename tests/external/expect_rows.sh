#!/usr/bin/env bash
# expect_rows.sh CODE N PATTERN_1 .. PATTERN_N COMMAND...: runs COMMAND,
# prints its output and passes only when it exits with CODE and each
# PATTERN (grep -E) matches a line of its output. For a table the command
# prints, a row per pattern (e.g. --mutants: each mutant killed by its
# invariant, shrunk to its case), each one named when it is missing.
want="$1" n="$2"
shift 2
patterns=("${@:1:n}")
shift "$n"
out=$("$@" 2>&1)
got=$?
printf '%s\n' "$out"
status=0
[ "$got" -eq "$want" ] || { echo "expect_rows: exit $got, expected $want"; status=1; }
for p in "${patterns[@]}"; do
  printf '%s\n' "$out" | grep -Eq -- "$p" || { echo "expect_rows: no line matches /$p/"; status=1; }
done
exit $status
