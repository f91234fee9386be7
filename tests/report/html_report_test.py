#!/usr/bin/env python3
"""The HTML report in a real browser (ctest report.html.chromium).

For a failing run of every family (a mutant, or a planted bug for the
declared-op family, fixed seed, small budget) and for one --mutants run,
prop_runner writes --format html; headless Chromium (Debian's `chromium`)
loads each page, dumps its DOM and takes a screenshot. Checked:
  - the page loads with no console message at all (the page has no script,
    so any message - an error, a resource that failed to load - is a fault),
    and refers to nothing outside itself;
  - each failure has its family's drawing with the expected elements, counted
    from the shrunk case printed beside it (the dflash tree has one node per
    case node, the attention mask one cell per (query, key), ...);
  - the screenshot is not blank (pixel variance, share of non-white pixels).
Without chromium the test exits 77, which ctest reports as SKIPPED (never as
passed). Usage: html_report_test.py PROP_RUNNER SOURCE_DIR
"""
import concurrent.futures
import html.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import PIL.Image
import yaml

SKIP = 77
SEED = "20261122"
TRIALS = "100"

# (spec, target, how to count the drawing's elements from a failure's case)
RUNS = [
    ("dflash", "positional_logits"),
    ("attention_fwd", "nan_masked_tile"),
    ("attention_bwd", "dk_missing_scale"),
    ("beam", "drop_finished"),
    ("kvcache", "stale_block_reuse"),
    ("layernorm", "naive_variance"),
    ("softmax_topk", "tie_high_index"),
    ("ternary", "scale_absmax"),
]


class Dom(html.parser.HTMLParser):
    """Failures (<section class="failure">) with the elements inside each."""

    def __init__(self):
        super().__init__()
        self.failures = []  # {"kind", "invariant", "elements": [(tag, classes)], "pre": text}
        self.stack = []
        self.in_pre = False
        self.refs = []  # src/href attributes
        self.svgs = 0
        self.open = False  # inside a failure's <section>

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if key in a:
                self.refs.append(a[key])
        if tag == "svg":
            self.svgs += 1
        if tag == "section" and "failure" in a.get("class", "").split():
            self.failures.append({"kind": a.get("data-kind"), "invariant": a.get("data-invariant"),
                                  "elements": [], "pre": ""})
            self.open = True
        elif self.open:
            self.failures[-1]["elements"].append((tag, a.get("class", "").split()))
        if tag == "pre":
            self.in_pre = True

    def handle_endtag(self, tag):
        if tag == "section":
            self.open = False
        if tag == "pre":
            self.in_pre = False

    def handle_data(self, data):
        if self.in_pre and self.open:
            self.failures[-1]["pre"] += data


def count(elements, tag, *classes):
    return sum(1 for t, c in elements if t == tag and all(k in c for k in classes))


def svg_classes(elements):
    return [c for t, c in elements if t == "svg"]


def check_failure(spec, f):
    """Problems with one failure's drawing ([] when fine)."""
    el = f["elements"]
    drawings = [c for c in svg_classes(el) if "kprop-drawing" in c]
    if f["kind"] != "invariant":
        return []  # crashes and hangs are not drawn with results
    if not drawings:
        return [f"{spec}/{f['invariant']}: no drawing"]
    case = yaml.safe_load(f["pre"])
    problems = []

    def expect(what, got, want):
        if got != want:
            problems.append(f"{spec}/{f['invariant']}: {what}: {got}, expected {want}")

    if spec == "dflash":
        nodes = sum(len(cycle["tokens"]) for cycle in case["cycles"])
        expect("tree nodes drawn", count(el, "circle", "node"), nodes)
        edges = count(el, "line", "edge") + count(el, "line", "target") + count(el, "line", "oracle")
        if edges < nodes:
            problems.append(f"dflash/{f['invariant']}: {edges} edges for {nodes} nodes")
    elif spec.startswith("attention"):
        s = case["shape"]
        bq, bk = case["tiles"]["q"], case["tiles"]["k"]
        expect("mask cells", count(el, "rect", "mask-cell"), s["nq"] * s["nk"])
        want = s["nq"] * s["dim"] + (s["nq"] if spec == "attention_fwd" else 2 * s["nk"] * s["dim"])
        expect("error cells", count(el, "rect", "err-cell"), want)
        expect("tile boundaries", count(el, "line", "tile-edge"), (s["nq"] - 1) // bq + (s["nk"] - 1) // bk)
        if case.get("mask") == "boolean" and not any(case["allowed"]):
            expect("fully masked rows marked", count(el, "rect", "empty-row"), s["nq"])
    elif spec == "beam":
        if count(el, "rect", "beam", "target") == 0 or count(el, "rect", "beam", "reference") == 0:
            problems.append(f"beam/{f['invariant']}: a lattice is empty")
        if count(el, "rect", "eos") == 0:
            problems.append(f"beam/{f['invariant']}: no finished (EOS) beam drawn")
    elif spec == "kvcache":
        expect("pool blocks", count(el, "rect", "block"), len(case["pool"]))
        if count(el, "rect", "page") + count(el, "rect", "stale") == 0:
            problems.append(f"kvcache/{f['invariant']}: no block table drawn")
    elif spec == "layernorm":
        expect("rows plotted", count(el, "circle", "row", "y"), len(case["x"]))
    elif spec == "softmax_topk":
        vocab = len(case["logits"][0])
        expect("logits drawn", sum(1 for t, c in el if "logit" in c), min(vocab, 160))
        chosen = sum(1 for t, c in el if "chosen" in c)
        expected = sum(1 for t, c in el if "expected" in c)
        if chosen == 0 or expected == 0:
            problems.append(f"softmax_topk/{f['invariant']}: chosen {chosen}, expected {expected}")
    elif spec == "ternary":
        expect("histogram bins", count(el, "rect", "bin"), 40)
        if count(el, "line", "threshold") < 2:
            problems.append(f"ternary/{f['invariant']}: thresholds not drawn")
    elif spec.startswith("op_"):
        if count(el, "rect", "cell") == 0:
            problems.append(f"{spec}/{f['invariant']}: the generic error view has no cells")
    return problems


def png_pixels(path):
    """RGB pixels of a screenshot, as an array (height, width, 3)."""
    with PIL.Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def browse(chromium, page, png):
    """Chromium loads `page`: (DOM, console lines, exit status)."""
    r = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--window-size=1000,800", f"--screenshot={png}", "--dump-dom", "--enable-logging=stderr", "--v=0",
         "file://" + page],
        capture_output=True, text=True, timeout=90)
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
    return r.stdout, console, r.returncode


