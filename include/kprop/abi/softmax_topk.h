/* softmax_topk: fused softmax + top-k (docs/FAMILIES.md;
 * kernels/softmax_topk/softmax_topk.h). Included by kprop/abi.h, or on its own.
 *
 * For every row of logits, the K largest softmax probabilities and their
 * indices, sorted by probability. Logits are finite or -inf (never +inf or
 * NaN). Softmax is strictly increasing in the logit, so the order is the
 * exact logit order (descending), equal logits by ascending index (-0.0
 * and +0.0 are equal); two
 * probabilities that both underflow to 0 are not tied unless their logits
 * are equal. A -inf logit has probability 0 and ranks after every finite
 * one; a row of all -inf gives probabilities 0 and indices 0..K-1.
 * Probabilities are computed and returned in the logits' dtype.
 */
#ifndef KPROP_ABI_SOFTMAX_TOPK_H
#define KPROP_ABI_SOFTMAX_TOPK_H

/* The tensor, status and dtype types; this header is complete on its own. */
#include "kprop/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Op "softmax_topk", entry point kprop_softmax_topk. */
typedef struct kprop_softmax_topk_args {
  kprop_tensor logits;  /* [rows, V] f32, f64, f16 or bf16 */
  int32_t k;            /* 1 <= K <= V (any K: no cap such as 32) */
  int32_t block;        /* elements per step of a single-pass kernel the case asks for (a kernel may
                           ignore it) */
  kprop_tensor probs;   /* out: [rows, K] dtype of logits, sorted by probability (descending) */
  kprop_tensor indices; /* out: [rows, K] i32, distinct, in [0, V) */
} kprop_softmax_topk_args;
typedef int (*kprop_softmax_topk_fn)(const kprop_softmax_topk_args* args, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* KPROP_ABI_SOFTMAX_TOPK_H */
