#!/usr/bin/env bash
# A stand-in for compute-sanitizer, to test scripts/cuda_sanitize.sh without
# a GPU:  fake_sanitizer.sh --tool T --error-exitcode N [--leak-check full] CMD...
# Runs CMD and prints the tool's summary line. With FAKE_OOM_TOOL=T, a run of
# tool T instead reports an out-of-memory API error, as memcheck does when the
# GPU's memory is exhausted: every time (FAKE_OOM_TIMES=always) or on the
# first run only (the default; FAKE_OOM_STATE is a folder that remembers it).
set -u
tool=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool=$2; shift 2 ;;
    --error-exitcode) shift 2 ;;
    --leak-check) shift 2 ;;
    *) break ;;
  esac
done
summary() {
  if [ "$tool" = racecheck ]; then
    echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
  else
    echo "========= ERROR SUMMARY: $1 errors"
  fi
}
if [ "${FAKE_OOM_TOOL:-}" = "$tool" ]; then
  marker=${FAKE_OOM_STATE:?}/$tool
  if [ "${FAKE_OOM_TIMES:-once}" = always ] || [ ! -e "$marker" ]; then
    touch "$marker"
    echo '========= Program hit cudaErrorMemoryAllocation (error 2) due to "out of memory" on CUDA API call to cudaMalloc.'
    echo "CRASHED: target threw: CUDA error in cudaMalloc: out of memory"
    summary 1
    exit 1
  fi
fi
"$@"
rc=$?
summary 0
exit $rc
