#!/usr/bin/env bash
# scripts/gpu_bundle.sh without a GPU: pack a CUDA build, check that the
# bundle holds the binaries and the libraries they need beyond the C/C++
# runtime and CUDA, and that `check` unpacks it, finds every library and
# reaches gpu_check.sh, which says there is no device (exit 77).
#   gpu_bundle_test.sh BUILD_DIR
# Skipped (77) on a machine with a GPU: there `check` runs every GPU check.
set -uo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
script=$here/../../scripts/gpu_bundle.sh
command -v nvidia-smi >/dev/null && { echo "a GPU is here: run scripts/gpu_bundle.sh check by hand"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

bash "$script" pack "$build" "$tmp/b.tar.gz" >"$tmp/pack.log" 2>&1 || { cat "$tmp/pack.log"; fail "pack"; }
tar tzf "$tmp/b.tar.gz" >"$tmp/list"
for f in build/prop_runner build/tests/kprop_attention_tests build/bench/bench_attention_cuda source_dir commit; do
  grep -qx "./$f" "$tmp/list" || fail "the bundle lacks $f"
done
grep -q '^./lib/libyaml-cpp' "$tmp/list" || fail "the bundle lacks libyaml-cpp"
grep -qE '^./lib/(libc|libstdc\+\+|libcudart)\.so' "$tmp/list" && fail "the bundle carries a runtime library"

(cd "$tmp" && bash "$script" check b.tar.gz logs) >"$tmp/check.log" 2>&1
rc=$?
[ $rc -eq 77 ] || { cat "$tmp/check.log"; fail "check: exit $rc, expected 77 (no device)"; }
grep -q "gpu_check: no CUDA device" "$tmp/check.log" || { cat "$tmp/check.log"; fail "check did not reach gpu_check.sh"; }

# gpu_check.sh's step selection (KPROP_GPU_CHECK_ONLY), past its device
# check by a stand-in nvidia-smi: the one step named runs (the CUDA tests
# skip without a device and pass), every other is reported skipped; a
# selection that matches nothing exits 77, never 0.
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "GPU 0: stand-in (gpu_bundle_test.sh)"\n' >"$tmp/bin/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi"
gpu_check=$here/../../scripts/gpu_check.sh
PATH="$tmp/bin:$PATH" KPROP_GPU_CHECK_ONLY='^kprop_layernorm_tests' bash "$gpu_check" "$build" "$tmp/only" \
  >"$tmp/only.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$tmp/only.log"; fail "KPROP_GPU_CHECK_ONLY: exit $rc, expected 0"; }
grep -q "gpu_check: 0 of 1 step(s) failed" "$tmp/only.log" || { cat "$tmp/only.log"; fail "not one step run"; }
grep -qE "^kprop_layernorm_tests .*ok" "$tmp/only.log" || { cat "$tmp/only.log"; fail "the selected step"; }
grep -qE "^bench_attention_cuda +skipped \(KPROP_GPU_CHECK_ONLY\)" "$tmp/only.log" ||
  { cat "$tmp/only.log"; fail "an unselected step is not reported skipped"; }
PATH="$tmp/bin:$PATH" KPROP_GPU_CHECK_ONLY='^no such step$' bash "$gpu_check" "$build" "$tmp/none" \
  >"$tmp/none.log" 2>&1
rc=$?
[ $rc -eq 77 ] || { cat "$tmp/none.log"; fail "a selection of nothing: exit $rc, expected 77"; }

echo "gpu_bundle: pack and check (no device) ok; gpu_check.sh's step selection ok"
