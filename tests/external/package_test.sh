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
# Every ABI header compiles on its own, as C and as C++ (a plugin includes
# just its family's, as the README points it to).
for h in "$tmp/prefix/include/kprop/abi/"*.h; do
  echo "#include <kprop/abi/$(basename "$h")>" | cc -fsyntax-only -std=c99 -Wall -Wextra -Werror \
    -I "$tmp/prefix/include" -x c - || { echo "$h does not compile alone as C"; exit 1; }
  echo "#include <kprop/abi/$(basename "$h")>" | c++ -fsyntax-only -Wall -Wextra -Werror \
    -I "$tmp/prefix/include" -x c++ - || { echo "$h does not compile alone as C++"; exit 1; }
done
# A program that links kprop::testing but no family is told so, not
# "unknown family 'attention'; valid: " (an empty list).
mkdir -p "$tmp/nofam"
cat > "$tmp/nofam/CMakeLists.txt" << 'CM'
cmake_minimum_required(VERSION 3.25)
project(nofam LANGUAGES CXX)
find_package(kprop REQUIRED)
add_executable(nofam main.cpp)
target_link_libraries(nofam PRIVATE kprop::testing GTest::gtest)
CM
cat > "$tmp/nofam/main.cpp" << 'CPP'
#include <kprop/testing.h>
#include <cstdio>
int main(int, char** argv) {
  try {
    kprop::testing::run_in_process(argv[1], {});
  } catch (const std::exception& e) {
    std::puts(e.what());
  }
}
CPP
cmake -S "$tmp/nofam" -B "$tmp/nofam/build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  > "$tmp/nofam.log" 2>&1 && cmake --build "$tmp/nofam/build" >> "$tmp/nofam.log" 2>&1 ||
  { tail -30 "$tmp/nofam.log"; exit 1; }
said=$("$tmp/nofam/build/nofam" "$tmp/prefix/share/kprop/specs/attention_fwd.yaml")
case "$said" in
  *"no kprop family is linked into this program: link kprop::families"*) ;;
  *) echo "a program without families was told: $said"; exit 1 ;;
esac
# A plugin needs only the C ABI: find_package(kprop COMPONENTS abi) gives
# kprop::abi and looks for none of kprop's dependencies (each is turned off
# here: a find_dependency of one would fail the configure).
mkdir -p "$tmp/plugin"
cat > "$tmp/plugin/CMakeLists.txt" << 'CM'
cmake_minimum_required(VERSION 3.25)
project(plugin LANGUAGES CXX)
find_package(kprop REQUIRED COMPONENTS abi)
add_library(copy_op MODULE copy_op.cpp)
target_link_libraries(copy_op PRIVATE kprop::abi)
CM
cat > "$tmp/plugin/copy_op.cpp" << 'CPP'
#include <kprop/abi/op.h>
#include <cstring>
KPROP_PLUGIN();
KPROP_EXPORT int kprop_op_copy(const kprop_op_args* a, char*, size_t) {
  const kprop_tensor* x = kprop_op_input(a, "x");
  const kprop_tensor* y = kprop_op_output(a, "y");
  int64_t n = 1;
  for (int d = 0; d < x->ndim; ++d) n *= x->shape[d];
  std::memcpy(y->data, x->data, size_t(n) * kprop_dtype_size(x->dtype));
  return KPROP_OK;
}
CPP
cmake -S "$tmp/plugin" -B "$tmp/plugin/build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_DISABLE_FIND_PACKAGE_rapidcheck=ON -DCMAKE_DISABLE_FIND_PACKAGE_yaml-cpp=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON \
  > "$tmp/plugin.log" 2>&1 && cmake --build "$tmp/plugin/build" >> "$tmp/plugin.log" 2>&1 ||
  { tail -30 "$tmp/plugin.log"; exit 1; }
test -f "$tmp/plugin/build/libcopy_op.so"
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
