#!/usr/bin/env bash
# Runs every CUDA target under compute-sanitizer.
#
#   scripts/cuda_sanitize.sh BUILD_DIR [SPEC...]
#
# For each spec (default: every specs/*.yaml whose family registers a `cuda`
# implementation) and each tool (memcheck with --leak-check full, racecheck,
# initcheck, synccheck), runs
#   compute-sanitizer --tool T --error-exitcode 1 \
#     prop_runner --spec S --target "$target" --seed 1 --trials N --no-corpus
# and prints a table tool x target: the errors the tool found, or why the run
# did not count (the property run failed, was skipped, crashed). A run that
# ran out of device memory while others shared the GPU is run again alone
# after the rest, and its cell is that run's (marked "alone"): the tools
# reserve device memory of their own, so parallel runs can exhaust a GPU that
# one run fits in easily; only a run that runs out alone too is reported out
# of memory. Exit 0 only
# if every cell is clean (0 errors and the property run passed); 1 otherwise;
# 77 (skip) without compute-sanitizer or without a CUDA device (or a build
# without CUDA). Logs and JSON reports go to KPROP_SANITIZE_LOGS.
#
# Environment: KPROP_SANITIZE_TRIALS (default 3) cases per run,
# KPROP_SANITIZE_JOBS (default: the CPU count, at most 8) runs at once,
# KPROP_SANITIZE_TOOLS (default "memcheck racecheck initcheck synccheck"),
# KPROP_SANITIZE_TARGET (default cuda; another only to test this script),
# KPROP_SANITIZE_LOGS (default BUILD_DIR/cuda_sanitize: logs and reports),
# COMPUTE_SANITIZER (the tool's path).
set -u

usage() {
  echo "usage: $0 BUILD_DIR [SPEC...]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
build=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
runner=$build/prop_runner
[ -x "$runner" ] || { echo "$0: $runner: no prop_runner there (build it first)" >&2; exit 2; }
trials=${KPROP_SANITIZE_TRIALS:-3}
target=${KPROP_SANITIZE_TARGET:-cuda}  # another target only to test this script
tools=${KPROP_SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}
jobs=${KPROP_SANITIZE_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -gt 8 ] && jobs=8

sanitizer=${COMPUTE_SANITIZER:-}
if [ -z "$sanitizer" ]; then
  sanitizer=$(command -v compute-sanitizer || true)
  [ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
fi
if [ -z "$sanitizer" ] || [ ! -x "$sanitizer" ]; then
  echo "$0: skipped: compute-sanitizer not found (set COMPUTE_SANITIZER or put it on PATH)"
  exit 77
fi

# cuda_domain NAME: the --domain a spec's cuda run draws from (or nothing)
cuda_domain() { sed -n "s/^$1: //p" "$root/scripts/cuda_domains.txt"; }

logs=${KPROP_SANITIZE_LOGS:-$build/cuda_sanitize}
rm -rf "$logs"
mkdir -p "$logs" || exit 2

# A report's top-level "status" (passed, failed, skipped, crashed, ...).
status_of() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("status","?"))' "$1" 2>/dev/null ||
    echo "?"
}
detail_of() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("detail",""))' "$1" 2>/dev/null
}

