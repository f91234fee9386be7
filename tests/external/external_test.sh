#!/usr/bin/env bash
# External targets end to end, through prop_runner exactly as a user runs it:
#   external_test.sh RUNNER SPEC PLUGIN_DIR BAD_VERSION_SO NO_ENTRY_SO PYTHON
# PYTHON is empty when no python3 with NumPy exists (the worker checks are
# then skipped, exit 77).
set -uo pipefail
runner="$1" spec="$2" plugins="$3" bad_version="$4" no_entry="$5" python="${6:-}" latin1_error="${7:-}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run, expect_log and the failure count $fails
source "$(dirname "$0")/lib.sh"

# The example takes f32 and f64 (it declines f16 and bf16, half of what the
# spec draws): narrowed to those, as the README narrows a kernel of yours.
run plugin_correct 0 --no-corpus --target "plugin:$plugins/libattention_fwd_correct.so" --domain '{dtypes: [f32, f64]}'
run plugin_buggy 1 --no-corpus --target "plugin:$plugins/libattention_fwd_buggy.so"
expect_log plugin_buggy "shrunk: B1 Hq1/Hkv1 Nq1 Nk1 D1"

# run.padded_tensors: every tensor of two or more dimensions reaches the
# plugin with padded rows. The correct example (indexes through strides)
# passes; one that indexes as if contiguous passes on kprop's default
# tensors and fails padded, with the output and row named; an exec: worker
# cannot be padded and is refused in one line.
sed 's/^run: {/run: {padded_tensors: true, /' "$spec" > "$tmp/attention_fwd.yaml"
grep -q "padded_tensors: true" "$tmp/attention_fwd.yaml" || { echo "FAIL padded: the spec's run line moved"; fails=$((fails + 1)); }
run contiguous_unpadded 0 --no-corpus --target "plugin:$plugins/libattention_fwd_contiguous.so" --domain '{dtypes: [f32, f64]}'
unpadded_spec=$spec
spec=$tmp/attention_fwd.yaml
run padded_correct 0 --no-corpus --target "plugin:$plugins/libattention_fwd_correct.so" --domain '{dtypes: [f32, f64]}'
run padded_contiguous 3 --no-corpus --target "plugin:$plugins/libattention_fwd_contiguous.so" --domain '{dtypes: [f32, f64]}'
expect_log padded_contiguous "the target wrote into the padding after row 0 of output o"
expect_log padded_contiguous "shrunk: B1 "
run padded_exec 2 --no-corpus --target "exec:cat"
expect_log padded_exec "run.padded_tensors applies to plugin: targets"
spec=$unpadded_spec
# --padded-tensors: the same for one run of the shipped spec.
run padded_flag 3 --no-corpus --target "plugin:$plugins/libattention_fwd_contiguous.so" --padded-tensors --domain '{dtypes: [f32, f64]}'
expect_log padded_flag "the target wrote into the padding after row 0 of output o"
expect_log padded_flag "replay: .* --padded-tensors"
! grep -q "the replay did not fail" "$tmp/padded_flag.log" || { echo "FAIL padded_flag: its replay passed"; fails=$((fails + 1)); }
run padded_flag_correct 0 --no-corpus --target "plugin:$plugins/libattention_fwd_correct.so" --padded-tensors --domain '{dtypes: [f32, f64]}'

# A crash is shrunk, saved and reported (exit 3); the runner survives it.
run plugin_crash 3 --corpus "$tmp/crash" --target "plugin:$plugins/libattention_fwd_crash.so" \
  --format json --out "$tmp/crash.json"
expect_log plugin_crash "killed by signal 11"
# Its replay was re-run in a fresh process before the report, and crashed there too.
grep -q '"status": "reproduced"' "$tmp/crash.json" ||
  { echo "FAIL plugin_crash: replay not re-checked"; grep -A3 replay_check "$tmp/crash.json"; fails=$((fails + 1)); }
grep -l "found_by: crash" "$tmp/crash/attention_fwd/"*.yaml > /dev/null 2>&1 ||
  { echo "FAIL plugin_crash: no saved case"; fails=$((fails + 1)); }
