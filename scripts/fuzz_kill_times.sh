#!/usr/bin/env bash
# Seconds for libFuzzer alone (no RapidCheck, no seed corpus: an empty start)
# to make each mutant of a spec violate an invariant.
#   scripts/fuzz_kill_times.sh build-san specs/dflash.yaml [limit_s]
set -uo pipefail
build="$1" spec="$2" limit="${3:-120}"
name=$(basename "$spec" .yaml)
fuzzer="$build/fuzz/fuzz_$name"
mutants=$("$build/prop_runner" --list | awk -v fam="$(awk '/^family:/ {print $2}' "$spec")" '
  /^family / {on = ($2 == fam)} on && $2 == "mutant" {print $1}')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '| mutant | seconds to kill (libFuzzer alone, limit %ss) | invariant |\n|---|---|---|\n' "$limit"
for m in $mutants; do
  start=$(date +%s.%N)
  KPROP_SPEC="$spec" KPROP_TARGET="$m" ASAN_OPTIONS=detect_leaks=0 "$fuzzer" -seed=1 -max_total_time="$limit" \
    -artifact_prefix="$tmp/" > "$tmp/log" 2>&1
  end=$(date +%s.%N)
  inv=$(grep -o "invariant [a-zA-Z_]* violated" "$tmp/log" | head -1 | awk '{print $2}')
  if [ -n "$inv" ]; then
    printf '| %s | %.1f | %s |\n' "$m" "$(echo "$end - $start" | bc)" "$inv"
  else
    printf '| %s | not killed in %ss | - |\n' "$m" "$limit"
  fi
done
