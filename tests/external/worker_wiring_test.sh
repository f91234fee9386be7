#!/usr/bin/env bash
# worker_wiring_test.sh PROP_RUNNER PYTHON SOURCE_DIR: python/kprop_worker.py
# (1) answers a function that cannot take the op's arguments as its wiring,
# as python -m kprop.worker does: the run stops, exit 2, one line naming the
# function and the arguments, nothing stored. It was the kernel's crash:
# exit 3, shrunk and saved as a finding against a kernel never called.
# (2) copied alone, without the kprop/ folder it reads, says so at import
# (it was a FileNotFoundError's traceback from importlib). (3) A function
# whose import fails (a module missing here) cannot run on this machine:
# the run is SKIPPED with the error, nothing stored (it was the kernel's
# error, shrunk and stored, and as a mutant's a kill). (4) An ImportError
# that is no missing module (a name the module lacks) is the code's error.
runner="$1" python="$2" src="$3"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/run"
out=$(cd "$dir/run" && "$runner" --spec "$src/tests/external/op_copy.yaml" --seed 1 \
  --target "exec:$python $src/tests/external/wiring_worker.py" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 2 ] || { echo "worker_wiring_test: exit $rc, expected 2"; exit 1; }
printf '%s' "$out" | grep -q "the worker's function copy cannot take the arguments of op copy: missing a required argument: 'inp'" ||
  { echo "worker_wiring_test: no wiring error"; exit 1; }
[ -z "$(ls -A "$dir/run")" ] || { echo "worker_wiring_test: stored $(ls -A "$dir/run")"; exit 1; }
mkdir "$dir/alone"
cp "$src/python/kprop_worker.py" "$dir/alone/"
out=$(cd "$dir/alone" && "$python" -c "import kprop_worker" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -ne 0 ] || { echo "worker_wiring_test: the import alone succeeded"; exit 1; }
printf '%s' "$out" | grep -q "^ImportError: kprop_worker.py needs .*/kprop/_half.py beside it: copy kprop's python/kprop/ folder with it" ||
  { echo "worker_wiring_test: no clear import error"; exit 1; }
out=$(cd "$dir/run" && "$runner" --spec "$src/tests/external/op_copy.yaml" --seed 1 --skipped-exit 77 \
  --target "exec:$python $src/tests/external/wiring_worker.py --import" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 77 ] || { echo "worker_wiring_test: missing module: exit $rc, expected 77 (SKIPPED)"; exit 1; }
printf '%s' "$out" | grep -q "ModuleNotFoundError: No module named 'kprop_test_no_such_module' (an import the function made failed: it cannot run here)" ||
  { echo "worker_wiring_test: no missing-module reason"; exit 1; }
[ -z "$(ls -A "$dir/run")" ] || { echo "worker_wiring_test: missing module: stored $(ls -A "$dir/run")"; exit 1; }
out=$(cd "$dir/run" && "$runner" --spec "$src/tests/external/op_copy.yaml" --seed 1 --no-corpus \
  --target "exec:$python $src/tests/external/wiring_worker.py --import-name" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 3 ] || { echo "worker_wiring_test: a missing name: exit $rc, expected 3 (the code's error)"; exit 1; }
printf '%s' "$out" | grep -q "ImportError: cannot import name 'kprop_test_no_such_name'" ||
  { echo "worker_wiring_test: no ImportError named"; exit 1; }
