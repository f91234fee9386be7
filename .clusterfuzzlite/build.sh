#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build. Uses the environment's $CC, $CXX,
# $CXXFLAGS (sanitizers, coverage), $LIB_FUZZING_ENGINE, $SRC, $OUT, $WORK.
# Ships, per spec: fuzz_<spec> (fuzz_op_<name> for specs/ops/<name>.yaml), fuzz_<spec>.yaml (the spec, found beside the
# binary), fuzz_<spec>.options and fuzz_<spec>_seed_corpus.zip (cases from
# the spec's own generator); fuzz_<spec>-<impl> for each other optimized CPU
# implementation of a family spec; plus fuzz_spec_loader seeded with every spec.
# KPROP_FAMILIES (optional) limits the build to some family folders.
src="$SRC/kprop"
build="${WORK:-/tmp}/kprop-cflite-build"
# The environment's flags are the build's flags: Release adds only -DNDEBUG,
# not its own -O3 after OSS-Fuzz's -O1 (or a coverage build's flags).
cmake -S "$src" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE=-DNDEBUG -DCMAKE_CXX_FLAGS_RELEASE=-DNDEBUG \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_CXX_FLAGS="$CXXFLAGS" -DKPROP_OSSFUZZ=ON -DKPROP_FUZZ_ENGINE="$LIB_FUZZING_ENGINE" \
  -DKPROP_TESTS=OFF -DKPROP_BENCH=OFF -DKPROP_CUDA=OFF -DKPROP_FAMILIES="${KPROP_FAMILIES:-}" \
  -DCMAKE_BUILD_RPATH='$ORIGIN/lib'
cmake --build "$build" --target kprop_fuzzers

# A spec's default target is often its reference; the family's other
# optimized CPU implementations get a fuzzer each, so that batch fuzzing
# reaches the optimized kernels too: fuzz_<spec>-<impl>, the same binary
# beside the spec with `target: <impl>` (what the harness reads), sharing
# the spec's options and seed corpus (the cases do not depend on the target).
listing="$build/implementations.json"
"$build/prop_runner" --list --format json > "$listing"
other_targets() {
  python3 - "$1" "$listing" <<'PY'
import json, re, sys
spec = open(sys.argv[1]).read()
family = re.search(r"^family:\s*(\S+)", spec, re.M).group(1)
target = re.search(r"^target:\s*(\S+)", spec, re.M).group(1)
for f in json.load(open(sys.argv[2]))["families"]:
    if f["name"] == family:
        for i in f["implementations"]:
            if i["kind"] == "optimized" and i["device"] == "cpu" and i["name"] != target:
                print(i["name"])
PY
}

mkdir -p "$OUT/lib"
for fuzzer in "$build"/fuzz/fuzz_*; do
  name=$(basename "$fuzzer")
  # prop_runner --fuzz's harness for any spec, which it names in the
  # environment: nothing for ClusterFuzzLite, which runs each fuzz_<spec>.
  [ "$name" = fuzz_any_spec ] && continue
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
  case "$name" in fuzz_op_*|fuzz_spec_loader) continue ;; esac
  for impl in $(other_targets "$spec"); do
    cp "$fuzzer" "$OUT/$name-$impl"
    cp "$OUT/$name.options" "$OUT/$name-$impl.options"
    cp "$OUT/${name}_seed_corpus.zip" "$OUT/$name-${impl}_seed_corpus.zip"
    sed "s/^target:.*/target: $impl/" "$spec" > "$OUT/$name-$impl.yaml"
  done
done
