/* layernorm: forward and backward over the last dim (docs/FAMILIES.md;
 * kernels/layernorm/layernorm.h). Included by kprop/abi.h, or on its own.
 *
 * One op runs the forward and then the backward on the forward's own cache,
 * as a training step does. Per row, biased variance:
 *   mean = sum(x) / D,  var = sum((x - mean)^2) / D,  rstd = 1 / sqrt(var + eps)
 *   xhat = (x - mean) * rstd,  y = gamma * xhat + beta
 * and with g = gamma * dy:
 *   dx = rstd * (g - mean_D(g) - xhat * mean_D(g * xhat))
 *   dgamma = sum_rows dy * xhat,  dbeta = sum_rows dy.
 * A constant row (var = 0) gives xhat = 0, y = beta; D = 1 gives y = beta and
 * dx = 0. Every tensor has the case's dtype (f32, f64, f16 or bf16), except
 * mean and rstd of an f16/bf16 case, which are f32: a half case computes in
 * f32 and stores xhat, y, dx, dgamma and dbeta rounded to its dtype; f32 and
 * f64 cases compute in their own dtype. The cached statistics are outputs so
 * that the identities of the spec can be checked against the kernel's own
 * forward (dgamma against its own xhat).
 */
#ifndef KPROP_ABI_LAYERNORM_H
#define KPROP_ABI_LAYERNORM_H

/* The tensor, status and dtype types; this header is complete on its own. */
#include "kprop/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Op "layernorm", entry point kprop_layernorm. */
typedef struct kprop_layernorm_args {
  kprop_tensor x;      /* [rows, D] f32, f64, f16 or bf16 */
  kprop_tensor gamma;  /* [D] same dtype */
  kprop_tensor beta;   /* [D] same dtype */
  kprop_tensor dy;     /* [rows, D] same dtype: the upstream gradient */
  double eps;          /* > 0, exactly representable in the dtype (f32 for an f16/bf16 case) */
  kprop_tensor y;      /* out: [rows, D] */
  kprop_tensor xhat;   /* out: [rows, D] the normalised x the backward used (a kernel that
                          recomputes it from mean and rstd writes what it recomputed) */
  kprop_tensor mean;   /* out: [rows] (f32 in an f16/bf16 case) */
  kprop_tensor rstd;   /* out: [rows] 1 / sqrt(var + eps) (f32 in an f16/bf16 case) */
  kprop_tensor dx;     /* out: [rows, D] */
  kprop_tensor dgamma; /* out: [D] */
  kprop_tensor dbeta;  /* out: [D] */
} kprop_layernorm_args;
typedef int (*kprop_layernorm_fn)(const kprop_layernorm_args* args, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* KPROP_ABI_LAYERNORM_H */
