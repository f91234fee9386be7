#!/usr/bin/env bash
# closed_pipe_test.sh PROP_RUNNER PYTHON SOURCE_DIR: a --jobs 2 run of an
# exec: worker that takes 0.1 s a call. The pool's workers compute cases
# ahead and are stopped mid-call when the run has what it needs; each must
# kill its worker before the worker's pipes close. (They closed first, and
# a worker writing its reply got EPIPE: a Python worker without
# kprop_worker's guard printed a BrokenPipeError traceback to the terminal.)
runner="$1" python="$2" src="$3"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export KPROP_PYTHON_DIR="$src/python" KPROP_EXAMPLES_DIR="$src/examples/python"
out=$(cd "$dir" && "$runner" --spec "$src/specs/softmax_topk.yaml" --jobs 2 --trials 20 --seed 1 --no-corpus \
  --target "exec:$python $src/tests/external/slow_softmax_worker.py $dir/closed_pipe" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || { echo "closed_pipe_test: exit $rc, expected 0"; exit 1; }
sleep 0.5  # a worker that outlived the run would write its note now
[ ! -e "$dir/closed_pipe" ] || { echo "closed_pipe_test: a worker wrote to a closed pipe:"; cat "$dir/closed_pipe"; exit 1; }
if printf '%s' "$out" | grep -q "BrokenPipeError"; then echo "closed_pipe_test: a traceback reached the terminal"; exit 1; fi
