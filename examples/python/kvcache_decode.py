"""kvcache.serve in NumPy: a paged KV-cache engine tested by kprop through the worker protocol.

    prop_runner --spec specs/kvcache.yaml --target "exec:python3 examples/python/kvcache_decode.py"

The engine keeps K/V in a pool of blocks (page_size tokens each) handed out
by a LIFO free list that starts as the request's block_order, one block
table per sequence. Each scheduler step writes the step's K/V, then
prefills one prompt chunk (the request's chunk size) per arriving sequence
and runs one batched paged-attention decode over every decoding sequence,
whose block tables are padded to the widest with block 0 as a batched
kernel receives them. Finished sequences release their blocks at the end
of the step. `--int8` stores int8 codes with static per-channel scales
(range / 127) instead of float64.

`--bug NAME` plants one of the family's mutants (kernels/kvcache/mutants.cpp):
  paged_last_block_offset  a decode token starting a new page is written at
                           offset 0 of the previous last block
  chunk_ignores_past       a prefill chunk attends only to itself
  decode_off_by_one        a decode token does not see its own key
  padding_leak             decode keys masked by the padded batch width
  per_tensor_scale         int8 cache with one scale per tensor (implies --int8)
  stale_block_reuse        finishing sequences release their blocks before
                           the step's writes, which then overwrite them
"""
import argparse
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("paged_last_block_offset", "chunk_ignores_past", "decode_off_by_one", "padding_leak",
        "per_tensor_scale", "stale_block_reuse")
F64, I8 = 2, 5  # kprop_dtype values (include/kprop/abi.h)
POISON_NAN = 0  # KPROP_KVCACHE_POISON_NAN; KPROP_KVCACHE_POISON_HUGE is K = 0, V = 1e30

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--int8", action="store_true", help="int8 cache with static per-channel scales")
parser.add_argument("--bug", choices=BUGS, help="plant one of the family's mutants")
ARGS = parser.parse_args()
BUG = ARGS.bug
INT8 = ARGS.int8 or BUG == "per_tensor_scale"


