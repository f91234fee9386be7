// Mutants: each switches exactly one stage of a correct engine to a known
// KV-cache bug.
#include "kernels/kvcache/kvcache.h"

namespace kprop::kvcache {
namespace {

// paged: a decode token that starts a new page is written at offset 0 of the
// previous last block (the block was looked up before allocating).
Result paged_last_block_offset(const Case& c) {
  Engine e{Layout::paged};
  e.last_block_offset = true;
  return run(c, e);
}

// chunked_prefill: each chunk attends to itself only, not to earlier chunks in the cache.
Result chunk_ignores_past(const Case& c) {
  Engine e{Layout::paged, true};
  e.chunk_ignores_past = true;
  return run(c, e);
}

// contiguous: a decode token attends to the cache length before its own append.
Result decode_off_by_one(const Case& c) {
  Engine e{Layout::contiguous};
  e.decode_off_by_one = true;
  return run(c, e);
}

// contiguous: decode keys masked to the padded batch width (longest decoding
// sequence) instead of each sequence's own length.
Result padding_leak(const Case& c) {
  Engine e{Layout::contiguous};
  e.padding_leak = true;
  return run(c, e);
}

// int8: one scale per tensor (largest channel range / 127) instead of per channel.
Result per_tensor_scale(const Case& c) {
  Engine e{Layout::int8};
  e.per_tensor_scale = true;
  return run(c, e);
}

// paged: a finishing sequence's blocks go back to the free list before the
// step's writes, so this step's allocations reuse blocks it still reads.
Result stale_block_reuse(const Case& c) {
  Engine e{Layout::paged};
  e.stale_block_reuse = true;
  return run(c, e);
}

// paged, bf16 cases: the cache write converts the f32 K/V to bf16 by
// dropping the low 16 bits (truncation toward zero) instead of rounding to
// nearest even; every cached value loses up to a whole bf16 ulp, biased toward 0.
Result cache_truncated_bf16(const Case& c) {
  Engine e{Layout::paged};
  e.truncate_bf16 = true;
  return run(c, e);
}

// contiguous, f32/f16/bf16 cases: a decode step's P·V accumulator and
// softmax row sum are held in the storage type (rounded after every update)
// instead of f32.
Result decode_accumulate_in_storage(const Case& c) {
  Engine e{Layout::contiguous};
  e.decode_acc_in_storage = true;
  return run(c, e);
}

// paged: each sequence's block table has 4096 entries (a kernel written for
// the old prompt cap of 4096 tokens at page size 1) and logical block l uses
// entry l mod 4096, so past 4096 blocks a sequence overwrites its first
// blocks (specs/kvcache.yaml, profile large).
Result table_entries_4096(const Case& c) {
  Engine e{Layout::paged};
  e.table_entries_4096 = true;
  return run(c, e);
}

}  // namespace

const std::vector<Mutant>& mutants() {
  static const std::vector<Mutant> table = {
      {"paged_last_block_offset",
       "paged: a decode token starting a new page is written at offset 0 of the previous last block",
       paged_last_block_offset},
      {"chunk_ignores_past", "chunked prefill: a chunk attends only to itself, not to earlier chunks",
       chunk_ignores_past},
      {"decode_off_by_one", "decode attends to the cache before its own token is appended (misses itself)",
       decode_off_by_one},
      {"padding_leak", "decode keys masked by the padded batch width, not the sequence's own length",
       padding_leak},
      {"per_tensor_scale", "int8 cache with one scale per tensor instead of per channel", per_tensor_scale},
      {"stale_block_reuse",
       "paged: finishing sequences release blocks before the step's writes, which then reuse blocks still "
       "being read",
       stale_block_reuse},
      {"cache_truncated_bf16",
       "paged, bf16: K/V written to the bf16 cache by truncation instead of round-to-nearest-even",
       cache_truncated_bf16},
      {"decode_accumulate_in_storage",
       "decode's P·V accumulator and softmax row sum held in the storage type (f16/bf16), not f32",
       decode_accumulate_in_storage},
      {"table_entries_4096",
       "paged: a block table of 4096 entries, logical block l at entry l mod 4096: past 4096 blocks a "
       "sequence overwrites its first blocks",
       table_entries_4096},
  };
  return table;
}

}  // namespace kprop::kvcache