grep -q "nk: 1," "$tmp/crash/attention_fwd/"*.yaml || { echo "FAIL plugin_crash: case not shrunk"; fails=$((fails + 1)); }
# The saved case replays: it still crashes the plugin (exit 3), and is clean on the reference.
run crash_replay 3 --no-corpus --target "plugin:$plugins/libattention_fwd_crash.so" --replay "$tmp/crash/attention_fwd"
run crash_replay_reference 0 --target reference --replay "$tmp/crash/attention_fwd"

# An exec: worker that dies of a signal: the shell that starts it execs it,
# so no shell is left to print its own "Segmentation fault" line (one per
# crash, 25 of them while a crash shrank); prop_runner's message says it.
printf '#!/bin/sh\nkill -SEGV $$\n' > "$tmp/segv.sh"
chmod +x "$tmp/segv.sh"
run exec_segv 2 --no-corpus --target "exec:$tmp/segv.sh"
expect_log exec_segv "killed by signal 11 (Segmentation fault) while starting"
if grep -v "killed by signal" "$tmp/exec_segv.log" | grep -q "Segmentation fault"; then
  echo "FAIL exec_segv: a shell's own crash line"
  cat "$tmp/exec_segv.log"
  fails=$((fails + 1))
fi

# A hang is stopped by the per-case timeout, saved, exit 3.
run plugin_hang 3 --corpus "$tmp/hang" --case-timeout 1 --target "plugin:$plugins/libattention_fwd_hang.so" \
  --format json --out "$tmp/hang.json"
grep -q '"status": "reproduced"' "$tmp/hang.json" ||
  { echo "FAIL plugin_hang: replay not re-checked"; grep -A3 replay_check "$tmp/hang.json"; fails=$((fails + 1)); }
expect_log plugin_hang "hung (no reply within case_timeout_s = 1 s)"
grep -l "found_by: hang" "$tmp/hang/attention_fwd/"*.yaml > /dev/null 2>&1 ||
  { echo "FAIL plugin_hang: no saved case"; fails=$((fails + 1)); }

# Setup errors: one line, exit 2.
run bad_version 2 --no-corpus --target "plugin:$bad_version"
expect_log bad_version "built against kprop ABI version 42, this kprop speaks 1"
run no_entry 2 --no-corpus --target "plugin:$no_entry"
expect_log no_entry "missing symbol kprop_attention_fwd"
expect_log no_entry 'the file has it C++-mangled, as _Z19kprop_attention_fwdPK24kprop_attention_fwd_argsPcm: declare it extern "C"'
run no_file 2 --no-corpus --target "plugin:$tmp/nope.so"
expect_log no_file "no such file"
# ... and it is the one line: said before the run's seed header.
[ "$(wc -l < "$tmp/no_file.log")" -eq 1 ] || { echo "FAIL no_file: more than the error"; cat "$tmp/no_file.log"; fails=$((fails + 1)); }
run no_command 2 --no-corpus --target "exec:kprop-no-such-worker-command"
expect_log no_command "status 127 (command not found?)"
run not_a_worker 2 --no-corpus --target "exec:echo hello"
expect_log not_a_worker 'does not start with "KPRP"'
# A frame that is no answer (cat echoes the hello back): the reply is shown, not "?".
run echoes_hello 2 --no-corpus --target "exec:cat"
expect_log echoes_hello 'refused the handshake: its reply has neither "ok": true nor an "error" message: {"abi_version"'
# A kernel's error message that is not UTF-8 is its error, message kept (bad bytes replaced), not a crash.
if [ -n "$latin1_error" ]; then
  run latin1_error 3 --no-corpus --target "plugin:$latin1_error"
  expect_log latin1_error "target reported an error: .*caf.* failed"
  ! grep -q "invalid UTF-8\|exited with status" "$tmp/latin1_error.log" ||
    { echo "FAIL latin1_error: the plugin host died"; tail -5 "$tmp/latin1_error.log"; fails=$((fails + 1)); }
fi

if [ -z "$python" ]; then
  echo "no python3 with NumPy: worker checks skipped"
  [ "$fails" -eq 0 ] && exit 77
  exit 1
