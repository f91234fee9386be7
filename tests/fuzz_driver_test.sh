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

# A spec of the user's own, outside specs/ and named like no built harness
# (a declared op): fuzzed by fuzz_any_spec, which the driver tells the spec
# (it said "no libFuzzer harness for spec my_swiglu").
sed 's/^spec: .*/spec: my_swiglu/' "$(dirname "$spec")/ops/swiglu.yaml" > "$tmp/my_swiglu.yaml"
"$runner" --spec "$tmp/my_swiglu.yaml" --fuzz --time 5 --work "$tmp/work3" --corpus "$tmp/corpus3" \
  > "$tmp/out3.log" 2>&1
code=$?
cat "$tmp/out3.log" | tail -3
[ "$code" -eq 0 ] || { echo "expected exit 0 (nothing found), got $code"; exit 1; }
grep -qE "^  my_swiglu .* [1-9][0-9]* execs" "$tmp/out3.log" || { echo "my_swiglu was not fuzzed"; exit 1; }
echo "fuzz driver: a spec outside specs/ is fuzzed"

# A target that checks nothing (cannot run here: the CUDA kernels without a
# GPU) is not fuzzed, and the run says SKIPPED: "0 new findings" over inputs
# it never checked read as a clean run.
if nvidia-smi -L > /dev/null 2>&1; then
  echo "fuzz driver: a GPU is present, the unavailable-target check needs none"
  exit 0
fi
"$runner" --spec "$(dirname "$spec")/softmax_topk.yaml" --fuzz --time 5 --target cuda --work "$tmp/work2" \
  --corpus "$tmp/corpus2" > "$tmp/out2.log" 2>&1
code=$?
cat "$tmp/out2.log" | tail -3
[ "$code" -eq 0 ] || { echo "expected exit 0 (skipped), got $code"; exit 1; }
grep -q "softmax_topk *SKIPPED: the target checked none of the .* inputs of its seed run" "$tmp/out2.log" ||
  { echo "the skipped spec is not said"; exit 1; }
grep -q "^SKIPPED: nothing was fuzzed" "$tmp/out2.log" || { echo "the run is not said SKIPPED"; exit 1; }
! grep -q "execs" "$tmp/out2.log" || { echo "a skipped spec was fuzzed"; exit 1; }
echo "fuzz driver: a target that checks nothing is SKIPPED"
