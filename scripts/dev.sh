#!/usr/bin/env bash
# The two entry points of the README, on a fresh Debian 12 machine:
#   scripts/dev.sh run [prop_runner flags]   install, build prop_runner, run specs/dflash.yaml
#   scripts/dev.sh test                      install, build, run the whole suite
#                                            (optimised build, then ASan+UBSan+libFuzzer build;
#                                            the framework's unit tests and the end-to-end
#                                            tests alike in both in the second only, the
#                                            sweeps in the first only)
#   scripts/dev.sh san-run --spec S [flags]  install, build under ASan+UBSan, run prop_runner there
# Also: deps (install packages only), build, build-san, build-fuzz (coverage-only fuzzers).
set -euo pipefail
cd "$(dirname "$0")/.."

# Everything comes from Debian's packages; nothing is downloaded at build time.
PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  lld  # the linker, a quarter of GNU ld's time (CMakeLists.txt, KPROP_LLD)
  clang libclang-rt-14-dev libfuzzer-14-dev
  librapidcheck-dev libyaml-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  python3-numpy  # the exec: worker examples (python/kprop_worker.py)
  python3-dev python3-venv  # the Python package (pyproject.toml, docs/PYTHON.md)
  chromium python3-yaml python3-pil  # the HTML report test (tests/report/html_report_test.py, ctest report.html.chromium)
)
# From PyPI, into .venv/ (git-ignored; Debian's python3 with its numpy):
# nanobind and scikit-build-core build the extension kprop._kprop, pytest
# runs tests/python (the ctest python.pytest).
PYPI_PACKAGES=(nanobind==3.1.0 scikit-build-core==1.1.2 pytest==9.2.0)
JOBS="${KPROP_JOBS:-$(nproc)}"

# Wall time of each step of `test`, so a slow CI run says where it went.
_phase_start=$SECONDS
phase() {
  echo "kprop: $1 took $((SECONDS - _phase_start)) s"
  _phase_start=$SECONDS
}

deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "kprop: installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
  venv
}

# .venv/: /usr/bin/python3 with Debian's site packages (numpy) plus PYPI_PACKAGES.
venv() {
  if [ ! -x .venv/bin/python ]; then
    echo "kprop: creating .venv (python3 -m venv --system-site-packages)"
    /usr/bin/python3 -m venv --system-site-packages .venv
  fi
  if ! .venv/bin/python -c "import nanobind, scikit_build_core, pytest" 2>/dev/null; then
    echo "kprop: installing ${PYPI_PACKAGES[*]} into .venv"
    .venv/bin/python -m pip install -q --disable-pip-version-check "${PYPI_PACKAGES[@]}"
  fi
}

