#!/usr/bin/env bash
# Build where kprop's dependencies are, check where the GPU is: packs what
# scripts/gpu_check.sh runs into one file, and runs gpu_check.sh from it on a
# machine that has the CUDA driver and toolkit (nvidia-smi, compute-sanitizer,
# libcudart/libcublas) but none of kprop's build dependencies.
#
#   scripts/gpu_bundle.sh pack BUILD_DIR BUNDLE.tar.gz
#   scripts/gpu_bundle.sh check BUNDLE.tar.gz [LOG_DIR]
#
# pack: stripped copies of prop_runner, the four CUDA families' test binaries,
# bench_attention_cuda and the CUDA example plugins (the layout of BUILD_DIR),
# the shared libraries they load that are neither the C/C++ runtime nor
# CUDA's (yaml-cpp, fmt, Google Benchmark), and the source directory the test
# binaries were built from (they find specs/ there).
# check (run from a checkout of the same commit): unpacks into a temporary
# folder, makes the bundled libraries loadable, checks that every binary
# finds its libraries, and runs scripts/gpu_check.sh on the unpacked build
# (its KPROP_GPU_* variables apply), logs in LOG_DIR (default ./gpu_check).
# The test binaries read specs from the source directory they were built in:
# where that path does not exist on this machine, it is made a link to this
# checkout (said on the first line), and removed afterwards.
# Exit: pack 0 or 1; check, gpu_check.sh's (0 all passed, 1 a step failed,
# 77 no CUDA device), or 2 when the bundle cannot run here.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { echo "usage: $0 pack BUILD_DIR BUNDLE.tar.gz | check BUNDLE.tar.gz [LOG_DIR]" >&2 && exit 2; }
[ $# -ge 2 ] || usage
mode=$1
shift
binaries=(prop_runner bench/bench_attention_cuda)
for f in attention kvcache layernorm softmax_topk; do binaries+=("tests/kprop_${f}_tests"); done

case "$mode" in
  pack)
    [ $# -eq 2 ] || usage
    build=$(cd "$1" && pwd) || exit 1
    out=$2
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/build/tests" "$stage/build/bench" "$stage/build/examples" "$stage/lib"
    for b in "${binaries[@]}"; do
      [ -x "$build/$b" ] || { echo "$0: $build/$b: not built (a CUDA build is needed)" >&2; exit 1; }
      strip -o "$stage/build/$b" "$build/$b" || exit 1
    done
    for so in "$build"/examples/*cuda*.so; do
      [ -e "$so" ] && { strip -o "$stage/build/examples/$(basename "$so")" "$so" || exit 1; }
    done
    # Libraries outside the C/C++ runtime and CUDA: the target machine has
    # its own (a newer libstdc++ must not be replaced by an older one).
    while read -r name path; do
      case "$name" in
        libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | libgcc_s.so* | libstdc++.so*) ;;
        libcuda* | libcublas* | libcudart* | libnvrtc* | libnvJitLink*) ;;
        *) cp -L "$path" "$stage/lib/$name" || exit 1 ;;
      esac
    done < <(for b in "${binaries[@]}"; do ldd "$build/$b"; done | awk '$3 ~ /^\// {print $1, $3}' | sort -u)
    grep -m1 '^CMAKE_HOME_DIRECTORY' "$build/CMakeCache.txt" | cut -d= -f2 >"$stage/source_dir"
    git -C "$root" rev-parse HEAD >"$stage/commit" 2>/dev/null || echo unknown >"$stage/commit"
    tar czf "$out" -C "$stage" . || exit 1
    echo "$out: $(du -h "$out" | cut -f1), commit $(cat "$stage/commit"), libraries: $(ls "$stage/lib" | tr '\n' ' ')"
    ;;
  check)
    bundle=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
    logs=$(mkdir -p "${2:-gpu_check}" && cd "${2:-gpu_check}" && pwd) || exit 2
    work=$(mktemp -d)
    link=""
    cleanup() {
      [ -n "$link" ] && rm -f "$link"
      rm -rf "$work"
    }
    trap cleanup EXIT
    tar xzf "$bundle" -C "$work" || exit 2
    here=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
    [ "$(cat "$work/commit")" = "$here" ] ||
      echo "$0: note: bundle built at $(cat "$work/commit"), this checkout is $here"
    src=$(cat "$work/source_dir")
    if [ ! -e "$src" ]; then
      mkdir -p "$(dirname "$src")" && ln -s "$root" "$src" || {
        echo "$0: the test binaries read specs from $src, which cannot be made here" >&2
        exit 2
      }
      link=$src
      echo "$0: $src -> $root (the source directory the test binaries were built in)"
    fi
    export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
      [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
    done
    export PATH="$PATH:/usr/local/cuda/bin"
    missing=$(for b in "${binaries[@]}"; do ldd "$work/build/$b" | grep "not found" | sed "s|^|$b: |"; done)
    if [ -n "$missing" ]; then
      echo "$0: libraries not found here:" >&2
      echo "$missing" >&2
      exit 2
    fi
    "$work/build/prop_runner" --list >/dev/null || { echo "$0: the bundled prop_runner does not run here" >&2; exit 2; }
    bash "$root/scripts/gpu_check.sh" "$work/build" "$logs"
    ;;
  *) usage ;;
esac
