#!/usr/bin/env python3
"""Hostile inputs against prop_runner: nothing lost, nothing unbounded.

Replays a folder of hostile corpus files and runs hostile exec: workers
(garbage frames, a huge reply header, a hang, an early exit, a 4 GB
allocation inside the worker, a setsid grandchild) against specs/attention_fwd.yaml,
and reports for each: prop_runner's exit code, its peak RSS (the runner
alone: each worker is its own process, measured apart), the wall time,
whether the failing case was kept (a file written, or printed in full), and
whether any process outlived the run.

  scripts/faults.py [--build build] [--budget-mb 1024]

Exit 0 only if every fault gave the expected exit code, kept its case where
there is one, stayed under the memory budget and left no process behind.
"""
import argparse
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A worker that speaks the handshake and then misbehaves as BEHAVIOUR says.
WORKER = r'''
import json, os, struct, sys, time
behaviour = sys.argv[1]
out = sys.stdout.buffer
inp = sys.stdin.buffer
def read_frame():
    head = inp.read(8)
    if len(head) < 8: sys.exit(0)
    n = struct.unpack("<I", head[4:8])[0]
    header = json.loads(inp.read(n))
    size = {"f32": 4, "f64": 8, "i32": 4, "i64": 8, "u8": 1, "i8": 1, "f16": 2, "bf16": 2}
    for t in header.get("tensors", []):
        count = 1
        for d in t["shape"]: count *= d
        inp.read(count * size[t["dtype"]])
    return header
def write_frame(header, payload=b""):
    h = json.dumps(header).encode()
    out.write(b"KPRP" + struct.pack("<I", len(h)) + h + payload)
    out.flush()
hello = read_frame()
write_frame({"ok": True, "abi_version": hello["abi_version"], "ops": hello["ops"]})
while True:
    req = read_frame()
    o = req["outputs"]
    if behaviour == "garbage":
        out.write(os.urandom(64)); out.flush()
    elif behaviour == "huge_header":
        write_frame({"ok": True, "tensors": [{"name": o[0]["name"], "dtype": "f32", "shape": [805306368]}]})
    elif behaviour == "overflow_shape":
        write_frame({"ok": True, "tensors": [{"name": o[0]["name"], "dtype": "f32", "shape": [2**62, 4]}]})
    elif behaviour == "sleep":
        time.sleep(3600)
    elif behaviour == "exit":
        sys.exit(3)
    elif behaviour == "alloc4g":
        block = bytearray(4 << 30)  # the worker's own memory, not the runner's
        write_frame({"ok": False, "error": "allocated %d bytes" % len(block)})
    elif behaviour == "setsid_grandchild":
        if os.fork() == 0:
            os.setsid()
            time.sleep(3600)
            os._exit(0)
        write_frame({"ok": False, "error": "left a grandchild behind"})
'''

HOSTILE_FILES = {
    "truncated.yaml": "kprop_corpus: 1\nfamily: attention.fwd\ncase: {q: [1, 2",
    "binary.yaml": "kprop_corpus: 1\nfamily: \x00\xff\xfe\x01\n",
    "wrong_spec.yaml": "kprop_corpus: 1\nspec: dflash\nfamily: attention.fwd\ncase: {}\n",
    "duplicate_keys.yaml": "kprop_corpus: 1\nfamily: attention.fwd\nfamily: attention.fwd\ncase: {}\n",
    "not_a_map.yaml": "- 1\n- 2\n",
    "huge_dims.yaml": "kprop_corpus: 1\nfamily: attention.fwd\ncase: {batch: 1000000, heads_q: 1000000}\n",
}


def run_measured(cmd, cwd, timeout=120):
    t0 = time.time()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os.chdir(cwd)
        fd = os.open(os.path.join(cwd, "out.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        try:
            os.execv(cmd[0], cmd)
        finally:
            os._exit(127)
    deadline = t0 + timeout
    while True:
        wpid, status, usage = os.wait4(pid, os.WNOHANG)
        if wpid:
            break
        if time.time() > deadline:
            os.killpg(pid, signal.SIGKILL)
        time.sleep(0.05)
    code = os.waitstatus_to_exitcode(status)
    out = Path(cwd, "out.log").read_text(errors="replace")
    return code, usage.ru_maxrss / 1024.0, time.time() - t0, out


def leftovers(token):
    """Processes whose command line names this run's scratch folder."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if token in (d / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--budget-mb", type=float, default=1024)
    args = ap.parse_args()
    runner = str(Path(args.build).resolve() / "prop_runner")
    spec = str(ROOT / "specs" / "attention_fwd.yaml")
    work = tempfile.mkdtemp(prefix="kprop-faults-")
    worker = Path(work, "hostile_worker.py")
    worker.write_text(WORKER)
    corpus = Path(work, "hostile")
    corpus.mkdir()
    for name, text in HOSTILE_FILES.items():
        Path(corpus, name).write_bytes(text.encode("latin-1"))

    cases = [("replay hostile corpus folder", [runner, "--spec", spec, "--replay", str(corpus)], 2, False)]
    for b, want in (("garbage", 3), ("huge_header", 3), ("overflow_shape", 3), ("sleep", 3), ("exit", 3),
                    ("alloc4g", 3), ("setsid_grandchild", 3)):
        cmd = [runner, "--spec", spec, "--target", f"exec:{sys.executable} {worker} {b}", "--seed", "1",
               "--trials", "20", "--case-timeout", "2", "--corpus", str(Path(work, "corpus"))]
        cases.append((f"worker: {b}", cmd, want, True))
    cases.append(("unwritable corpus (mutant)",
                  [runner, "--spec", spec, "--target", "nan_masked_tile", "--seed", "1", "--corpus", "/dev/null/x"],
                  1, True))

    rows, bad = [], 0
    for name, cmd, want, has_case in cases:
        code, rss, secs, out = run_measured(cmd, work)
        kept = bool(re.search(r"(stored|saved|case saved to|stored in) \S+", out)) or "case:" in out
        left = leftovers(work)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        ok = code == want and rss <= args.budget_mb and (kept or not has_case) and not left
        bad += not ok
        rows.append((name, code, want, rss, secs, "yes" if kept else ("-" if not has_case else "NO"),
                     len(left), "ok" if ok else "FAIL"))
        if not ok:
            print(f"--- {name}: output tail\n" + "\n".join(out.splitlines()[-15:]))
    print("\n| fault | exit | expected | peak RSS MiB | seconds | case kept | left running | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.0f} | {r[4]:.1f} | {r[5]} | {r[6]} | {r[7]} |")
    print(f"\n{len(rows) - bad} of {len(rows)} faults handled; budget {args.budget_mb:.0f} MiB")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
