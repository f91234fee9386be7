#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build. Uses the environment's $CC, $CXX,
# $CXXFLAGS (sanitizers, coverage), $LIB_FUZZING_ENGINE, $SRC, $OUT, $WORK.
# Ships, per spec: fuzz_<spec> (fuzz_op_<name> for specs/ops/<name>.yaml), fuzz_<spec>.yaml (the spec, found beside the
# binary), fuzz_<spec>.options and fuzz_<spec>_seed_corpus.zip (cases from
# the spec's own generator); plus fuzz_spec_loader seeded with every spec.
# KPROP_FAMILIES (optional) limits the build to some family folders.
src="$SRC/kprop"
build="${WORK:-/tmp}/kprop-cflite-build"
cmake -S "$src" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_CXX_FLAGS="$CXXFLAGS" -DKPROP_OSSFUZZ=ON -DKPROP_FUZZ_ENGINE="$LIB_FUZZING_ENGINE" \
  -DKPROP_TESTS=OFF -DKPROP_BENCH=OFF -DKPROP_CUDA=OFF -DKPROP_FAMILIES="${KPROP_FAMILIES:-}" \
  -DCMAKE_BUILD_RPATH='$ORIGIN/lib'
cmake --build "$build" --target kprop_fuzzers

mkdir -p "$OUT/lib"
for fuzzer in "$build"/fuzz/fuzz_*; do
  name=$(basename "$fuzzer")
  cp "$fuzzer" "$OUT/"
  # Shared libraries the runner image lacks travel in $OUT/lib ($ORIGIN/lib rpath).
  ldd "$fuzzer" | awk '/libyaml-cpp|libfmt/ {print $3}' | xargs -r -I{} cp -L {} "$OUT/lib/"
  printf '[libfuzzer]\nmax_len = 4096\n' > "$OUT/$name.options"
  spec="$src/specs/${name#fuzz_}.yaml"
  case "$name" in fuzz_op_*) [ -f "$src/specs/ops/${name#fuzz_op_}.yaml" ] && spec="$src/specs/ops/${name#fuzz_op_}.yaml" ;; esac
  seeds="$build/seeds/$name"
  rm -rf "$seeds"
  mkdir -p "$seeds"
  if [ -f "$spec" ]; then
    cp "$spec" "$OUT/$name.yaml"
    "$build/prop_runner" --spec "$spec" --fuzz-seeds "$seeds" >/dev/null
  else
    cp "$src"/specs/*.yaml "$seeds/"
  fi
  (cd "$seeds" && cmake -E tar cf "$OUT/${name}_seed_corpus.zip" --format=zip -- *)
done