class PagedCache:
    """A block pool [blocks, page, Hkv, D], block tables and a LIFO free list."""

    def __init__(self, block_order, page, kv_heads, head_dim, poison, k_range, v_range):
        shape = (len(block_order), page, kv_heads, head_dim)
        self.page = page
        if INT8:
            self.scales = [r / 127 for r in (k_range, v_range)]
            if BUG == "per_tensor_scale":
                self.scales = [np.full_like(s, s.max()) for s in self.scales]
            self.k = np.full(shape, -128, dtype=np.int8)  # the invalid code marks unused slots
            self.v = np.full(shape, -128, dtype=np.int8)
        else:
            nan = poison == POISON_NAN
            self.k = np.full(shape, np.nan if nan else 0.0)
            self.v = np.full(shape, np.nan if nan else 1e30)
        self.free = collections.deque(int(b) for b in block_order)  # front: the next block handed out
        self.tables = collections.defaultdict(list)
        self.released = collections.Counter()  # blocks of each table already back on the free list

    def allocate(self):
        if not self.free:
            raise RuntimeError("paged KV cache: pool exhausted")
        return self.free.popleft()

    def write(self, seq, t, k, v, decode):
        table, offset = self.tables[seq], t % self.page
        if BUG == "paged_last_block_offset" and decode:
            block = table[-1]  # looked up before allocating the new page
            if offset == 0:
                table.append(self.allocate())
        else:
            if offset == 0:
                table.append(self.allocate())
            block = table[t // self.page]
        if INT8:
            k, v = (np.clip(np.rint(x / s), -127, 127).astype(np.int8) for x, s in zip((k, v), self.scales))
        self.k[block, offset] = k
        self.v[block, offset] = v

    def release(self, seq):
        table = self.tables[seq]
        for block in table[self.released[seq]:]:
            self.free.appendleft(block)
        self.released[seq] = len(table)

    def gather(self, tables, n):
        """K and V [rows, n, Hkv, D] of positions 0..n-1 through padded block tables [rows, blocks]."""
        j = np.arange(n)
        blocks = tables[:, j // self.page]
        k, v = self.k[blocks, j % self.page], self.v[blocks, j % self.page]
        if INT8:
            k, v = k * self.scales[0], v * self.scales[1]
        return k, v

    def padded_tables(self, seqs, n):
        """The block tables of `seqs` padded with block 0 to cover n positions."""
        width = -(-n // self.page)
        out = np.zeros((len(seqs), width), dtype=np.int64)
        for row, seq in enumerate(seqs):
            table = self.tables[seq][:width]
            out[row, :len(table)] = table
        return out


def attend(q, k, v, visible, scale):
    """Softmax attention of queries q [m, Hq, D] over keys/values [m, n, Hkv, D] where visible [m, n]."""
    m, heads_q, dim = q.shape
    heads_kv = k.shape[2]
    q = q.reshape(m, heads_kv, heads_q // heads_kv, dim)  # query head h reads kv head h // group
    s = np.einsum("mhgd,mnhd->mhgn", q, k) * scale
    s = np.where(visible[:, None, None, :], s, -np.inf)  # unseen slots may hold NaN: never read them
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    v = np.where(visible[:, :, None, None], v, 0.0)
    return np.einsum("mhgn,mnhd->mhgd", p, v).reshape(m, heads_q, dim)


def schedule(prompt, length, arrival, chunk):
    """A sequence's work: (step, first token, end token), prompt chunks then decode tokens."""
    chunks = range(0, prompt, chunk)
    plan = [(arrival + i, begin, min(prompt, begin + chunk)) for i, begin in enumerate(chunks)]
    return plan + [(arrival + len(chunks) + i, t, t + 1) for i, t in enumerate(range(prompt, length))]


def prefill(cache, seq, q, begin, end, scale):
    """Outputs of prompt tokens begin..end-1 of `seq` (q: their queries), causal over the cache."""
    keys, values = cache.gather(cache.padded_tables([seq], end), end)
    j, t = np.arange(end)[None, :], np.arange(begin, end)[:, None]
    visible = (j <= t) & (j >= (begin if BUG == "chunk_ignores_past" else 0))
    shape = (end - begin,) + keys.shape[1:]  # every query of the chunk reads the same keys
    return attend(q, np.broadcast_to(keys, shape), np.broadcast_to(values, shape), visible, scale)


def decode(cache, decodes, q, scale):
    """Outputs of one decode token per (seq, t) in `decodes` (q: their queries) in one batched call."""
    lengths = np.array([t + (0 if BUG == "decode_off_by_one" else 1) for _, t in decodes])
    width = max(t + 1 for _, t in decodes)
    if BUG == "padding_leak":
        lengths[:] = width
    keys, values = cache.gather(cache.padded_tables([seq for seq, _ in decodes], width), width)
    return attend(q, keys, values, np.arange(width)[None, :] < lengths[:, None], scale)


def serve(q, k, v, seq_starts, prompt_lens, arrivals, k_range, v_range, block_order, page_size, chunk,
          poison, scale, **_):
    cache = PagedCache(block_order, page_size, k.shape[1], k.shape[2], poison, k_range, v_range)
    out = np.zeros(q.shape)
    starts, prompts = [int(x) for x in seq_starts], [int(x) for x in prompt_lens]
    plans = [schedule(prompt, end - start, int(arrival), chunk)
             for prompt, start, end, arrival in zip(prompts, starts, starts[1:], arrivals)]
    for step in range(max(plan[-1][0] for plan in plans) + 1):
        work = [(b, begin, end) for b, plan in enumerate(plans) for s, begin, end in plan if s == step]
        finishing = [b for b, plan in enumerate(plans) if plan[-1][0] == step]
        if BUG == "stale_block_reuse":
            for b in finishing:
                cache.release(b)
        for b, begin, end in work:
            for t in range(begin, end):
                cache.write(b, t, k[starts[b] + t], v[starts[b] + t], t >= prompts[b])
        decodes = [(b, begin) for b, begin, _ in work if begin >= prompts[b]]
        for b, begin, end in work:
            if begin < prompts[b]:
                rows = slice(starts[b] + begin, starts[b] + end)
                out[rows] = prefill(cache, b, q[rows], begin, end, scale)
        if decodes:
            rows = [starts[b] + t for b, t in decodes]
            out[rows] = decode(cache, decodes, q[rows], scale)
        for b in finishing:
            cache.release(b)
    return {"out": out, "cache_dtype": np.array([I8 if INT8 else F64])}


if __name__ == "__main__":
    kprop_worker.serve({"kvcache.serve": serve})
