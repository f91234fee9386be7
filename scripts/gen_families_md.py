#!/usr/bin/env python3
"""Generates docs/FAMILIES.md from the registry, so it cannot go stale.

    scripts/gen_families_md.py BUILD_DIR            # rewrite docs/FAMILIES.md
    scripts/gen_families_md.py BUILD_DIR --out F --check docs/FAMILIES.md

Runs BUILD_DIR/prop_runner --list and renders, per family: a hand-written
contract (CONTRACTS below, the one part kept here), the spec files naming the
family, the domain keys, the implementations (kind, device, description), the
mutants, the invariants with their parameters' defaults, and the external
ops. Everything but the contract comes from the registry. The ctest
docs.families_up_to_date runs it with --check after every build.

The parser is strict: a line of --list it does not recognise is an error, so
a change of that format breaks this script loudly instead of dropping data.
"""

import argparse
import difflib
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent

# One contract per registered family: what a correct implementation computes
# and the conventions it follows. Taken from the spec headers and the kernel
# headers (kernels/<family>/*.h), which state them in full. A registered
# family without an entry here is an error (write its contract), and so is an
# entry for a family that is not registered.
CONTRACTS = {
    "attention.fwd": """\
Q `[B, Hq, Nq, D]`, K/V `[B, Hkv, Nk, D]`; GQA: `Hq = g·Hkv` and query head
`h` reads kv head `h / g`; `S = scale·Q·Kᵀ` with `scale = 1/sqrt(D)` unless
the case gives one. One mask kind per case: none; causal aligned
bottom-right (query `i` sees key `j` iff `j <= i + Nk - Nq`, the
FlashAttention 2.1+ convention, so `Nq > Nk` leaves the first rows fully
masked); key padding (one key length per batch, 0 allowed); boolean
`[B, Nq, Nk]` shared by the heads, rows may be empty. Outputs O and LSE
(natural log of the softmax denominator). A fully masked row gives `O = 0`
and `LSE = -inf`, never NaN. Tiled kernels take every scratch buffer from a
`Workspace`, whose high-water mark `workspace_bounded` reads (no `Nq×Nk`
buffer). Precision: f32 and f64 cases compute in their dtype; f16 and bf16
cases store Q, K, V and O in the half type and compute in f32, as
FlashAttention 2 does (P rounded to the half type before `P·V`, LSE kept in
f32). Tolerance: `properties/attention/bounds.h` (for halves the floor adds
the derived storage roundings).""",
    "attention.bwd": """\
Cases are the forward's (see attention.fwd) plus dO `[B, Hq, Nq, D]`; the
target runs its forward and then its backward on that O and LSE, returning
dQ, dK, dV. dK and dV of a kv head sum over the query heads that share it;
a fully masked row gives `dQ = 0` and contributes nothing to dK, dV, never
NaN. D is the per-row `rowsum(P ⊙ dP)` the kernel used (`tiled_d` computes
it as `rowsum(dO ⊙ O)`, `tiled_two_pass` as `rowsum(P ⊙ dP)`). f16/bf16
cases as in the forward: P and dS rounded to the half type before the
products, dQ, dK, dV stored in it, D in f32. Tolerance as for the forward,
with first-order error scales for the gradients
(`properties/attention/bounds.h`).""",
    "beam": """\
A batch of prompts, beam width K, at most L new tokens, length penalty
alpha, over a seeded random table LM. A hypothesis is the generated
continuation only; its score is the sum of the generated tokens' log-probs
(EOS included) divided by (generated length incl. EOS)^alpha; the prompt
never counts. Each step ranks the pool's finished beams (kept as they are)
together with every one-token expansion of its unfinished beams and keeps
the K best, so a finished beam leaves only when K better candidates exist.
The search stops when the whole pool is finished or after L steps; the
result is the final pool, best first. Exactly equal scores are ordered by
the generated tokens, lexicographically smaller first. Which scores are
equal is the kernel's own arithmetic: a tie in the scores it reports (a
kept finished beam and an expansion that scores exactly the same, siblings
whose logits are bitwise equal) is judged by that rule; where two runs are
compared instead (the reference, a shifted or a batch-of-one run), a gap
below `tie_margin` is accepted either way, since another rounding may
order those candidates otherwise.""",
    "dflash": """\
Speculative decoding with a draft tree, verified greedily against a tiny
deterministic fp64 transformer LM (weights a pure function of a seed).
Prompt `x[0..P-1]`; draft tree of N nodes in topological order, tokens
`t[i]`, parents `p[i]` in `{-1} ∪ [0, i-1]`, depth `d(i) = 1` for roots and
`d(p[i]) + 1` otherwise; sibling tokens are distinct. Tree forward: node `i`
has position id `P + d(i) - 1` and attends to the whole context, its
ancestors and itself. Verification reads logits by parent: a root is
predicted by `L[P-1]`, a child of `p` by `L[P+p]`; starting above the roots,
accept the first child whose token equals the prediction, descend, repeat.
A cycle emits the accepted tokens plus one bonus token (the prediction at
the last accepted node, or at the context's end); generation runs one cycle
per draft tree against the context so far. argmax takes the lowest index
on exact ties and compares the f64 logits as they are: some models tie
tokens 0 and 1 exactly (`model.tie_rate`), others give token 1 the logit
`L[0] (1 + r)`, `|r|` from a few f64 ulps to 1e-3 (`model.near_tie_rate`),
a near-tie that an argmax in f32 decides wrong. Minimal counterexamples: a
chain-only bug such as `positional_logits` shrinks to a 2-node tree (two
roots), `depth_logits` to a 3-node tree (tests/families/dflash).""",
    "kvcache": """\
A batch of sequences prefilled, then decoded step by step through a KV
cache. Sequence b has `P_b >= 1` prompt tokens and `S_b >= 0` decode steps
and arrives at scheduler step `a_b`. Token t's output is
`softmax(q_t K[0..t]ᵀ / sqrt(D)) V[0..t]` per query head, over its own
sequence only (GQA: query head h reads kv head `h / group`). Within a step
every scheduled token's K/V is written first, then every scheduled token
attends; a sequence's blocks are released at the end of the step of its
last token (LIFO free list). Unused slots hold poison (NaN, or K = 0 with
V = 1e30; code -128 in the int8 cache) and released blocks keep stale data:
nothing outside a sequence's first t + 1 slots may influence token t. The
int8 cache uses static per-channel scales `s = range/127` (no clipping) and
codes `x / s` (the double quotient) rounded to nearest, ties to even,
clamped to ±127 (`nearbyint`, not `round`: 2.5 is code 2 and -2.5 is -2);
the domain key `int8_ties` puts f64 K/V elements exactly on such ties. Its
error bound is derived in `properties/kvcache/invariants.cpp`. Precision
(the case's dtype): f64 cases compute in fp64 throughout. f32, f16 and bf16
cases keep the KV cache in the dtype, as vLLM and FlashInfer keep an
fp16/bf16 cache: Q is in the dtype, K/V arrive in f32 and the cache write
rounds them to nearest even (the domain key `store_ties` puts f16/bf16
cases' K/V exactly halfway between two values of the dtype); attention
computes in f32 (scores, softmax max and sum, rescale, P·V) and rounds each
output to the dtype at the store. The
reference sees the cached values; every comparison allows the derived floor
`u|o| + tau + f32_k × (first-order f32 error)` (u = 2^-24, 2^-11, 2^-8),
matches_reference also `naive_k ×` the naive same-precision baseline's
error. The int8 cache takes f64 cases only (others are declined); the CUDA
engine takes every dtype, as the CPU engines do.""",
    "layernorm": """\
Over the last dim D of x `[rows, D]`: `mu = mean(x)`,
`var = mean((x - mu)²)` (biased), `rstd = 1/sqrt(var + eps)`,
`xhat = (x - mu)·rstd`, `y = gamma ⊙ xhat + beta`. Backward with
`g = gamma ⊙ dy`: `dx = rstd·(g - mean(g) - xhat ⊙ mean(g ⊙ xhat))`,
`dgamma = Σ_rows dy ⊙ xhat`, `dbeta = Σ_rows dy`. A constant row gives
`xhat = 0`, `y = beta`; `D = 1` gives `y = beta`, `dx = 0`. Each case is
f16, bf16, f32 or f64; its inputs are exactly representable in the dtype, so
the fp64 reference sees the same inputs. f16/bf16 (as GPU kernels): inputs
stored in half, `eps` an f32 attribute, all arithmetic and accumulation in
f32, `mu` and `rstd` kept in f32 (f32 tensors through the ABI), and y, the
xhat cache the backward reads, dx, dgamma, dbeta rounded to the dtype
(nearest even) at the store. Tolerance baseline: the naive two-pass
algorithm in the case's dtype (half: half storage, f32 arithmetic;
`kernels/layernorm/kernels.h`); the half floors add the derived cost of the
stores (`properties/layernorm/invariants.cpp`).""",
    "softmax_topk": """\
Logits `[rows, V]`, each finite or -inf; `1 <= K <= V`. Each
row's output is the K largest softmax probabilities with their indices,
sorted by probability, ties to the lower index. Softmax is strictly
increasing in the logit, so the order is the exact logit order (equal
logits, -0.0 and +0.0 among them, by ascending index), and two
probabilities that both underflow to 0 are not tied unless their logits are
equal. A -inf logit has probability 0 and ranks after every finite logit;
an all -inf row gives probabilities 0 and indices `0..K-1`. Probabilities
are returned in the input dtype; only near-ties (distinct logits within
`tie_ulps` dtype ulps) are discarded.
Logits may be f16, bf16, f32 or f64. f16/bf16 (as GPU kernels): logits stored
in half, the max, the normaliser, exp and the division in f32, the
probabilities rounded to the dtype (nearest even) at the store; the ranking
is by logit, so indices are unaffected. Tolerance baseline: the naive
two-pass softmax in the case's dtype (half: f32 arithmetic, probabilities
stored in half), floor `floor_eps` f32 epsilons plus the store's
`u_s·max p + s`. Subnormal logits (f16: `|x| < 2^-14`) are read as the values
they are, never flushed to zero, and rank by them.""",
    "ternary": """\
The BitNet b1.58 linear layer, with `eps = 1e-5`: weight scale
`s = max(mean|W|, eps)` (absmean, per tensor), `w_q = clamp(round(W/s), -1, 1)`;
activation scale `a_t = 127 / max(max_k |x_tk|, eps)` (absmax, per token),
`x_q = clamp(round(x·a_t), -128, 127)`; `acc = x_q · w_qᵀ` (exact integers),
`y = acc · s / a_t`. Backward (straight-through): `dx = dy · W~`,
`dW = dyᵀ · x~`, the dense gradients at the quantized point. `round` is
half to even (torch.round); everything up to `acc` must match the reference
bit for bit, y and the gradients are compared with f32 error bounds.""",
}

