/* kvcache (docs/FAMILIES.md; kernels/kvcache/kvcache.h). Included by kprop/abi.h, or on its own.
 *
 * Op "kvcache.serve", entry point kprop_kvcache_serve: a serving engine's
 * attention path over one whole workload. The bugs this family hunts live in
 * the cache management around the attention kernel: where a decode token's
 * K/V is written, when a finished sequence's blocks return to the free list,
 * how far a batched decode reads, what a prefill chunk attends to, how an
 * int8 cache is scaled. So the engine owns its cache, its block tables and
 * its scheduler steps; kprop hands over every token's Q/K/V and the cache's
 * configuration, and reads back every token's attention output.
 *
 * Workload. B sequences, N tokens in all, packed sequence after sequence:
 * sequence b owns rows seq_starts[b] .. seq_starts[b+1]-1 of q, k, v, in
 * token order. Its first P_b = prompt_lens[b] >= 1 tokens are its prompt, the
 * rest are decoded; it arrives at scheduler step arrivals[b].
 *
 * Output. For token t of a sequence and query head h (GQA: Hq = group * Hkv,
 * head h reads kv head h / group):
 *   out[t][h] = softmax(scale * q_t[h] . K[0..t]^T) V[0..t]
 * over the sequence's own tokens 0..t only (causal), in double.
 *
 * dtypes (kernels/kvcache/kvcache.h, Precision). An f64 case (q in f64) is
 * all double. An f32, f16 or bf16 case: q and out are in that dtype, k and v
 * arrive in f32; the cache holds the dtype (K/V rounded to nearest even at
 * the write), attention computes in f32, outputs are rounded to the dtype.
 * An engine that lacks a dtype returns KPROP_UNSUPPORTED.
 *
 * Schedule (the one kprop sized the pool for). At step arrivals[b] the prompt
 * is prefilled in one piece or, by an engine that chunks prefill, in chunks
 * of `chunk` tokens, one chunk per step; then one token is decoded per step.
 * Within a step every scheduled token's K/V is written to the cache first,
 * then every scheduled token attends through the cache. A sequence's cache
 * blocks are released at the end of the step of its last token.
 *
 * Cache. A paged engine allocates blocks of page_size tokens from a pool of
 * num_blocks blocks whose free list starts as block_order (front first) and
 * is LIFO (a released block is the next handed out); the pool holds what
 * the schedule above needs at its peak, with or without chunking, plus spares.
 * A contiguous engine may ignore page_size and block_order, an engine that
 * does not chunk may ignore chunk: outputs must not depend on any of them.
 * Fill cache memory with the poison before use (K = V = NaN, or K = 0 and
 * V = 1e30 so a leaked slot carries weight; an int8 cache holds the invalid
 * code -128), so that reading a slot nobody wrote shows in the outputs.
 *
 * int8 cache. Static per-channel scales s = range / 127 from the calibrated
 * channel ranges k_range, v_range (every K and V element of channel (h, d)
 * lies in [-range[h][d], range[h][d]]: nothing clips); codes
 * round_half_even(x / s), clamped to [-127, 127]; attention reads code * s,
 * all in double. kprop then compares with full recomputation on exactly those
 * dequantized values at the fp64 tolerance, and with the fp64 reference
 * under the derived quantization bound.
 */
#ifndef KPROP_ABI_KVCACHE_H
#define KPROP_ABI_KVCACHE_H

/* The tensor, status and dtype types; this header is complete on its own. */
#include "kprop/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What never-written cache slots hold (the case's choice). */
enum {
  KPROP_KVCACHE_POISON_NAN = 0, /* K = NaN, V = NaN */
  KPROP_KVCACHE_POISON_HUGE = 1 /* K = 0, V = 1e30 */
};

typedef struct kprop_kvcache_serve_args {
  kprop_tensor q;           /* [N, Hq, D] in the case's dtype: f64, f32, f16 or bf16 */
  kprop_tensor k;           /* [N, Hkv, D] f64 for f64 cases, else f32 (rounded to the dtype when cached) */
  kprop_tensor v;           /* [N, Hkv, D] like k */
  kprop_tensor seq_starts;  /* [B + 1] i32: seq_starts[0] = 0, seq_starts[B] = N */
  kprop_tensor prompt_lens; /* [B] i32: P_b >= 1 */
  kprop_tensor arrivals;    /* [B] i32: the step of the prefill (or its first chunk), >= 0 */
  kprop_tensor k_range;     /* [Hkv, D] f64: calibrated key channel ranges (int8 scales) */
  kprop_tensor v_range;     /* [Hkv, D] f64: calibrated value channel ranges */
  kprop_tensor block_order; /* [num_blocks] i32: the pool's initial free list (a permutation) */
  int32_t page_size;        /* tokens per block of a paged cache, >= 1 */
  int32_t chunk;            /* prompt tokens per prefill chunk, >= 1 */
  int32_t poison;           /* KPROP_KVCACHE_POISON_* */
  int32_t reserved;
  double scale;             /* 1 / sqrt(D) */
  kprop_tensor out;         /* out: [N, Hq, D] in q's dtype, every token's attention output */
  kprop_tensor cache_dtype; /* out: [1] i32, the cache's element type: q's dtype, or KPROP_I8 for the
                               int8 cache above on an f64 case (any other value is an error) */
} kprop_kvcache_serve_args;
typedef int (*kprop_kvcache_serve_fn)(const kprop_kvcache_serve_args* args, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* KPROP_ABI_KVCACHE_H */