# -g1: line tables and function names, what a backtrace needs; full -g costs
# a quarter more compile time (CI builds twice, from scratch, on 2 cores).
# build [cmake options] [-- targets]: everything, unless targets are named.
build() {
  local flags="-O2 -g1 -DNDEBUG" options=() targets=()
  while (($#)) && [ "$1" != "--" ]; do options+=("$1"); shift; done
  if (($#)); then shift; fi
  if (($#)); then targets=(--target "$@"); fi
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" $(cuda_archs) "${options[@]}"
  cmake --build build -j "$JOBS" "${targets[@]}"
}

# The CUDA archs of the optimised build, where nvcc is found: this machine's
# GPU (native), or, with no GPU to run them on, sm_80 alone, a check that
# the CUDA code compiles (sm_80 and sm_90 both doubled the device compiles,
# 60 s of a 2-core CI). $KPROP_CUDA_ARCHS overrides ("80;90" builds what a
# plain cmake builds).
cuda_archs() {
  command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || return 0
  local archs="${KPROP_CUDA_ARCHS:-}"
  if [ -z "$archs" ]; then
    if nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then archs=native; else archs=80; fi
  fi
  echo "-DCMAKE_CUDA_ARCHITECTURES=$archs"
}

# One clang build serves both the sanitizer run of the suite and the fuzzers.
# Line tables are all a sanitizer report's stack needs (full -g costs a
# fifth more compile time); the benchmarks are timed in the optimised build.
build_san() {
  local flags="-O2 -gline-tables-only -DNDEBUG"
  CC=clang CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKPROP_FUZZ=ON \
    -DKPROP_BENCH=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags"
  cmake --build build-san -j "$JOBS"
}

# The fuzzers and prop_runner with coverage instrumentation only, no
# ASan/UBSan (KPROP_FUZZ_SANITIZE=OFF): about three times build-san's
# executions per second, for long fuzzing of what the invariants see; a
# memory error in a kernel goes unreported there (fuzz build-san's harnesses
# on the same corpus for that). build-fuzz/prop_runner --fuzz runs them.
build_fuzz() {
  local flags="-O2 -gline-tables-only -DNDEBUG"
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKPROP_FUZZ=ON \
    -DKPROP_FUZZ_SANITIZE=OFF -DKPROP_TESTS=OFF -DKPROP_BENCH=OFF -DKPROP_CUDA=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags"
  cmake --build build-fuzz -j "$JOBS" --target kprop_fuzzers
}

# same_cases A B: A/prop_runner and B/prop_runner draw the same cases from
# every spec (specs/, specs/examples, specs/ops) at two seeds, compared as
# the harness's seed inputs (each drawn case, encoded). Two draws in one
# function call's arguments, or in one operator's operands, are drawn in the
# order the compiler picks, and g++ (build) and clang (build-san) pick
# differently: a seed, a replay by seed or an imported fuzzer input would
# then mean another case in the other build.
same_cases() {
  local tmp spec name seed differ=()
  tmp="$(mktemp -d)"
  for spec in specs/*.yaml specs/examples/*.yaml specs/ops/*.yaml; do
    name="${spec//\//_}"
    for seed in 5 6; do
      if ! "$1/prop_runner" --spec "$spec" --seed "$seed" --fuzz-seeds "$tmp/a/$name.$seed" >/dev/null ||
        ! "$2/prop_runner" --spec "$spec" --seed "$seed" --fuzz-seeds "$tmp/b/$name.$seed" >/dev/null; then
        differ+=("$spec (seed $seed: prop_runner --fuzz-seeds failed)")
      elif ! diff -rq "$tmp/a/$name.$seed" "$tmp/b/$name.$seed" >/dev/null; then
        differ+=("$spec (seed $seed)")
      fi
    done
  done
  rm -rf "$tmp"
  if ((${#differ[@]})); then
    echo "kprop: $1 and $2 draw different cases from the same seed: ${differ[*]} (two draws in one" \
      "call's arguments or one operator's operands? their order is the compiler's)" >&2
    return 1
  fi
  echo "kprop: $1 and $2 draw the same cases (every spec, seeds 5 and 6)"
}

case "${1:-}" in
  deps) deps ;;
  build) deps && build -DKPROP_FRAMEWORK_TESTS=ON -DKPROP_SAN_TWIN_TESTS=ON ;;
  build-san) deps && build_san ;;
  build-fuzz) deps && build_fuzz ;;
  run)
    shift
    deps && build -- prop_runner
    exec build/prop_runner --spec specs/dflash.yaml "$@"
    ;;
  san-run)
    # Any spec and target in process under ASan+UBSan: an out-of-bounds read
    # or write, a use after free, a leak or undefined behaviour in a kernel
    # stops the run with the sanitizer's report (exit 3 for the crash guard's
    # saved case, or the sanitizer's own exit code).
    shift
    [ $# -gt 0 ] || { echo "usage: scripts/dev.sh san-run --spec FILE [prop_runner flags]" >&2; exit 2; }
    deps && build_san
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}" \
      UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" exec build-san/prop_runner "$@"
    ;;
  test)
    deps
    # The suite must leave the checkout as it found it (no test writes into
    # specs/, corpus/ or any tracked folder): compared after both runs.
    before=""
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then before="$(git status --porcelain)"; fi
    phase "install"
    # Every program but the framework's unit tests (tests/core,
    # kprop_core_tests): they build and run once, under ASan+UBSan below,
    # where a memory error in the code they drive is a failure too. Nothing
    # in them depends on the build (no CUDA, no sanitizer branch: the spec-wide
    # tests that do are tests/specs'). About 50 s of test time and 80 s of
    # compile not spent twice; the cost is that g++ does not compile them in
    # CI (clang does, with the same -Werror). `scripts/dev.sh build` builds
    # them here too, and `ctest --test-dir build` then runs them; a plain
    # `cmake -S . -B build` after this keeps them out (the option is cached).
    # And without the end-to-end tests the sanitizer build runs with the same
    # command (tests/CMakeLists.txt, "Twins"): they run there, once.
    build -DKPROP_FRAMEWORK_TESTS=OFF -DKPROP_SAN_TWIN_TESTS=OFF
    phase "optimised build"
    # The Python package's suite (tests/python) runs in there as the ctest
    # python.pytest, against build/python: it must exist, never be silently dropped.
    if ! ctest --test-dir build -N -R '^python\.pytest$' | grep -q "Total Tests: 1"; then
      echo "kprop: the Python module was not built (no ctest python.pytest; is nanobind in .venv?)" >&2
      exit 1
    fi
    ctest --test-dir build --output-on-failure -j "$JOBS"
    phase "optimised suite"
    build_san
    phase "sanitizer build"
    # Leak checking stays on; halt_on_error makes a sanitizer report fail the test.
    # A 10 MB quarantine of freed memory (ASan's default 256 MB; OSS-Fuzz's
    # runners use 10): each process of the suite held up to 300 MB of it, and
    # every fork (a case checked in a child, a --jobs worker, libFuzzer's
    # fork mode) and page fault paid for it: 8% of the suite's CPU. A
    # use after free is still caught while the block is among the last
    # 10 MB freed.
    ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:quarantine_size_mb=10" \
      UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" ctest --test-dir build-san --output-on-failure -j "$JOBS"
    phase "sanitizer suite"
    ASAN_OPTIONS="detect_leaks=1:halt_on_error=1" same_cases build build-san
    phase "same cases under g++ and clang"
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
      after="$(git status --porcelain)"
      if [ "$before" != "$after" ]; then
        echo "kprop: the test suite changed the checkout:" >&2
        diff <(echo "$before") <(echo "$after") >&2 || true
        exit 1
      fi
      echo "kprop: checkout unchanged by the suite"
    fi
    ;;
  *)
    echo "usage: scripts/dev.sh run|test|san-run|deps|build|build-san|build-fuzz" >&2
    exit 2
    ;;
esac
