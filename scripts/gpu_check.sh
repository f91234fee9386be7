#!/usr/bin/env bash
# Every check that needs a GPU, in one go (device time is short):
#
#   scripts/gpu_check.sh BUILD_DIR [LOG_DIR]
#
#  1. each spec with a `cuda` target: prop_runner on it (seed 1, the spec's
#     trials and unchanged tolerances, the domain narrowed to what the target
#     takes where scripts/cuda_domains.txt says so; attention_fwd's and
#     attention_bwd's gpu profiles too, whose f16/bf16 cases run the
#     tensor-core kernels);
#  2. the CUDA GoogleTests of each family binary (*Cuda*);
#  3. bench_attention_cuda (forward and backward TFLOP/s, % of peak, vs
#     cuBLAS materialized);
#  4. the CUDA example plugin (device tensors) end to end;
#  5. compute-sanitizer memcheck/racecheck/initcheck/synccheck on every cuda
#     target (scripts/cuda_sanitize.sh) and on the tensor-core kernels' tests;
#  6. the named mutants (CPU kernels: skipped with KPROP_GPU_CHECK_QUICK=1
#     or KPROP_GPU_CHECK_MUTANTS=0; run them on any machine) and each spec's
#     cuda target on a second seed (skipped when quick).
# KPROP_GPU_RACECHECK_CASES=N: racecheck on the first N cases of the
# tensor-core tests' tables (default 3; 9 takes them all).
# KPROP_GPU_CHECK_ONLY=REGEX runs only the steps whose name matches it (grep
# -E), the rest reported "skipped" (a session with little device time checks
# what changed; the full run is the proof); exit 77 when none matches.
# Prints a summary table last; full logs in LOG_DIR (default BUILD_DIR/gpu_check).
# Each step is stopped after KPROP_GPU_STEP_TIMEOUT seconds (default 900: a
# hung kernel fails its step, it does not eat the device time).
# Exit 0 only if every step passed; 77 without a device.
set -u
build=$(cd "$1" && pwd)
logs=${2:-$build/gpu_check}
root=$(cd "$(dirname "$0")/.." && pwd)
# cuda_domain NAME: the --domain a spec's cuda run draws from (or nothing)
cuda_domain() { sed -n "s/^$1: //p" "$root/scripts/cuda_domains.txt"; }
mkdir -p "$logs"
if ! nvidia-smi -L > "$logs/smi.txt" 2>&1; then
  echo "gpu_check: no CUDA device (nvidia-smi: $(head -1 "$logs/smi.txt"))"
  exit 77
fi
cat "$logs/smi.txt"
rm -f "$logs/summary.txt"
summary=()
fails=0
ran=0
step() {  # step NAME LOG COMMAND...: runs it, records pass/fail
  local name=$1 log=$2
  shift 2
  rm -f "$logs/$log"  # no earlier run's log is read as this one's
  if [ -n "${KPROP_GPU_CHECK_ONLY:-}" ] && ! grep -qE -- "$KPROP_GPU_CHECK_ONLY" <<<"$name"; then
    summary+=("$(printf '%-44s %-14s' "$name" "skipped (KPROP_GPU_CHECK_ONLY)")")
    echo "${summary[-1]}" | tee -a "$logs/summary.txt"
    return
  fi
  local t0=$SECONDS
  ran=$((ran + 1))
  timeout -k 10 "${KPROP_GPU_STEP_TIMEOUT:-900}" "$@" > "$logs/$log" 2>&1
  local rc=$?
  local verdict=ok
  [ $rc -eq 124 ] && verdict="TIMEOUT"
  [ $rc -eq 0 ] || { [ $rc -eq 124 ] || verdict="FAIL (exit $rc)"; fails=$((fails + 1)); }
  summary+=("$(printf '%-44s %-14s %4ss  %s' "$name" "$verdict" $((SECONDS - t0)) "$(tail -1 "$logs/$log" | cut -c1-90)")")
  echo "${summary[-1]}" | tee -a "$logs/summary.txt"
}
specs=(attention_fwd attention_bwd kvcache layernorm softmax_topk)
# cuda_run SPEC SEED: the spec's cuda target on its (narrowed) default domain.
cuda_run() {
  local s=$1 seed=$2 domain
  domain=$(cuda_domain "$s")
  step "$s --target cuda --seed $seed${domain:+ (domain $domain)}" "$s.cuda.$seed.txt" \
    "$build/prop_runner" --spec "$root/specs/$s.yaml" --target cuda --seed "$seed" --no-corpus --time 0 \
    ${domain:+--domain "$domain"}
}
for s in "${specs[@]}"; do cuda_run "$s" 1; done
# The gpu profiles: D = 64 / 128 and real tiles, so the f16/bf16 cases run the
# tensor-core kernels (the default domain's D mostly declines them).
for s in attention_fwd attention_bwd; do
  step "$s --target cuda --profile gpu" "$s.cuda.gpu.txt" \
    "$build/prop_runner" --spec "$root/specs/$s.yaml" --target cuda --profile gpu --seed 1 --no-corpus --time 0
