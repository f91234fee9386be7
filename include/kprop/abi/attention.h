/* attention.fwd and attention.bwd (docs/FAMILIES.md; kernels/attention/attention.h).
 * Included by kprop/abi.h, or on its own. */
#ifndef KPROP_ABI_ATTENTION_H
#define KPROP_ABI_ATTENTION_H

/* The tensor, status and dtype types; this header is complete on its own. */
#include "kprop/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Mask kinds: one per case. */
enum {
  KPROP_MASK_NONE = 0,
  KPROP_MASK_CAUSAL = 1,      /* bottom-right: query i sees key j iff j <= i + Nk - Nq */
  KPROP_MASK_KEY_PADDING = 2, /* batch b sees keys j < key_lengths[b] (0 allowed) */
  KPROP_MASK_BOOLEAN = 3      /* allowed[b][i][j] != 0, shared by every head */
};

/* Op "attention.fwd", entry point kprop_attention_fwd.
 * GQA: Hq = g * Hkv and query head h reads kv head h / g. S = scale * Q K^T.
 * A fully masked row must give O = 0 and LSE = -inf, never NaN. */
typedef struct kprop_attention_fwd_args {
  kprop_tensor q;           /* [B, Hq, Nq, D]  f32, f64, f16 or bf16 */
  kprop_tensor k;           /* [B, Hkv, Nk, D] same dtype */
  kprop_tensor v;           /* [B, Hkv, Nk, D] same dtype */
  kprop_tensor key_lengths; /* [B] i32; only with KPROP_MASK_KEY_PADDING */
  kprop_tensor allowed;     /* [B, Nq, Nk] u8; only with KPROP_MASK_BOOLEAN */
  int32_t mask;             /* KPROP_MASK_* */
  int32_t block_q, block_k; /* tile sizes the case asks for (a kernel may ignore them) */
  int32_t reserved;
  double scale;     /* already resolved: 1/sqrt(D) unless the case sets one */
  kprop_tensor o;   /* out: [B, Hq, Nq, D], dtype of q */
  kprop_tensor lse; /* out: [B, Hq, Nq], natural log of the softmax denominator;
                       f32 when q is f16 or bf16 (as FlashAttention keeps it) */
} kprop_attention_fwd_args;
typedef int (*kprop_attention_fwd_fn)(const kprop_attention_fwd_args* args, char* error, size_t error_size);

/* Op "attention.bwd", entry point kprop_attention_bwd. As FlashAttention's
 * backward: O and LSE of the forward come in (from kprop's reference, in the
 * case's dtype); dK and dV are summed over the query heads sharing a kv head. */
typedef struct kprop_attention_bwd_args {
  kprop_tensor q, k, v;     /* as in the forward */
  kprop_tensor key_lengths; /* as in the forward */
  kprop_tensor allowed;     /* as in the forward */
  int32_t mask;
  int32_t block_q, block_k;
  int32_t reserved;
  double scale;
  kprop_tensor o;     /* [B, Hq, Nq, D] the forward's output */
  kprop_tensor lse;   /* [B, Hq, Nq] the forward's LSE (-inf on fully masked rows); f32 for f16/bf16 */
  kprop_tensor d_out; /* [B, Hq, Nq, D] dO */
  kprop_tensor d;     /* out: [B, Hq, Nq] D = rowsum(dO * O) as the kernel used it; f32 for f16/bf16 */
  kprop_tensor dq;    /* out: [B, Hq, Nq, D] */
  kprop_tensor dk;    /* out: [B, Hkv, Nk, D] */
  kprop_tensor dv;    /* out: [B, Hkv, Nk, D] */
} kprop_attention_bwd_args;
typedef int (*kprop_attention_bwd_fn)(const kprop_attention_bwd_args* args, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* KPROP_ABI_ATTENTION_H */
