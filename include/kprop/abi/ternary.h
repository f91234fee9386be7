/* ternary: the BitNet b1.58 linear layer (docs/FAMILIES.md;
 * kernels/ternary/ternary.h). Included by kprop/abi.h, or on its own.
 *
 * Two ops, called in this order for every case, as a BitNet model is served:
 * the latent weights are quantized and packed once (checkpoint conversion),
 * then the linear layer runs forward and straight-through backward on the
 * packed weights the first op returned. Every intermediate the contract
 * defines is an output, so each stage is checked on its own.
 *
 * Contract, eps = KPROP_TERNARY_EPS, round() = round half to even:
 *   s    = max(sum|W| / (N K), eps)            sum in row-major order
 *   w_q  = clamp(round(W * (1 / s)), -1, 1)    in {-1, 0, +1}
 *   a_t  = 127 / max(max_k |x_tk|, eps)        one per token
 *   x_q  = clamp(round(x_tk * a_t), -128, 127) int8
 *   acc  = x_q . w_q^T                          exact integers
 *   y    = acc * s / a_t
 *   dx   = dy . (s w_q),  dW = dy^T . (x_q / a_t)   (straight-through)
 * s, w_q, a_t, x_q and acc are defined in double by exactly these operations
 * and must match kprop's bit for bit; y, dx and dW are f32 and are held to
 * f32 error bounds.
 *
 * Packed weights, u8 [N, ceil(K / 4)] (the `packed` layout of
 * kernels/ternary/packed.h): 2 bits per weight, 4 weights per byte; weight k
 * of row n sits in byte k / 4 of that row at bits 2 (k % 4) .. 2 (k % 4) + 1
 * (the first weight in the least significant bits). Codes: 00 = 0, 01 = +1,
 * 10 = -1; 11 is invalid (kprop reads it as NaN, which no quantized weight
 * may be). A row's last byte is padded with 00 codes past K.
 */
#ifndef KPROP_ABI_TERNARY_H
#define KPROP_ABI_TERNARY_H

/* The tensor, status and dtype types; this header is complete on its own. */
#include "kprop/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KPROP_TERNARY_EPS 1e-5 /* BitNet's clamp of both scales' denominators */

/* Op "ternary.quantize_weights", entry point kprop_ternary_quantize_weights. */
typedef struct kprop_ternary_quantize_weights_args {
  kprop_tensor w;        /* [N, K] f64 latent weights */
  kprop_tensor w_packed; /* out: [N, ceil(K / 4)] u8, w_q packed as above */
  kprop_tensor w_scale;  /* out: [1] f64, s */
} kprop_ternary_quantize_weights_args;
typedef int (*kprop_ternary_quantize_weights_fn)(const kprop_ternary_quantize_weights_args* args, char* error,
                                                 size_t error_size);

/* Op "ternary.linear", entry point kprop_ternary_linear: forward and
 * straight-through backward on the first op's packed weights and scale. */
typedef struct kprop_ternary_linear_args {
  kprop_tensor x;        /* [M, K] f64 activations */
  kprop_tensor w_packed; /* [N, ceil(K / 4)] u8, from kprop_ternary_quantize_weights */
  kprop_tensor w_scale;  /* [1] f64, s from kprop_ternary_quantize_weights */
  kprop_tensor dy;       /* [M, N] f64 upstream gradient */
  kprop_tensor x_scale;  /* out: [M] f64, a_t */
  kprop_tensor x_q;      /* out: [M, K] i8 */
  kprop_tensor acc;      /* out: [M, N] i32 */
  kprop_tensor y;        /* out: [M, N] f32 */
  kprop_tensor dx;       /* out: [M, K] f32 */
  kprop_tensor dw;       /* out: [N, K] f32 */
} kprop_ternary_linear_args;
typedef int (*kprop_ternary_linear_fn)(const kprop_ternary_linear_args* args, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* KPROP_ABI_TERNARY_H */