done
for f in attention kvcache layernorm softmax_topk; do
  step "kprop_${f}_tests *Cuda*" "gtest.$f.txt" "$build/tests/kprop_${f}_tests" --gtest_filter='*Cuda*:*cuda*'
done
if [ -x "$build/bench/bench_attention_cuda" ]; then
  step "bench_attention_cuda" bench.txt "$build/bench/bench_attention_cuda" ${KPROP_BENCH_ARGS:-}
fi
if [ -d "$build/examples" ]; then
  plugin_dir=$(dirname "$(find "$build/examples" -name 'libattention_fwd_cuda_correct.so' -o -name 'attention_fwd_cuda_correct.so' | head -1)")
  step "CUDA plugin (device tensors)" plugin.txt \
    bash "$root/tests/external/cuda_plugin_test.sh" "$build/prop_runner" "$root/specs/attention_fwd.yaml" "$plugin_dir"
fi
step "compute-sanitizer (4 tools x targets)" sanitize.txt \
  env KPROP_SANITIZE_TRIALS=${KPROP_SANITIZE_TRIALS:-10} KPROP_SANITIZE_LOGS="$logs/cuda_sanitize" \
  bash "$root/scripts/cuda_sanitize.sh" "$build"
# The tensor-core kernels are not spec targets at every shape: their tests
# under the sanitizer too (the warp-specialized forward's TMA, mbarriers and
# named barriers included, and the WMMA backward).
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  cases=9
  # racecheck takes minutes on the larger cases: the first 3 (of each
  # test's table) unless KPROP_GPU_RACECHECK_CASES says how many.
  [ "$tool" = racecheck ] && cases=${KPROP_GPU_RACECHECK_CASES:-3}
  step "compute-sanitizer $tool tensor-core tests" "sanitize.tc.$tool.txt" \
    env KPROP_TC_MAX_CASES=$cases "$sanitizer" --tool "$tool" --error-exitcode 1 "$build/tests/kprop_attention_tests" \
    --gtest_filter='AttentionCudaTensorCore.Wgmma*:AttentionCudaTensorCore.WarpSpecialized*:AttentionBwdCudaTensorCore.*'
done
if [ "${KPROP_GPU_CHECK_QUICK:-0}" != 1 ]; then
  if [ "${KPROP_GPU_CHECK_MUTANTS:-1}" != 0 ]; then
    for s in "${specs[@]}"; do
      step "$s --mutants" "$s.mutants.txt" \
        "$build/prop_runner" --spec "$root/specs/$s.yaml" --mutants --seed 20261122 --no-corpus
    done
  fi
  for s in "${specs[@]}"; do cuda_run "$s" 2; done
fi
echo
echo "== sanitizer table"
sed -n '/^target/,$p' "$logs/sanitize.txt" 2>/dev/null | head -20
echo "== benchmark (tail)"
tail -30 "$logs/bench.txt" 2>/dev/null | cut -c1-160
echo
echo "== summary"
printf '%s\n' "${summary[@]}"
if [ $ran -eq 0 ]; then
  echo "gpu_check: no step matches KPROP_GPU_CHECK_ONLY='${KPROP_GPU_CHECK_ONLY:-}'"
  exit 77
fi
echo "gpu_check: $fails of $ran step(s) failed"
[ $fails -eq 0 ]
