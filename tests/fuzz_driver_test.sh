#!/usr/bin/env bash
# prop_runner --fuzz with no RapidCheck: libFuzzer alone, seeded from the
# spec, must find the positional_logits bug, and the driver must store a
# shrunk case that replays clean on the reference and still fails the mutant.
# (The seeds alone find it: its first crash input comes in the first second,
# then about 3 a second, under ASan.)
set -uo pipefail
runner="$1" spec="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$runner" --spec "$spec" --fuzz --time 8 --target positional_logits --work "$tmp/work" --corpus "$tmp/corpus" \
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

# A harness that cannot start (exit 127, a missing library say) fuzzed
# nothing: an error, exit 2, never "0 new findings", exit 0.
mkdir -p "$tmp/broken"
printf '#!/bin/sh\nexit 127\n' > "$tmp/broken/fuzz_any_spec"
chmod +x "$tmp/broken/fuzz_any_spec"
"$runner" --spec "$spec" --fuzz --time 2 --work "$tmp/work4" --no-corpus --fuzzer-dir "$tmp/broken" \
  > "$tmp/out4.log" 2>&1
code=$?
[ "$code" -eq 2 ] || { cat "$tmp/out4.log"; echo "expected exit 2 (a harness that cannot start), got $code"; exit 1; }
grep -q "the fuzz harness's seed run ended without its tally" "$tmp/out4.log" || { cat "$tmp/out4.log"; exit 1; }
echo "fuzz driver: a harness that cannot start is an error"

# Crash inputs an earlier run left unimported (it was killed) are set aside,
# not imported against this run's target (a positional_logits crash on the
# reference read as 30 failures that do not reproduce, exit 1).
cp "$(ls "$tmp/work/dflash/crashes/imported/"* | head -1)" "$tmp/work/dflash/crashes/left-by-a-killed-run"
"$runner" --spec "$spec" --fuzz --time 2 --work "$tmp/work" --corpus "$tmp/corpus" > "$tmp/out5.log" 2>&1
code=$?
[ "$code" -eq 0 ] || { cat "$tmp/out5.log"; echo "expected exit 0 (the reference), got $code"; exit 1; }
grep -q "1 crash input(s) an earlier run left unimported are set aside" "$tmp/out5.log" || { cat "$tmp/out5.log"; exit 1; }
[ -f "$tmp/work/dflash/crashes/earlier/left-by-a-killed-run" ] || { echo "not set aside"; exit 1; }
echo "fuzz driver: an earlier run's crash inputs are set aside"

# A corpus that cannot be written: findings go to the scratch folder, one per
# signature as in the corpus, saying why (each of one bug's crash inputs was
# a new finding there, and the note was dropped).
( cd "$tmp" && "$runner" --spec "$spec" --fuzz --time 6 --target positional_logits --work "$tmp/work6" \
  --corpus /proc/kprop-no-corpus > "$tmp/out6.log" 2>&1 )
code=$?
[ "$code" -eq 1 ] || { cat "$tmp/out6.log"; echo "expected exit 1 (new finding), got $code"; exit 1; }
# Several crash inputs, or one finding per signature says nothing.
inputs=$(grep -o "crash inputs [0-9]*" "$tmp/out6.log" | grep -o "[0-9]*$")
[ "${inputs:-0}" -ge 2 ] || { cat "$tmp/out6.log"; echo "${inputs:-no} crash inputs: too few to dedupe"; exit 1; }
new=$(grep -c "new finding: " "$tmp/out6.log")
distinct=$(grep -o "new finding: [a-z_]* broken\|new finding: target failure ([a-z]*)" "$tmp/out6.log" | sort -u | wc -l)
[ "$new" -eq "$distinct" ] || { cat "$tmp/out6.log"; echo "$new new findings of $distinct signatures"; exit 1; }
grep -q "note: could not store the case in /proc/kprop-no-corpus" "$tmp/out6.log" || { cat "$tmp/out6.log"; exit 1; }
echo "fuzz driver: an unwritable corpus keeps one finding per signature and says why"

# libFuzzer ignores flags with two dashes: --kprop_target=X fuzzed the
# spec's default target without a word.
"$(dirname "$runner")/fuzz/fuzz_dflash" --kprop_target=positional_logits -runs=1 > "$tmp/out7.log" 2>&1
code=$?
[ "$code" -eq 2 ] || { cat "$tmp/out7.log"; echo "expected exit 2, got $code"; exit 1; }
grep -q "kprop's harness flags take one dash" "$tmp/out7.log" || { cat "$tmp/out7.log"; exit 1; }
echo "fuzz driver: a two-dash kprop flag is refused"

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