# Specs whose family has a `cuda` implementation: one plain trial each, which
# also tells whether a device is there at all.
if [ $# -eq 0 ]; then
  set -- "$root"/specs/*.yaml
fi
specs=()
device_seen=0
for spec in "$@"; do
  name=$(basename "$spec" .yaml)
  probe=$logs/$name.probe.json
  domain=$(cuda_domain "$name")
  "$runner" --spec "$spec" --target "$target" --seed 1 --trials 1 --no-corpus --format json --out "$probe" \
    ${domain:+--domain "$domain"} >"$logs/$name.probe.log" 2>&1
  if [ ! -s "$probe" ]; then
    if grep -qE "unknown target '$target'|unknown family" "$logs/$name.probe.log"; then
      continue  # no cuda target (or the family is not in this build)
    fi
    echo "$0: $name: the plain run failed before reporting:" >&2
    tail -5 "$logs/$name.probe.log" >&2
    exit 1
  fi
  if [ "$(status_of "$probe")" = skipped ]; then
    echo "$0: skipped: $name: $(detail_of "$probe")"
    exit 77
  fi
  device_seen=1
  specs+=("$spec")
done
if [ ${#specs[@]} -eq 0 ]; then
  echo "$0: skipped: no spec given has a cuda target"
  exit 77
fi
[ "$device_seen" = 1 ] || exit 77

# One sanitizer run; writes NAME.TOOL.{log,json,cell}, and NAME.TOOL.oom
# when the run hit an out-of-memory error (cudaMalloc or any other call).
run_one() {
  local spec=$1 tool=$2 name
  name=$(basename "$spec" .yaml)
  local base=$logs/$name.$tool extra=() domain
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  domain=$(cuda_domain "$name")
  "$sanitizer" --tool "$tool" --error-exitcode 1 "${extra[@]}" \
    "$runner" --spec "$spec" --target "$target" --seed 1 --trials "$trials" --no-corpus --time 0 --case-timeout 600 \
    ${domain:+--domain "$domain"} --format json --out "$base.json" >"$base.log" 2>&1
  local rc=$? errors status cell
  # memcheck, initcheck, synccheck: "ERROR SUMMARY: N errors";
  # racecheck: "RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)",
  # counted as E + W (the displayed H is capped).
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$base.log" | tail -1 | grep -oE '[0-9]+')
  if [ "$tool" = racecheck ]; then  # hazards: errors and warnings both count
    local summary
    summary=$(grep -oE 'RACECHECK SUMMARY: .*' "$base.log" | tail -1)
    if [ -n "$summary" ]; then
      local e w
      e=$(echo "$summary" | grep -oE '[0-9]+ errors' | grep -oE '[0-9]+')
      w=$(echo "$summary" | grep -oE '[0-9]+ warnings' | grep -oE '[0-9]+')
      errors=$((${e:-0} + ${w:-0}))
    fi
  fi
  status=$(status_of "$base.json")
  rm -f "$base.oom"
  if grep -qE 'cudaErrorMemoryAllocation|out of memory' "$base.log"; then
    touch "$base.oom"
    cell="out of memory"
  elif [ -z "$errors" ]; then
    cell="no summary (rc $rc)"
  elif [ "$errors" != 0 ]; then
    cell="$errors errors"
    [ "$tool" = racecheck ] && cell="$errors hazards"
  elif [ "$status" != passed ]; then
    cell="0 errors, run $status"
  elif [ "$rc" != 0 ]; then
    cell="0 errors, rc $rc"
  else
    cell="clean"
  fi
  echo "$cell" >"$base.cell"
}

for spec in "${specs[@]}"; do
  for tool in $tools; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    run_one "$spec" "$tool" &
  done
done
wait
# Out of memory with other runs on the GPU: again, alone.
if [ "$jobs" -gt 1 ]; then
  for spec in "${specs[@]}"; do
    for tool in $tools; do
      base=$logs/$(basename "$spec" .yaml).$tool
      [ -e "$base.oom" ] || continue
      mv "$base.log" "$base.shared.log"
      run_one "$spec" "$tool"
      echo "$(cat "$base.cell") (alone)" >"$base.cell"
    done
  done
fi

# The table: one row per target, one column per tool.
ok=1
printf '%-14s' "target"
for tool in $tools; do printf ' | %-22s' "$tool"; done
printf '\n'
for spec in "${specs[@]}"; do
  name=$(basename "$spec" .yaml)
  printf '%-14s' "$name"
  for tool in $tools; do
    cell=$(cat "$logs/$name.$tool.cell" 2>/dev/null || echo "missing")
    [ "$cell" = clean ] || [ "$cell" = "clean (alone)" ] || ok=0
    printf ' | %-22s' "$cell"
  done
  printf '\n'
done
echo "($target target, seed 1, $trials trials per run; logs in $logs)"
if [ "$ok" = 1 ]; then
  echo "compute-sanitizer: clean"
  exit 0
fi
echo "compute-sanitizer: NOT clean (see the logs)"
exit 1
