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
fail() { echo "worker_wiring_test: $*"; exit 1; }
# expect WHAT EXIT TEXT STORED [prop_runner flags...]: runs op_copy.yaml against
# the worker (its flags after --) from the folder run/, which must stay empty
# where STORED is "nothing" (a failure of the code is stored, as any).
expect() {
  local what="$1" want="$2" text="$3" stored="$4"
  shift 4
  local flags=() worker=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  worker=("$@")
  out=$(cd "$dir/run" && "$runner" --spec "$src/tests/external/op_copy.yaml" --seed 1 "${flags[@]}" \
    --target "exec:$python $src/tests/external/wiring_worker.py${worker[*]:+ ${worker[*]}}" 2>&1)
  rc=$?
  printf '%s\n' "$out"
  [ "$rc" -eq "$want" ] || fail "$what: exit $rc, expected $want"
  printf '%s' "$out" | grep -qF -- "$text" || fail "$what: no line says: $text"
  [ "$stored" != nothing ] || [ -z "$(ls -A "$dir/run")" ] || fail "$what: stored $(ls -A "$dir/run")"
}
expect wiring 2 "the worker's function copy cannot take the arguments of op copy: missing a required argument: 'inp'" nothing
mkdir "$dir/alone"
cp "$src/python/kprop_worker.py" "$dir/alone/"
out=$(cd "$dir/alone" && "$python" -c "import kprop_worker" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -ne 0 ] || fail "the import alone succeeded"
printf '%s' "$out" | grep -q "^ImportError: kprop_worker.py needs .*/kprop/_half.py beside it: copy kprop's python/kprop/ folder with it" ||
  fail "no clear import error"
expect "missing module (SKIPPED)" 77 \
  "ModuleNotFoundError: No module named 'kprop_test_no_such_module' (an import the function made failed: it cannot run here)" \
  nothing --skipped-exit 77 -- --import
expect "a missing name (the code's error)" 3 "ImportError: cannot import name 'kprop_test_no_such_name'" \
  findings --no-corpus -- --import-name