def main():
    runner, source = sys.argv[1], sys.argv[2]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("SKIPPED: chromium is not installed (scripts/dev.sh deps installs Debian's chromium)")
        return SKIP
    work = tempfile.mkdtemp(prefix="kprop-html-")
    runs = [(spec, ["--spec", f"{source}/specs/{spec}.yaml", "--target", target]) for spec, target in RUNS]
    runs.append(("op_rmsnorm", ["--spec", f"{source}/specs/ops/rmsnorm.yaml", "--target",
                                f"exec:{sys.executable} {source}/examples/ops/rmsnorm.py --bug eps_outside_sqrt"]))
    problems = []
    pages = []
    for name, args in runs:
        page = os.path.join(work, name + ".html")
        r = subprocess.run([runner, *args, "--seed", SEED, "--trials", TRIALS, "--no-corpus", "--format", "html",
                            "--out", page], cwd=work, capture_output=True, text=True, timeout=300)
        if r.returncode != 1:
            problems.append(f"{name}: prop_runner exited {r.returncode}, expected 1 (a failure)\n{r.stderr[-2000:]}")
            continue
        pages.append((name, page))
    # The kill matrix: every invariant against every mutant of one family,
    # each failure shrunk and drawn. layernorm's: 13 CPU-s (beam's 32,
    # attention_bwd's 19, ternary's 44, kvcache's 151; at this seed, --trials 40,
    # in process). In process: isolation is Cli.MutantsAreIsolatedByDefault's
    # subject, not this page's.
    page = os.path.join(work, "mutants.html")
    r = subprocess.run([runner, "--spec", f"{source}/specs/layernorm.yaml", "--mutants", "--seed", SEED,
                        "--trials", "40", "--no-corpus", "--no-isolate", "--format", "html", "--out", page],
                       cwd=work, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        problems.append(f"layernorm --mutants exited {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    else:
        pages.append(("mutants", page))

    # Chromium takes seconds per page, mostly waiting: three at a time.
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        seen = dict(zip([n for n, _ in pages],
                        pool.map(lambda p: browse(chromium, p[1], p[1] + ".png"), pages)))
    for name, page in pages:
        dom_text, console, status = seen[name]
        if status != 0:
            problems.append(f"{name}: chromium exited {status}")
        problems += [f"{name}: console: {line}" for line in console]
        text = open(page).read()
        if re.search(r"(src|href)\s*=|@import|url\(", text) or "<script" in text:
            problems.append(f"{name}: the page refers to something outside itself or has a script")
        dom = Dom()
        dom.feed(dom_text)
        if dom.svgs == 0:
            problems.append(f"{name}: the loaded page has no SVG")
        if name == "mutants":
            cells = dom_text.count('class="kill"')
            if cells == 0 or "kill-matrix" not in dom_text:
                problems.append(f"{name}: no kill matrix, or no killed cell in it")
        else:
            failures = [f for f in dom.failures if f["kind"] == "invariant"]
            if not failures:
                problems.append(f"{name}: the page shows no failure")
            for f in failures:
                problems += check_failure(name, f)
        png = page + ".png"
        if not os.path.exists(png):
            problems.append(f"{name}: no screenshot")
            continue
        pixels = png_pixels(png)
        ink = (pixels.min(axis=2) < 200).mean()
        if pixels.std() < 10 or ink < 0.01:
            problems.append(f"{name}: the screenshot is blank (std {pixels.std():.1f}, {100 * ink:.2f}% ink)")
        print(f"{name}: {len(dom.failures)} failure(s), {dom.svgs} svg, screenshot std {pixels.std():.1f}, "
              f"{100 * ink:.1f}% ink")
    if problems:
        print("\n".join(problems))
        print(f"pages kept in {work}")
        return 1
    shutil.rmtree(work)
    print(f"PASSED: {len(pages)} reports load in Chromium with their drawings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
