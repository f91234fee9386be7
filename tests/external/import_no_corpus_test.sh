#!/usr/bin/env bash
# import_no_corpus_test.sh PROP_RUNNER SPEC_DIR: --import --no-corpus of one
# bug's inputs, twice in one folder. Each run reports the bug as NEW (exit
# 1) and the rest of its inputs as known within the run: the scratch folder
# (.kprop/findings) keeps the first run's files, and deduping against them
# made the second run call the bug "known" (with --fuzz, exit 0 while the
# bug was still there). An input whose shrink ends on a file this run stored
# is known too.
runner="$1" specs="$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
"$runner" --spec "$specs/dflash.yaml" --fuzz-seeds seeds --seed 3 > /dev/null || exit 1
for run in 1 2; do
  # seed-04* twice: an input that shrinks onto the file the same run stored
  # is known, not NEW again (with --fuzz, 150 NEW lines for 2 files).
  out=$("$runner" --spec "$specs/dflash.yaml" --target positional_logits --no-corpus --import seeds/seed-04* seeds/seed-05* seeds/seed-06* seeds/seed-04* 2>&1)
  rc=$?
  printf '%s\n' "$out"
  [ "$rc" -eq 1 ] || { echo "FAIL run $run: exit $rc, expected 1"; exit 1; }
  [ "$(printf '%s\n' "$out" | grep -c '^  NEW ')" -eq 1 ] || { echo "FAIL run $run: not exactly one NEW finding"; exit 1; }
  printf '%s\n' "$out" | grep -q '^  known ' || { echo "FAIL run $run: the bug's other inputs were not known"; exit 1; }
done
echo "import_no_corpus_test: ok"
