#!/usr/bin/env bash
# prop_runner --fuzz with no RapidCheck: libFuzzer alone, seeded from the
# spec, must find the positional_logits bug, and the driver must store a
# shrunk case that replays clean on the reference and still fails the mutant.
set -uo pipefail
runner="$1" spec="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$runner" --spec "$spec" --fuzz --time 20 --target positional_logits --work "$tmp/work" --corpus "$tmp/corpus" \
  > "$tmp/out.log" 2>&1
code=$?
cat "$tmp/out.log" | tail -5
[ "$code" -eq 1 ] || { echo "expected exit 1 (new finding), got $code"; exit 1; }
ls "$tmp/corpus/dflash/"*.yaml > /dev/null || { echo "nothing stored"; exit 1; }
grep -q "found_by: libfuzzer" "$tmp/corpus/dflash/"*.yaml || { echo "not marked found_by: libfuzzer"; exit 1; }
"$runner" --spec "$spec" --replay "$tmp/corpus/dflash" || { echo "replay failed"; exit 1; }
echo "fuzz driver: found, shrunk, stored, replays"
