// Mutants: each switches exactly one stage of a correct engine (Engine's
// flags, kvcache.h) to a known KV-cache bug.
#include "kernels/kvcache/kvcache.h"

namespace kprop::kvcache {
namespace {

// The engine of layout L (chunked prefill when Chunked) with the one switch
// Flag on.
template <Layout L, bool Engine::*Flag, bool Chunked = false>
Result switched(const Case& c) {
  Engine e{L, Chunked};
  e.*Flag = true;
  return run(c, e);
}

}  // namespace

const std::vector<Mutant>& mutants() {
  static const std::vector<Mutant> table = {
      // The block was looked up before allocating.
      {"paged_last_block_offset",
       "paged: a decode token starting a new page is written at offset 0 of the previous last block",
       switched<Layout::paged, &Engine::last_block_offset>},
      {"chunk_ignores_past", "chunked prefill: a chunk attends only to itself, not to earlier chunks",
       switched<Layout::paged, &Engine::chunk_ignores_past, true>},
      {"decode_off_by_one", "decode attends to the cache before its own token is appended (misses itself)",
       switched<Layout::contiguous, &Engine::decode_off_by_one>},
      // Harmless while every score is small: only sharp attention (large
      // q_scale, drawn log-uniformly up to 256) overflows exp.
      {"softmax_without_max",
       "paged: the online softmax without its running max, exp(s) / sum exp(s): inf / inf = NaN once a score "
       "passes 88.7 (f32) or 709.8 (f64)",
       switched<Layout::paged, &Engine::no_max>},
      // Harmless unless every visible score of a row is below the log of
      // the arithmetic's least value: the negative_scores cases
      // (Case::negative_scores, specs/kvcache.yaml).
      {"max_init_zero",
       "contiguous: the online softmax's running max starts at 0, not -inf: when every score of a row is "
       "below -745 (f64) or -104 (f32 arithmetic) every exp underflows and the output is 0 / 0 = NaN",
       switched<Layout::contiguous, &Engine::max_init_zero>},
      // The padded batch width is the longest decoding sequence's length.
      {"padding_leak", "decode keys masked by the padded batch width, not the sequence's own length",
       switched<Layout::contiguous, &Engine::padding_leak>},
      // The scale is the largest channel range / 127.
      {"per_tensor_scale", "int8 cache with one scale per tensor instead of per channel",
       switched<Layout::int8, &Engine::per_tensor_scale>},
      {"int8_quantize_in_f32",
       "int8 cache codes round(f32(x) / f32(s)), the quotient in f32 instead of double: an element a hair "
       "off "
       "a code's rounding tie rounds onto it",
       switched<Layout::int8, &Engine::quantize_in_f32>},
      // Differs from the contract only where |x / s| is exactly k + 1/2 with
      // k even: int8_ties' elements (specs/kvcache.yaml).
      {"int8_round_half_away",
       "int8 cache codes std::round(x / s), ties away from zero instead of to even: an element with x / s = "
       "±(k + 1/2) exactly, k even, gets code ±(k + 1), one step off the contract's ±k",
       switched<Layout::int8, &Engine::round_half_away>},
      // This step's allocations reuse blocks it still reads.
      {"stale_block_reuse",
       "paged: finishing sequences release blocks before the step's writes, which then reuse blocks still "
       "being read",
       switched<Layout::paged, &Engine::stale_block_reuse>},
      // The low 16 bits of the f32 K/V are dropped (truncation toward zero):
      // every cached value loses up to a whole bf16 ulp, biased toward 0.
      {"cache_truncated_bf16",
       "paged, bf16: K/V written to the bf16 cache by truncation instead of round-to-nearest-even",
       switched<Layout::paged, &Engine::truncate_bf16>},
      // Differs from the contract only where an f32 K/V element or output is
      // exactly halfway between two bf16 values with an even lower one:
      // store_ties' elements (specs/kvcache.yaml).
      {"bf16_round_half_away",
       "paged, bf16: K/V written to the bf16 cache, and outputs stored, by (bits + 0x8000) >> 16, ties away "
       "from zero instead of to even",
       switched<Layout::paged, &Engine::half_away_bf16>},
      // f32/f16/bf16 cases: rounded after every update.
      {"decode_accumulate_in_storage",
       "decode's P·V accumulator and softmax row sum held in the storage type (f16/bf16), not f32",
       switched<Layout::contiguous, &Engine::decode_acc_in_storage>},
      // Small effect: 1/sqrt(D) rounded to f16/bf16 is off by 1.07e-4
      // (relative) unless D is a power of 4, so each score is off by that
      // much of itself: within tolerance at the logits random cases have,
      // out of it once the scores are large.
      {"scale_in_storage",
       "paged, f16/bf16: the softmax scale 1/sqrt(D) rounded to the dtype before it scales the scores",
       switched<Layout::paged, &Engine::scale_in_storage>},
      // A table of 4096 entries (a kernel written for the old prompt cap of
      // 4096 tokens at page size 1): logical block l at entry l mod 4096, so
      // past 4096 blocks a sequence overwrites its first blocks
      // (specs/kvcache.yaml, profile large).
      {"table_entries_4096",
       "paged: a block table of 4096 entries, logical block l at entry l mod 4096: past 4096 blocks a "
       "sequence overwrites its first blocks",
       switched<Layout::paged, &Engine::table_entries_4096>},
  };
  return table;
}

}  // namespace kprop::kvcache
