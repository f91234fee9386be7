#!/usr/bin/env bash
# kprop as a CMake package: install the build tree, then configure, build and
# run examples/consumer (find_package(kprop) + kprop/testing.h) against it.
#   package_test.sh BUILD_DIR SOURCE_DIR [PYTHON]
set -euo pipefail
build="$1" source="$2" python="${3:-python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$source/examples/consumer" -B "$tmp/consumer" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/consumer" > "$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; exit 1; }
(cd "$tmp/consumer" && ctest --output-on-failure)
test -x "$tmp/prefix/bin/prop_runner"
# Only the public headers are installed (kprop/testing.h's closure and the ABI).
test -f "$tmp/prefix/include/kprop/abi.h"
for internal in listing.h fuzz_driver.h gen.h case_yaml.h; do
  if [ -e "$tmp/prefix/include/kprop/$internal" ]; then echo "internal header installed: $internal"; exit 1; fi
done
# The installed worker has what it loads by path beside it, and imports
# (where this Python has NumPy, which the worker needs).
test -f "$tmp/prefix/share/kprop/python/kprop/_half.py"
test -f "$tmp/prefix/share/kprop/python/kprop/_wire.py"
if "$python" -c "import numpy" 2> /dev/null; then
  "$python" -c "import sys; sys.path.insert(0, '$tmp/prefix/share/kprop/python'); import kprop_worker"
fi
# A shipped spec whose reference is an exec: worker finds it where the spec's
# path leads (specs/ops/sort.yaml: ../../examples/ops/sort_reference.py).
if "$python" -c "import numpy" 2> /dev/null; then
  for spec in $(grep -l "^  reference: *exec:" "$tmp/prefix/share/kprop/specs/"*.yaml "$tmp/prefix/share/kprop/specs/ops/"*.yaml); do
    (cd "$tmp" && PATH="$(dirname "$python"):$PATH" "$tmp/prefix/bin/prop_runner" --spec "$spec" --trials 5 --seed 1 \
      --no-corpus > "$tmp/spec.log" 2>&1) || { echo "installed $spec does not run:"; tail -5 "$tmp/spec.log"; exit 1; }
  done
fi
echo "package: installed, found, consumer test passed"