fi
worker="$root/examples/python/attention_fwd.py"
run worker_correct 0 --no-corpus --target "exec:$python $worker"
run worker_buggy 1 --no-corpus --target "exec:$python $worker --bug"
expect_log worker_buggy "causal"
# Expression invariants and a metamorphic relation through the worker: the
# named tensors come from the worker's outputs, the transformed case is sent
# to the worker too, and its stored case replays through it.
sed -n '/^invariants:/q;p' "$spec" | sed 's/^spec: .*/spec: worker_expr/' > "$tmp/worker_expr.yaml"
cat >> "$tmp/worker_expr.yaml" <<YAML
invariants:
  - name: o_policy
    expect: close(target.o, reference.o, k=2)
  - name: masked_rows_zero_expr
    when: any(row_fully_masked)
    expect: all(where(row_fully_masked[..., None], target.o == 0, true))
  - name: queries_permuted
    transform: permute_queries
    expect: close(transformed.target.o, target.o[:, :, transform.query_perm], k=2)
YAML
spec_saved="$spec"
spec="$tmp/worker_expr.yaml"
run worker_expr_correct 0 --no-corpus --target "exec:$python $worker"
run worker_expr_buggy 1 --corpus "$tmp/expr" --target "exec:$python $worker --bug"
expect_log worker_expr_buggy "Counterexample: \(o_policy\|queries_permuted\)"
run worker_expr_replay 1 --target "exec:$python $worker --bug" --replay "$tmp/expr/worker_expr"
run worker_expr_replay_ok 0 --target "exec:$python $worker" --replay "$tmp/expr/worker_expr"
spec="$spec_saved"
# A worker that dies mid-case is restarted for the next one, and reported.
cat > "$tmp/dies.py" <<PY
import os, sys
sys.path.insert(0, "$root/python")
import kprop_worker
def fwd(**kw):
    os._exit(9)
kprop_worker.serve({"attention.fwd": fwd})
PY
run worker_dies 3 --corpus "$tmp/dies" --target "exec:$python $tmp/dies.py"
expect_log worker_dies "exited with status 9"
expect_log worker_dies "shrunk in"  # every shrink step restarted the dead worker
# An op that raises fails the case with the exception's message.
cat > "$tmp/raises.py" <<PY
import sys
sys.path.insert(0, "$root/python")
import kprop_worker
def fwd(**kw):
    raise ValueError("kernel refuses this case")
kprop_worker.serve({"attention.fwd": fwd})
PY
run worker_raises 3 --no-corpus --target "exec:$python $tmp/raises.py"
expect_log worker_raises "ValueError: kernel refuses this case"
# A reply header claiming 3 GiB is refused before anything is allocated or
# read: the case fails as a target error, shrunk and saved (exit 3).
cat > "$tmp/huge.py" <<PY
import sys
sys.path.insert(0, "$root/python")
import kprop_worker as kw
stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
while True:
    header, _ = kw._read_frame(stdin)
    if header is None:
        break
    if header["op"] == "hello":
        kw._write_frame(stdout, {"ok": True, "abi_version": 1, "ops": ["attention.fwd"]})
        continue
    tensors = [dict(d) for d in header["outputs"]]
    tensors[0]["shape"] = [805306368]
    kw._write_frame(stdout, {"ok": True, "tensors": tensors})
PY
run worker_huge_reply 3 --corpus "$tmp/huge" --target "exec:$python $tmp/huge.py"
expect_log worker_huge_reply "reply refused before reading its payload: tensor o f[0-9]*\[805306368\] ([0-9]* bytes), the request declared o f"
expect_log worker_huge_reply "shrunk in"
grep -l "found_by: error" "$tmp/huge/attention_fwd/"*.yaml > /dev/null 2>&1 ||
  { echo "FAIL worker_huge_reply: no saved case"; fails=$((fails + 1)); }
# A worker serving the wrong ops is refused at the handshake.
cat > "$tmp/wrong_op.py" <<PY
import sys
sys.path.insert(0, "$root/python")
import kprop_worker
kprop_worker.serve({"attention.bwd": lambda **kw: {}})
PY
run worker_wrong_op 2 --no-corpus --target "exec:$python $tmp/wrong_op.py"
expect_log worker_wrong_op "does not serve op 'attention.fwd'"

[ "$fails" -eq 0 ] || { echo "$fails external-target checks failed"; exit 1; }
echo "external targets: all checks passed"
