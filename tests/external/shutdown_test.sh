#!/usr/bin/env bash
# shutdown_test.sh PROP_RUNNER COPY_PLUGIN PYTHON: at the end of a run the
# runner closes each child's pipe and gives it 1 s to exit (docs/EXTERNAL.md,
# "Shutdown."), naming one it then had to kill.
# - The plugin host exits on that EOF. It used to keep the runner's end of
#   its own request pipe (fork() copies it, O_CLOEXEC or not, and the host
#   does not exec), so it never read EOF: every plugin run waited the second
#   and killed it.
# - A worker that ignores EOF is killed after the second, and named.
set -uo pipefail
runner="$1" plugin="$2" python="$3"
root="$(cd "$(dirname "$0")/../.." && pwd)"
spec="$root/tests/external/op_copy.yaml"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
note="had not exited 1 s after its input was closed, and was killed"

"$runner" --spec "$spec" --seed 1 --trials 5 --no-corpus --target "plugin:$plugin" > "$tmp/plugin.log" 2>&1
code=$?
cat "$tmp/plugin.log"
[ "$code" -eq 0 ] || { echo "plugin run: exit $code, expected 0"; exit 1; }
! grep -q "$note" "$tmp/plugin.log" || { echo "the plugin host did not exit when its pipe closed"; exit 1; }

cat > "$tmp/stays.py" <<PY
import sys, time
sys.path.insert(0, "$root/python")
import kprop_worker
kprop_worker.serve({"copy": lambda x, **_: {"y": x}})
time.sleep(60)  # ignores EOF: exit-time work that never ends
PY
"$runner" --spec "$spec" --seed 1 --trials 5 --no-corpus --target "exec:$python $tmp/stays.py" > "$tmp/stays.log" 2>&1
code=$?
cat "$tmp/stays.log"
[ "$code" -eq 0 ] || { echo "worker run: exit $code, expected 0"; exit 1; }
grep -q "kprop: exec:$python $tmp/stays.py $note" "$tmp/stays.log" || { echo "the killed worker is not named"; exit 1; }
echo "shutdown: the plugin host exits on EOF; a worker that does not is killed and named"