HEADER = """\
# Kernel families

<!-- Generated by scripts/gen_families_md.py from `prop_runner --list`; do not
edit by hand. The contracts are in that script; everything else comes from
the registry. Refresh with: scripts/gen_families_md.py build -->

Each family is one kernel contract: a case type, a generator and shrinker,
codecs, its implementations (a simple fp64 `reference`, optimized CPU or
CUDA variants, and **mutants**, deliberately wrong variants that reproduce a
known bug and must be killed by some invariant) and its invariants. The
code is in `kernels/<folder>/` (implementations, mutants: no framework code)
and `properties/<folder>/` (generator, shrinker, codecs, invariants,
registration); docs/DESIGN.md describes the framework around them.
`prop_runner --list` prints the same registry with every parameter's bounds
and meaning; docs/SPEC.md explains the spec keys.

Select a target with `prop_runner --spec specs/<spec>.yaml --target NAME`;
`--mutants` runs every mutant of the family and exits 0 only if each one is
killed. CUDA targets report `skipped` where there is no device.
"""


class ListFormatError(Exception):
    pass


def parse_list(text):
    """Families from `prop_runner --list`, in the registry's order."""
    families = []
    fam = None
    section = None
    stack = []  # (indent, dotted key) of open schema maps
    for number, line in enumerate(text.splitlines(), 1):

        def bad(why):
            raise ListFormatError(f"prop_runner --list line {number}: {why}: {line!r}")

        if not line.strip():
            continue
        m = re.match(r"^family (\S+) — (.*)$", line)
        if m:
            fam = {"name": m.group(1), "description": m.group(2), "domain": [], "impls": [],
                   "ops": [], "invariants": []}
            families.append(fam)
            section = None
            continue
        if fam is None:
            continue  # the spec keys and health checks before the first family
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if indent == 0:
            fam = None  # a block after the families (e.g. the expression functions)
            continue
        if indent == 2:
            stack = []
            if body == "domain:":
                section = "domain"
            elif body == "implementations:":
                section = "impls"
            elif body == "invariants:":
                section = "invariants"
            elif body == "external targets: none yet":
                section = None
            elif body.startswith("external targets"):
                section = "ops"
            elif body.startswith("tensors") or body.startswith("transforms"):
                section = "tensors"  # listed by prop_runner --list and docs/SPEC.md, not here
            else:
                bad("unknown section")
            continue
        if section is None or indent < 4:
            bad("line outside a section")
        if section == "tensors":
            continue
        if section == "impls":
            parts = body.split(None, 3)
            if indent != 4 or len(parts) < 3:
                bad("implementation line")
            name, kind, device = parts[:3]
            if kind not in ("reference", "optimized", "mutant", "external"):
                bad(f"unknown implementation kind {kind!r}")
            fam["impls"].append({"name": name, "kind": kind, "device": device,
                                 "description": parts[3] if len(parts) > 3 else ""})
        elif section == "ops":
            m = re.match(r"^op (\S+)\s+entry point (\S+), outputs (.*)$", body)
            if indent != 4 or not m:
                bad("external op line")
            fam["ops"].append({"op": m.group(1), "symbol": m.group(2), "outputs": m.group(3)})
        elif section == "invariants" and indent == 4:
            parts = body.split(None, 1)
            fam["invariants"].append({"name": parts[0], "description": parts[1] if len(parts) > 1 else "",
                                      "params": [], "reads": ""})
            stack = []
        elif section == "invariants" and indent == 6 and body.startswith("reads: "):
            if not fam["invariants"]:
                bad("reads before any invariant")
            fam["invariants"][-1]["reads"] = body[len("reads: "):]
        elif section == "invariants" and indent == 6 and body.startswith("observes: "):
            m = re.match(r"^observes: (.*) only \(", body)
            if not fam["invariants"] or not m:
                bad("observes line")
            fam["invariants"][-1].setdefault("observes", []).append(m.group(1))
        else:
            # A schema line: domain keys (indent 4+) or an invariant's
            # parameters (indent 6+); nested maps indent by 2.
            base = 4 if section == "domain" else 6
            if section == "invariants" and not fam["invariants"]:
                bad("parameter before any invariant")
            if indent < base or (indent - base) % 2:
                bad("schema line indentation")
            while stack and stack[-1][0] >= indent:
                stack.pop()
            if (indent - base) // 2 != len(stack):
                bad("schema line nesting")
            prefix = stack[-1][1] + "." if stack else ""
            target = fam["domain"] if section == "domain" else fam["invariants"][-1]["params"]
            m = re.match(r"^([^:\s]+): (.*?), default (.*?)  — (.*)$", body)
            if m:
                target.append({"key": prefix + m.group(1), "type": m.group(2), "default": m.group(3),
                               "doc": m.group(4)})
                continue
            m = re.match(r"^([^:\s]+):  (.*)$", body)
            if not m:
                bad("schema line")
            stack.append((indent, prefix + m.group(1)))
            target.append({"key": prefix + m.group(1), "type": "map", "default": None, "doc": m.group(2)})
    if not families:
        raise ListFormatError("prop_runner --list printed no family")
    return families


