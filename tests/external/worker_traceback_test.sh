#!/usr/bin/env bash
# worker_traceback_test.sh PROP_RUNNER PYTHON SOURCE_DIR: a kernel that
# raises on wide rows, its message naming the width, fails the run (exit 3,
# the error shrunk to D 3), and kprop_worker prints its traceback once: the
# shrink repeats the error at every step with another message (it printed
# one traceback per distinct message: here "rows of 4" and "rows of 3", a
# screenful per shrink of a real kernel). One worker: --jobs 1, and no
# replay check (its fresh process starts a worker of its own, which prints
# the error's traceback once too).
runner="$1" python="$2" src="$3"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$(cd "$dir" && "$runner" --spec "$src/tests/external/op_copy.yaml" --seed 1 --no-corpus --jobs 1 \
  --no-replay-check --target "exec:$python $src/tests/external/shape_error_worker.py" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 3 ] || { echo "worker_traceback_test: exit $rc, expected 3"; exit 1; }
printf '%s' "$out" | grep -Eq "shrunk: T 1, D 3 " || { echo "worker_traceback_test: not shrunk to D 3"; exit 1; }
n=$(printf '%s\n' "$out" | grep -c "^Traceback")
[ "$n" -eq 1 ] || { echo "worker_traceback_test: $n tracebacks, expected 1"; exit 1; }
