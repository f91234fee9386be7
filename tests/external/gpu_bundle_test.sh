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

echo "gpu_bundle: pack and check (no device) ok"
