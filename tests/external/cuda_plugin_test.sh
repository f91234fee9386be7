#!/usr/bin/env bash
# The CUDA example plugin (examples/plugin/attention_fwd_cuda.cu, device
# tensors through kprop_op_device) end to end through prop_runner:
#   cuda_plugin_test.sh RUNNER SPEC PLUGIN_DIR
# correct: exit 0; the planted NaN bug: exit 1, shrunk; the sticky CUDA
# error: the case fails as a target error (exit 3), saved, the runner lives.
# run.padded_tensors (every device tensor's rows padded, copied to the
# device with the host tensor's strides): the correct plugin (it indexes
# through the strides) passes; one that indexes as if contiguous passes
# unpadded and fails padded (its write into O's padding fails the call:
# exit 3, as a target error).
# Without a CUDA device every variant must be reported skipped (never
# passed): then this test exits 77 (ctest: skipped).
set -uo pipefail
runner="$1" spec="$2" plugins="$3"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run, expect_log and the failure count $fails
source "$(dirname "$0")/lib.sh"

sed 's/^run: {/run: {padded_tensors: true, /' "$spec" > "$tmp/padded.yaml"
grep -q "padded_tensors: true" "$tmp/padded.yaml" || { echo "FAIL padded: the spec's run line moved"; fails=$((fails + 1)); }
run cuda_probe 0 --no-corpus --target "plugin:$plugins/libattention_fwd_cuda_correct.so"
if grep -q "no CUDA device" "$tmp/cuda_probe.log"; then
  # No device: each variant is skipped, none passes (padded too).
  for v in correct buggy sticky contiguous; do
    run "nodevice_$v" 0 --no-corpus --target "plugin:$plugins/libattention_fwd_cuda_$v.so"
    expect_log "nodevice_$v" "skipped: attention.fwd: no CUDA device"
  done
  spec=$tmp/padded.yaml run nodevice_padded 0 --no-corpus --target "plugin:$plugins/libattention_fwd_cuda_correct.so"
  expect_log nodevice_padded "skipped: attention.fwd: no CUDA device"
  [ "$fails" -eq 0 ] || { echo "$fails CUDA plugin checks failed"; exit 1; }
  echo "no CUDA device: CUDA plugin checks skipped"
  exit 77
fi
cat "$tmp/cuda_probe.log"
expect_log cuda_probe "declined by the target"  # f64 cases: declined, not passed

spec=$tmp/padded.yaml run cuda_padded 0 --no-corpus --target "plugin:$plugins/libattention_fwd_cuda_correct.so"
expect_log cuda_padded "PASSED"
cat "$tmp/cuda_padded.log"
run cuda_contiguous 0 --no-corpus --target "plugin:$plugins/libattention_fwd_cuda_contiguous.so"
spec=$tmp/padded.yaml run cuda_contiguous_padded 3 --no-corpus --target "plugin:$plugins/libattention_fwd_cuda_contiguous.so"
expect_log cuda_contiguous_padded "the target wrote into the padding after row 0 of output o"
cat "$tmp/cuda_contiguous_padded.log"

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
