#!/usr/bin/env bash
# The fuzz build's two kinds (ctest cmake.fuzz_configure): -DKPROP_FUZZ=ON
# compiles kprop's code with coverage and ASan+UBSan; with
# -DKPROP_FUZZ_SANITIZE=OFF (scripts/dev.sh build-fuzz) with coverage only;
# asking for both KPROP_SANITIZE=ON and KPROP_FUZZ_SANITIZE=OFF is a
# configure error. Configures only, into a temporary folder (skipped, 77,
# without clang or ninja).
#   fuzz_configure_test.sh SOURCE_DIR
set -uo pipefail
source_dir="${1:?usage: fuzz_configure_test.sh SOURCE_DIR}"
command -v clang++ > /dev/null && command -v ninja > /dev/null || { echo "no clang++ or ninja: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

configure() {  # configure NAME cmake-args...: 0 when cmake succeeded
  local name="$1"
  shift
  CC=clang CXX=clang++ cmake -S "$source_dir" -B "$tmp/$name" -G Ninja -DKPROP_FUZZ=ON \
    -DKPROP_TESTS=OFF -DKPROP_BENCH=OFF -DKPROP_CUDA=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "$@" \
    > "$tmp/$name.log" 2>&1
}
# The harness's compile command in a configured build.
harness_flags() {
  grep -E '"command":.*fuzz/harness\.cpp' "$tmp/$1/compile_commands.json" | head -1
}
check() {  # check NAME DESCRIPTION COMMAND...
  local name="$1" what="$2"
  shift 2
  if "$@"; then echo "ok   $name: $what"; else echo "FAIL $name: $what"; fails=$((fails + 1)); fi
}

if configure sanitized; then
  flags=$(harness_flags sanitized)
  check sanitized "the harness has coverage" grep -q -- "-fsanitize=fuzzer-no-link" <<< "$flags"
  check sanitized "the harness has ASan+UBSan" grep -q -- "-fsanitize=address,undefined" <<< "$flags"
  check sanitized "the harness is not said coverage only" bash -c '! grep -q -- "COVERAGE_ONLY" <<< "$1"' _ "$flags"
else
  echo "FAIL sanitized: cmake failed"; tail -5 "$tmp/sanitized.log"; fails=$((fails + 1))
fi
if configure coverage_only -DKPROP_FUZZ_SANITIZE=OFF; then
  flags=$(harness_flags coverage_only)
  check coverage_only "the harness has coverage" grep -q -- "-fsanitize=fuzzer-no-link" <<< "$flags"
  check coverage_only "the harness has no sanitizer" bash -c '! grep -q -- "-fsanitize=address" <<< "$1"' _ "$flags"
  check coverage_only "the harness says it is coverage only" grep -q -- "-DKPROP_FUZZ_COVERAGE_ONLY" <<< "$flags"
  # prop_runner is no fuzzer: its coverage callbacks come from linking with
  # -fsanitize=fuzzer-no-link (the sanitizer runtime has them otherwise).
  check coverage_only "prop_runner links the coverage callbacks" \
    bash -c 'grep -A3 "^build prop_runner:" "$1" | grep -q "LINK_FLAGS = .*-fsanitize=fuzzer-no-link"' _ \
    "$tmp/coverage_only/build.ninja"
else
  echo "FAIL coverage_only: cmake failed"; tail -5 "$tmp/coverage_only.log"; fails=$((fails + 1))
fi
if configure both -DKPROP_FUZZ_SANITIZE=OFF -DKPROP_SANITIZE=ON; then
  echo "FAIL both: KPROP_SANITIZE=ON with KPROP_FUZZ_SANITIZE=OFF configured"; fails=$((fails + 1))
else
  check both "the contradiction is named" grep -q "KPROP_FUZZ_SANITIZE=OFF asks for a fuzz build" "$tmp/both.log"
fi
exit $((fails > 0))
