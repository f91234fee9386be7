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
(range / 127) instead of float64 (f64 cases only; others are declined).

dtypes (kernels/kvcache/kvcache.h, Precision): an f64 case's cache is
float64. An f32, f16 or bf16 case (q and out in that dtype, k and v in f32)
keeps its cache in the dtype (float32, float16, or bf16 bits as uint16),
rounding K/V to nearest even at the write, and attends in float32
(kprop_worker.as_float32); the worker rounds the outputs to the dtype.

`--bug NAME` plants one of the family's mutants (kernels/kvcache/mutants.cpp):
  paged_last_block_offset  a decode token starting a new page is written at
                           offset 0 of the previous last block
  chunk_ignores_past       a prefill chunk attends only to itself
  decode_off_by_one        a decode token does not see its own key
  padding_leak             decode keys masked by the padded batch width
  per_tensor_scale         int8 cache with one scale per tensor (implies --int8)
  int8_round_half_away     int8 codes round x / s half away from zero, not to
                           even (implies --int8; differs only on exact ties)
  stale_block_reuse        finishing sequences release their blocks before
                           the step's writes, which then overwrite them
  cache_truncated_bf16     a bf16 cache written by truncating the f32 K/V
  decode_accumulate_in_storage
                           decode's P·V sum and softmax row sum kept in the
                           storage dtype (f16/bf16), rounded after every key
"""
import argparse
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402

BUGS = ("paged_last_block_offset", "chunk_ignores_past", "decode_off_by_one", "padding_leak",
        "per_tensor_scale", "int8_round_half_away", "stale_block_reuse", "cache_truncated_bf16",
        "decode_accumulate_in_storage")
F32, F64, F16, BF16, I8 = 1, 2, 3, 4, 5  # kprop_dtype values (include/kprop/abi.h)
POISON_NAN = 0  # KPROP_KVCACHE_POISON_NAN; KPROP_KVCACHE_POISON_HUGE is K = 0, V = 1e30

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--int8", action="store_true", help="int8 cache with static per-channel scales")
parser.add_argument("--bug", choices=BUGS, help="plant one of the family's mutants")
# Imported as a module (kprop.check, tests/python): no bug and an f64 cache
# unless BUG / INT8 are set.
ARGS = parser.parse_args() if __name__ == "__main__" else parser.parse_args([])
BUG = ARGS.bug
INT8 = ARGS.int8 or BUG in ("per_tensor_scale", "int8_round_half_away")


def int8_codes(x, s):
    """The contract's int8 codes: x / s in float64 rounded to nearest, ties to even (np.rint), clamped."""
    q = x / s
    if BUG == "int8_round_half_away":
        rounded = np.sign(q) * np.floor(np.abs(q) + 0.5)  # C's round(): ties away from zero
    else:
        rounded = np.rint(q)
    return np.clip(rounded, -127, 127).astype(np.int8)


def dtype_of(q):
    """The case's dtype code, from q's wire dtype."""
    if q.dtype == np.float64:
        return F64
    if q.dtype == np.float32:
        return F32
    if q.dtype == np.float16:
        return F16
    return BF16  # uint16 bits, or ml_dtypes.bfloat16


def to_storage(x, dtype):
    """float32 K/V rows as the cache of `dtype` stores them (bf16: uint16 bits)."""
    if dtype == F16:
        return x.astype(np.float16)  # float32 -> float16 rounds to nearest even
    if dtype == BF16:
        if BUG == "cache_truncated_bf16":
            return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return kprop_worker.float32_to_bf16(x)
    return x


def round_to(x, dtype):
    """float32 values rounded to `dtype` and back (the storage type's values)."""
    return kprop_worker.as_float32(to_storage(x, dtype)) if dtype in (F16, BF16) else x


class PagedCache:
    """A block pool [blocks, page, Hkv, D], block tables and a LIFO free list."""

    def __init__(self, block_order, page, kv_heads, head_dim, poison, k_range, v_range, dtype=F64):
        shape = (len(block_order), page, kv_heads, head_dim)
        self.page = page
        self.dtype = dtype
        if dtype != F64:
            nan = poison == POISON_NAN
            huge = np.float32(65504.0 if dtype == F16 else 1e30)  # the dtype's value of 1e30 (f16: its max)
            self.k = to_storage(np.full(shape, np.nan if nan else 0.0, dtype=np.float32), dtype)
            self.v = to_storage(np.full(shape, np.nan if nan else huge, dtype=np.float32), dtype)
        elif INT8:
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
            k, v = (int8_codes(x, s) for x, s in zip((k, v), self.scales))
        elif self.dtype != F64:
            k, v = to_storage(k, self.dtype), to_storage(v, self.dtype)
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
        return kprop_worker.as_float32(k), kprop_worker.as_float32(v)

    def padded_tables(self, seqs, n):
        """The block tables of `seqs` padded with block 0 to cover n positions."""
        width = -(-n // self.page)
        out = np.zeros((len(seqs), width), dtype=np.int64)
        for row, seq in enumerate(seqs):
            table = self.tables[seq][:width]
            out[row, :len(table)] = table
        return out


def attend(q, k, v, visible, scale, in_storage=None):
    """Softmax attention of queries q [m, Hq, D] over keys/values [m, n, Hkv, D] where visible [m, n].

    In q's precision (float64, or float32 for the f32/f16/bf16 cases). `in_storage` (a dtype code: the
    decode_accumulate_in_storage bug) sums P·V and the row sum key by key, rounded to it each time.
    """
    m, heads_q, dim = q.shape
    heads_kv = k.shape[2]
    scale = q.dtype.type(scale)
    q = q.reshape(m, heads_kv, heads_q // heads_kv, dim)  # query head h reads kv head h // group
    s = np.einsum("mhgd,mnhd->mhgn", q, k) * scale
    s = np.where(visible[:, None, None, :], s, -np.inf)  # unseen slots may hold NaN: never read them
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    v = np.where(visible[:, :, None, None], v, 0.0)
    if in_storage is not None:
        acc = np.zeros((m, heads_kv, heads_q // heads_kv, dim), dtype=np.float32)
        total = np.zeros(p.shape[:-1] + (1,), dtype=np.float32)
        for j in range(p.shape[-1]):
            total = round_to(total + p[..., j:j + 1], in_storage)
            acc = round_to(acc + p[..., j:j + 1] * v[:, j][:, :, None, :], in_storage)
        return (acc / total).reshape(m, heads_q, dim)
    p /= p.sum(axis=-1, keepdims=True)
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
    in_storage = cache.dtype if BUG == "decode_accumulate_in_storage" and cache.dtype in (F16, BF16) else None
    return attend(q, keys, values, np.arange(width)[None, :] < lengths[:, None], scale, in_storage)


def serve(q, k, v, seq_starts, prompt_lens, arrivals, k_range, v_range, block_order, page_size, chunk,
          poison, scale, **_):
    dtype = dtype_of(q)
    if INT8 and dtype != F64:
        raise kprop_worker.Unsupported("the int8 cache takes f64 cases")
    q = kprop_worker.as_float32(q)  # f32/f16/bf16 cases compute in float32
    cache = PagedCache(block_order, page_size, k.shape[1], k.shape[2], poison, k_range, v_range, dtype)
    out = np.zeros(q.shape, dtype=q.dtype)
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
    return {"out": out, "cache_dtype": np.array([I8 if INT8 else dtype])}


if __name__ == "__main__":
    kprop_worker.serve({"kvcache.serve": serve})
