#!/usr/bin/env bash
# libFuzzer throughput of the spec harnesses as the fuzzers really run
# (coverage feedback, an empty start; the sanitizer build's harnesses, or
# build-fuzz's coverage-only ones): exec/s and coverage
# (`cov`) after `seconds`, per harness, and the median exec/s (the numbers
# the README gives the fuzzers' speed in). libFuzzer's exec/s moves by about
# ±20% between runs of the same binary (which inputs it keeps decides what
# it runs next), so compare builds run back to back on the same machine.
# `cov` counts only instrumented code: to compare builds that instrument
# different files, use scripts/fuzz_coverage.py.
#   scripts/fuzz_rates.sh build-san|build-fuzz [seconds] [harness ...]
# A harness that finds something stops the script, its input and log kept
# under BUILD/fuzz_rates_artifacts/ (a crash without a sanitizer is
# libFuzzer's 'deadly signal').
# Default: 60 s each over the eight family specs' harnesses.
set -uo pipefail
build="${1:?usage: scripts/fuzz_rates.sh BUILD_DIR [seconds] [harness ...]}"
seconds="${2:-60}"
shift $(( $# > 1 ? 2 : 1 ))
harnesses=("$@")
[ ${#harnesses[@]} -eq 0 ] && harnesses=(attention_bwd attention_fwd beam dflash kvcache layernorm softmax_topk ternary)
for h in "${harnesses[@]}"; do
  if [ ! -x "$build/fuzz/fuzz_$h" ]; then
    echo "fuzz_rates: no harness $build/fuzz/fuzz_$h (build it with scripts/dev.sh build-san or build-fuzz)" >&2
    exit 2
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '| harness | exec/s | cov | runs |\n|---|---|---|---|\n'
rates=()
for h in "${harnesses[@]}"; do
  fuzzer="$build/fuzz/fuzz_$h"
  mkdir -p "$tmp/$h"
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" "$fuzzer" -seed=1 -max_total_time="$seconds" \
    -artifact_prefix="$tmp/" "$tmp/$h" > "$tmp/log" 2>&1
  # libFuzzer's last status line: "#N  <kind> cov: C ft: F ... exec/s: E ..."
  line=$(grep -E '^#[0-9]+' "$tmp/log" | tail -1)
  runs=$(echo "$line" | sed -E 's/^#([0-9]+).*/\1/')
  cov=$(echo "$line" | grep -oE 'cov: [0-9]+' | awk '{print $2}')
  rate=$(echo "$line" | grep -oE 'exec/s: [0-9]+' | awk '{print $2}')
  if [ -z "$rate" ] || grep -q "kprop fuzz: invariant\|kprop fuzz: target failure\|ERROR: AddressSanitizer\|ERROR: libFuzzer" "$tmp/log"; then
    # A finding is the fuzzer's job: keep its input and say what failed (the
    # harness's own lines, which a sanitizer's stack trace would push out of
    # a plain tail), then stop: a rate of a run that found something is no rate.
    keep="$build/fuzz_rates_artifacts/$h"
    mkdir -p "$keep"
    cp "$tmp"/crash-* "$tmp"/timeout-* "$tmp"/oom-* "$tmp"/leak-* "$keep"/ 2>/dev/null
    cp "$tmp/log" "$keep/log"
    echo "fuzz_rates: fuzz_$h did not run cleanly; its input and log are in $keep; the finding:" >&2
    sed -n '/^kprop fuzz: \(invariant\|target failure\)/,/^==[0-9]*==\|^MS: /p' "$tmp/log" >&2
    grep -E "ERROR: (AddressSanitizer|libFuzzer)|SUMMARY|runtime error" "$tmp/log" | head -5 >&2
    exit 1
  fi
  printf '| %s | %s | %s | %s |\n' "$h" "$rate" "$cov" "$runs"
  rates+=("$rate")
done
median=$(printf '%s\n' "${rates[@]}" | sort -n | awk '{a[NR] = $1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}')
printf '\nmedian exec/s over %d harnesses: %s\n' "${#rates[@]}" "$median"
