# Shared by the external-target end-to-end tests (sourced, not run).
# Expects $runner, $spec and $tmp to be set; counts failures in $fails.
fails=0
run() {  # run NAME EXPECTED_EXIT prop_runner-args...
  local name="$1" want="$2"
  shift 2
  # A replay draws no cases: it takes no --seed or --trials.
  local draw=(--seed 20261122 --trials 150)
  case " $* " in *" --replay "*) draw=() ;; esac
  "$runner" --spec "$spec" "${draw[@]}" "$@" > "$tmp/$name.log" 2>&1
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL $name: exit $got, expected $want"
    tail -20 "$tmp/$name.log"
    fails=$((fails + 1))
    return 1
  fi
  echo "ok   $name (exit $got)"
}
expect_log() {  # expect_log NAME PATTERN: the run's output says PATTERN
  grep -q -- "$2" "$tmp/$1.log" || { echo "FAIL $1: output lacks '$2'"; tail -20 "$tmp/$1.log"; fails=$((fails + 1)); }
}
