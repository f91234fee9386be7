#!/usr/bin/env bash
# plugin_load_test.sh PROP_RUNNER SPEC CTOR_CRASH CTOR_HANG: plugins that fail
# while they load. The runner loads a plugin in the plugin host (a child),
# never in its own process, so
# - one whose constructor aborts ends the run with exit 2 and says that the
#   target died while starting (it killed prop_runner with signal 11, no
#   message, when the runner loaded it itself);
# - one whose constructor never returns is stopped by one SIGTERM: exit 130
#   within seconds, its host killed (one SIGTERM only set the interrupt flag,
#   and the run sat in dlopen until the handshake's 60 s allowance ran out).
# - one rebuilt during the run (its kernel touches its .so, then aborts) is
#   refused by the host restarted after the crash: the crash is stored (exit
#   3), but not shrunk against the changed file: the shrink stops and says
#   why (a restarted host loads the plugin again, and must load the same
#   code as the cases so far).
runner="$1" spec="$2" crash="$3" hang="$4" touches="$5"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0

out=$(cd "$dir" && "$runner" --spec "$spec" --target "plugin:$crash" --trials 5 --seed 1 --no-corpus 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 2 ] || { echo "FAIL ctor_crash: exit $rc, expected 2"; fails=$((fails + 1)); }
printf '%s' "$out" | grep -q "prop_runner: error: plugin:.*: the target was killed by signal 6 (Aborted) while starting, before it answered the handshake" ||
  { echo "FAIL ctor_crash: no one-line error saying the plugin died while starting"; fails=$((fails + 1)); }

# The touched copy: the build's own file is left as it is.
cp "$touches" "$dir/libtouched.so"
out=$(cd "$dir" && "$runner" --spec "$spec" --target "plugin:./libtouched.so" --trials 5 --seed 1 --corpus "$dir/c" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 3 ] || { echo "FAIL touches_itself: exit $rc, expected 3"; fails=$((fails + 1)); }
printf '%s' "$out" | grep -q "shrinking stopped: plugin:./libtouched.so: could not be restarted after its last failure: the plugin file changed since the run opened it" ||
  { echo "FAIL touches_itself: the changed file was not refused"; fails=$((fails + 1)); }

(cd "$dir" && exec "$runner" --spec "$spec" --target "plugin:$hang" --trials 5 --seed 1 --no-corpus) > "$dir/hang.log" 2>&1 &
pid=$!
# SIGTERM once the run has said its seed (its interrupt handler is installed
# by then, and the plugin host is loading the plugin).
for _ in $(seq 300); do grep -q "seed 1" "$dir/hang.log" 2>/dev/null && break; sleep 0.1; done
sleep 1
kill -TERM "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  echo "FAIL ctor_hang: still running 10 s after SIGTERM"
  kill -KILL "$pid"
  fails=$((fails + 1))
fi
wait "$pid"
rc=$?
cat "$dir/hang.log"
[ "$rc" -eq 130 ] || { echo "FAIL ctor_hang: exit $rc, expected 130"; fails=$((fails + 1)); }
# Its plugin host is gone too: nothing still has the plugin loaded.
sleep 0.5
if grep -ls "$(basename "$hang")" /proc/[0-9]*/maps 2>/dev/null | grep -q .; then
  echo "FAIL ctor_hang: a process still has the plugin loaded"
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] && echo "plugin_load_test: ok"
exit "$fails"
