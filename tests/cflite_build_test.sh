#!/usr/bin/env bash
# Runs .clusterfuzzlite/build.sh as OSS-Fuzz would (its variables pointed at
# clang + libFuzzer + ASan), then checks every fuzzer in $OUT ships its
# options and seed corpus, and that each (of the fuzz_op_*, one harness with
# another default spec each, the first) starts from an unrelated folder
# (finding its spec beside it), runs seeds and a few mutated inputs.
# Builds two families only, to stay quick: op (the declared ops of
# specs/ops/ ship as fuzz_op_<name>) and ternary, whose
# spec's target is its reference: its optimized implementations ship as
# fuzz_ternary-packed and fuzz_ternary-packed_base3 and fuzz those.
# OSS-Fuzz compiles at -O1; this test at -O0, which compiles the instrumented
# code three times faster (the test is the longest of the suite): the script,
# its CMake path and the fuzzers are under test, not the optimiser. It checks
# that $CXXFLAGS is what the compiler got (no build type's -O3 after it).
set -euo pipefail
repo="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/out" "$tmp/work"
ln -s "$repo" "$tmp/src/kprop"
export SRC="$tmp/src" OUT="$tmp/out" WORK="$tmp/work" CC=clang CXX=clang++
export CFLAGS="-O0 -fno-omit-frame-pointer -gline-tables-only -fsanitize=address -fsanitize=fuzzer-no-link"
export CXXFLAGS="$CFLAGS" LIB_FUZZING_ENGINE="-fsanitize=fuzzer" KPROP_FAMILIES="op;ternary"
bash "$repo/.clusterfuzzlite/build.sh" > "$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log"; exit 1; }
# Every compile of the build ran at $CXXFLAGS' -O0, no other -O level.
commands=$(ninja -C "$WORK/kprop-cflite-build" -t commands kprop_fuzzers)
grep -q -- "-O0 .*-fsanitize=fuzzer-no-link" <<<"$commands" || { echo "\$CXXFLAGS did not reach the compiler"; exit 1; }
overrides=$(grep -E -- " -O[123sz]( |$)" <<<"$commands" || true)
[ -z "$overrides" ] || { echo "the build overrides \$CXXFLAGS' -O0: ${overrides%%$'\n'*}"; exit 1; }
cd "$tmp"
found=0 ran_op=0
for fuzzer in "$OUT"/fuzz_*; do
  case "$fuzzer" in *.options|*.yaml|*.zip) continue ;; esac
  name=$(basename "$fuzzer")
  test -f "$OUT/$name.options" && test -f "$OUT/${name}_seed_corpus.zip"
  mkdir -p "seeds/$name"
  (cd "seeds/$name" && cmake -E tar xf "$OUT/${name}_seed_corpus.zip")
  test "$(ls "seeds/$name" | wc -l)" -ge 1 || { echo "$name: an empty seed corpus"; exit 1; }
  # 8 of its seeds, then 25 mutated inputs (it starts, reads and mutates).
  # All 64 of a declared op's took 49 s at -O0 under ASan, a quarter of
  # the test; fuzz_smoke.* runs the sanitizer build's harnesses further.
  # The fuzz_op_* are one harness with another default spec: each ships
  # (above), the first runs.
  ls "seeds/$name" | sort | tail -n +9 | (cd "seeds/$name" && xargs -r rm --)
  case "$name" in
    fuzz_op_*)
      if [ "$ran_op" = 1 ]; then
        test -f "$OUT/$name.yaml" || { echo "$name: no spec beside it"; exit 1; }
        echo "ok $name (shipped)"
        continue
      fi
      ran_op=1
      ;;
  esac
  seeds=$(ls "seeds/$name" | wc -l)
  runs=$((seeds + 25))
  "$fuzzer" -runs=$runs -seed=1 "seeds/$name" > "run-$name.log" 2>&1 || { tail -30 "run-$name.log"; exit 1; }
  grep -q "Done $runs runs" "run-$name.log" || { tail -30 "run-$name.log"; exit 1; }
  echo "ok $name ($seeds seeds, $runs runs)"
  found=$((found + 1))
done
test "$ran_op" = 1 || { echo "no fuzz_op_* fuzzer was built"; exit 1; }
test "$found" -ge 2
for impl in packed packed_base3; do
  grep -q "target $impl\$" "run-fuzz_ternary-$impl.log" || { echo "fuzz_ternary-$impl does not fuzz $impl"; exit 1; }
done
grep -q "target reference\$" run-fuzz_ternary.log || { echo "fuzz_ternary does not fuzz the spec's target"; exit 1; }
echo "cflite build.sh: $found fuzzers built and ran"
