#!/usr/bin/env bash
# scripts/cuda_sanitize.sh's verdicts, without a GPU: a fake sanitizer
# (fake_sanitizer.sh) over the reference target of one spec.
#   cuda_sanitize_test.sh BUILD_DIR SPEC
# A run that ran out of device memory beside others is run again alone: clean
# alone is clean (exit 0); out of memory alone too, or with nothing beside it
# to blame, is not (exit 1).
set -uo pipefail
build=$1 spec=$2
here=$(cd "$(dirname "$0")" && pwd)
script=$here/../../scripts/cuda_sanitize.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check NAME EXPECTED_EXIT PATTERN JOBS [FAKE_OOM_TIMES]
  local name=$1 want=$2 pattern=$3 jobs=$4 times=${5:-once}
  mkdir -p "$tmp/$name.state"
  COMPUTE_SANITIZER=$here/fake_sanitizer.sh KPROP_SANITIZE_TARGET=reference KPROP_SANITIZE_TOOLS="memcheck racecheck" \
    KPROP_SANITIZE_TRIALS=2 KPROP_SANITIZE_JOBS=$jobs KPROP_SANITIZE_LOGS=$tmp/$name.logs \
    FAKE_OOM_TOOL=memcheck FAKE_OOM_TIMES=$times FAKE_OOM_STATE=$tmp/$name.state \
    bash "$script" "$build" "$spec" >"$tmp/$name.out" 2>&1
  local got=$?
  if [ "$got" -ne "$want" ] || ! grep -qE -- "$pattern" "$tmp/$name.out"; then
    echo "FAIL $name: exit $got (expected $want), output (expected /$pattern/):"
    cat "$tmp/$name.out"
    fails=$((fails + 1))
    return
  fi
  echo "ok   $name (exit $got)"
}
# Out of memory once, beside another run: again alone, clean.
check oom_once 0 "\\| clean \\(alone\\) +\\| clean " 2
# Out of memory alone too: reported, not clean.
check oom_always 1 "\\| out of memory \\(alone\\) +\\| clean .*" 2 always
# One run at a time: nothing to blame, no second run.
check oom_serial 1 "\\| out of memory +\\| clean " 1
[ "$fails" -eq 0 ] || exit 1
