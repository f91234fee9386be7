#!/usr/bin/env bash
# The CUDA example plugin (examples/plugin/attention_fwd_cuda.cu, device
# tensors through kprop_op_device) end to end through prop_runner:
#   cuda_plugin_test.sh RUNNER SPEC PLUGIN_DIR
# correct: exit 0; the planted NaN bug: exit 1, shrunk; the sticky CUDA
# error: the case fails as a target error (exit 3), saved, the runner lives.
# Without a CUDA device every variant must be reported skipped (never
# passed): then this test exits 77 (ctest: skipped).
set -uo pipefail
runner="$1" spec="$2" plugins="$3"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run, expect_log and the failure count $fails
source "$(dirname "$0")/lib.sh"

run cuda_probe 0 --no-corpus --target "plugin:$plugins/libattention_fwd_cuda_correct.so"
if grep -q "no CUDA device" "$tmp/cuda_probe.log"; then
  # No device: each variant is skipped, none passes.
  for v in correct buggy sticky; do
    run "nodevice_$v" 0 --no-corpus --target "plugin:$plugins/libattention_fwd_cuda_$v.so"
    expect_log "nodevice_$v" "skipped: attention.fwd: no CUDA device"
  done
  [ "$fails" -eq 0 ] || { echo "$fails CUDA plugin checks failed"; exit 1; }
  echo "no CUDA device: CUDA plugin checks skipped"
  exit 77
fi
cat "$tmp/cuda_probe.log"
expect_log cuda_probe "declined by the target"  # f64 cases: declined, not passed

run cuda_buggy 1 --no-corpus --target "plugin:$plugins/libattention_fwd_cuda_buggy.so"
expect_log cuda_buggy "shrunk"
cat "$tmp/cuda_buggy.log"

run cuda_sticky 3 --corpus "$tmp/sticky" --target "plugin:$plugins/libattention_fwd_cuda_sticky.so"
expect_log cuda_sticky "CUDA error in the plugin: cudaErrorIllegalAddress"
expect_log cuda_sticky "plugin host restarted"
grep -l "found_by: error" "$tmp/sticky/attention_fwd/"*.yaml > /dev/null 2>&1 ||
  { echo "FAIL cuda_sticky: no saved case"; fails=$((fails + 1)); }
cat "$tmp/cuda_sticky.log"

[ "$fails" -eq 0 ] || { echo "$fails CUDA plugin checks failed"; exit 1; }
echo "CUDA plugin: all checks passed"
