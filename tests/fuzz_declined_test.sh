#!/usr/bin/env bash
# prop_runner --fuzz of a target that declines most of the seed inputs (it
# takes rows of one element only): fuzzed, but the run ends HEALTH CHECK
# FAILED (exit 2), as a property run does, and --suppress-health-check
# declined turns that off. ("0 new findings", exit 0, read as clean over
# inputs it mostly never checked.)
#   fuzz_declined_test.sh RUNNER PYTHON
set -uo pipefail
runner="$1" python="$2"
here="$(cd "$(dirname "$0")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
target="exec:$python $here/external/declining_copy_worker.py"
"$runner" --spec "$here/external/op_copy.yaml" --fuzz --time 2 --seed 5 --target "$target" --work "$tmp/w1" \
  --no-corpus > "$tmp/out1.log" 2>&1
code=$?
tail -4 "$tmp/out1.log"
[ "$code" -eq 2 ] || { echo "expected exit 2 (health check), got $code"; exit 1; }
grep -q "^\[copy\] HEALTH CHECK declined: .* of the seed inputs were declined by the target" "$tmp/out1.log" ||
  { echo "the health check is not said at the seed run"; exit 1; }
grep -q "only rows of one element" "$tmp/out1.log" || { echo "the reason is not given"; exit 1; }
grep -q "^HEALTH CHECK FAILED (declined)" "$tmp/out1.log" || { echo "the run's verdict is not said"; exit 1; }
grep -qE "^  copy .* [1-9][0-9]* execs" "$tmp/out1.log" || { echo "the spec was not fuzzed"; exit 1; }
"$runner" --spec "$here/external/op_copy.yaml" --fuzz --time 2 --seed 5 --target "$target" --work "$tmp/w2" \
  --no-corpus --suppress-health-check declined > "$tmp/out2.log" 2>&1
code=$?
tail -2 "$tmp/out2.log"
[ "$code" -eq 0 ] || { echo "expected exit 0 with the check suppressed, got $code"; exit 1; }
! grep -q "HEALTH CHECK" "$tmp/out2.log" || { echo "a suppressed check was reported"; exit 1; }
echo "fuzz driver: a target that declines most seed inputs fails the declined health check"