def specs_by_family():
    out = {}
    for path in sorted((REPO / "specs").glob("*.yaml")):
        for line in path.read_text(encoding="utf-8").splitlines():
            m = re.match(r"^family:\s*(\S+)", line)
            if m:
                out.setdefault(m.group(1), []).append(f"specs/{path.name}")
                break
    return out


def cell(text):
    return text.replace("|", "\\|")


def code(text):
    return "`" + text + "`"


def render(families):
    names = [f["name"] for f in families]
    missing = [n for n in names if n not in CONTRACTS]
    stale = [n for n in CONTRACTS if n not in names]
    problems = []
    if missing:
        problems.append("no contract for registered famil" + ("y " if len(missing) == 1 else "ies ") +
                        ", ".join(missing) + ": add it to CONTRACTS in scripts/gen_families_md.py")
    if stale:
        problems.append("CONTRACTS names unregistered famil" + ("y " if len(stale) == 1 else "ies ") +
                        ", ".join(stale) + " (a partial build? build every family, or drop the entry)")
    if problems:
        raise ListFormatError("; ".join(problems))
    specs = specs_by_family()
    out = [HEADER]
    out.append("| family | spec | folder | implementations | mutants | invariants |")
    out.append("|---|---|---|---|---|---|")
    for f in families:
        folder = f["name"].split(".")[0]
        impls = [i for i in f["impls"] if i["kind"] != "mutant"]
        mutants = [i for i in f["impls"] if i["kind"] == "mutant"]
        out.append(f"| [{f['name']}](#{anchor(f['name'])}) | "
                   f"{', '.join(code(s) for s in specs.get(f['name'], [])) or '—'} | {code(folder)} | "
                   f"{len(impls)} | {len(mutants)} | {len(f['invariants'])} |")
    out.append("")
    for f in families:
        folder = f["name"].split(".")[0]
        for d in (REPO / "kernels" / folder, REPO / "properties" / folder):
            if not d.is_dir():
                raise ListFormatError(f"family {f['name']}: no folder {d.relative_to(REPO)}")
        out.append(f"## {f['name']}")
        out.append("")
        desc = f["description"]
        out.append(desc[:1].upper() + desc[1:] + ("" if desc.endswith(".") else "."))
        out.append("")
        spec_list = ", ".join(code(s) for s in specs.get(f["name"], [])) or "none"
        out.append(f"Spec: {spec_list}. Code: `kernels/{folder}/`, `properties/{folder}/`.")
        out.append("")
        out.append("**Contract.** " + CONTRACTS[f["name"]])
        out.append("")
        out.append("**Domain** (the spec's `domain:` keys):")
        out.append("")
        out.append("| key | kind | default | meaning |")
        out.append("|---|---|---|---|")
        for k in f["domain"]:
            if k["type"] == "map":
                out.append(f"| {code(k['key'])} | map | | {cell(k['doc'])} |")
            else:
                out.append(f"| {code(k['key'])} | {cell(k['type'])} | {code(cell(k['default']))} | "
                           f"{cell(k['doc'])} |")
        out.append("")
        out.append("**Implementations:**")
        out.append("")
        out.append("| name | kind | device | description |")
        out.append("|---|---|---|---|")
        for i in f["impls"]:
            if i["kind"] != "mutant":
                out.append(f"| {code(i['name'])} | {i['kind']} | {i['device']} | {cell(i['description'])} |")
        out.append("")
        mutants = [i for i in f["impls"] if i["kind"] == "mutant"]
        out.append("**Mutants** (each must fail some invariant):")
        out.append("")
        if mutants:
            out.append("| mutant | device | the bug |")
            out.append("|---|---|---|")
            for i in mutants:
                out.append(f"| {code(i['name'])} | {i['device']} | {cell(i['description'])} |")
        else:
            out.append("none.")
        out.append("")
        out.append("**Invariants** (parameters with their defaults; the outputs each reads, `*` all, "
                   "are what output coverage counts: `prop_runner --list --spec S`):")
        out.append("")
        out.append("| invariant | checks | reads (outputs) | parameters |")
        out.append("|---|---|---|---|")
        for inv in f["invariants"]:
            params = ", ".join(f"{code(p['key'])} {cell(p['default'])}" for p in inv["params"]
                               if p["type"] != "map")
            checks = inv["description"]
            if inv.get("observes"):
                checks += " (observes " + "; ".join(inv["observes"]) + " only)"
            out.append(f"| {code(inv['name'])} | {cell(checks)} | {cell(inv['reads'])} | {params} |")
        out.append("")
        if f["ops"]:
            out.append("**External targets** (`plugin:PATH.so`, `exec:COMMAND`; "
                       f"`include/kprop/abi/{folder}.h`, docs/EXTERNAL.md):")
            out.append("")
            out.append("| op | C entry point | outputs |")
            out.append("|---|---|---|")
            for op in f["ops"]:
                out.append(f"| {code(op['op'])} | {code(op['symbol'])} | {cell(op['outputs'])} |")
        else:
            out.append("**External targets:** none.")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def anchor(name):
    # GitHub's heading anchors: lower case, punctuation other than - and _ dropped.
    return re.sub(r"[^a-z0-9_\- ]", "", name.lower()).replace(" ", "-")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build_dir", help="build folder with prop_runner")
    ap.add_argument("--runner", help="prop_runner to run (default: BUILD_DIR/prop_runner)")
    ap.add_argument("--out", help="file to write (default: docs/FAMILIES.md of this repository)")
    ap.add_argument("--check", metavar="COMMITTED",
                    help="compare the generated file with COMMITTED; exit 1 with a hint if they differ")
    args = ap.parse_args()
    runner = pathlib.Path(args.runner) if args.runner else pathlib.Path(args.build_dir) / "prop_runner"
    out = pathlib.Path(args.out) if args.out else REPO / "docs" / "FAMILIES.md"
    try:
        listing = subprocess.run([str(runner), "--list"], check=True, capture_output=True, text=True).stdout
        text = render(parse_list(listing))
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"gen_families_md: cannot run {runner} --list: {e}", file=sys.stderr)
        return 2
    except ListFormatError as e:
        print(f"gen_families_md: {e}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    if args.check:
        committed = pathlib.Path(args.check)
        old = committed.read_text(encoding="utf-8") if committed.exists() else ""
        if old != text:
            diff = list(difflib.unified_diff(old.splitlines(), text.splitlines(), str(committed), str(out),
                                             lineterm="", n=1))
            print("\n".join(diff[:60]) + ("\n..." if len(diff) > 60 else ""))
            print(f"{committed} is out of date with the registry; refresh it with: "
                  "scripts/gen_families_md.py build")
            return 1
        print(f"{committed} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
