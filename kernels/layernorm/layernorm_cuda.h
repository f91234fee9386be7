// LayerNorm on a CUDA device. Two layers:
//  * cuda_raw: host arrays in, host arrays out, implemented in
//    layernorm_cuda.cu. Plain C++17 (nvcc may compile device code at a lower
//    standard than the C++20 host code), no kprop, RapidCheck or yaml headers.
//  * cuda(Case): the Case -> Result wrapper (layernorm_cuda.cpp), host
//    compiler only; declared in layernorm.h.
// Both exist only when the family is built with CUDA (KPROP_HAVE_CUDA);
// registration turns "no device" into kprop::TargetUnavailable (skipped).
#pragma once

namespace kprop::layernorm::cuda_raw {

// Number of CUDA devices; 0 when there is none or the runtime reports an
// error (no driver, insufficient driver). Cached after the first call.
int device_count();

// The storage dtype of a case the float kernels run: f32 (none), or f16 /
// bf16, whose x̂ cache the forward stores rounded to it (round to nearest
// even) before the backward reads it (layernorm.h, precision contract).
enum class Store { none, f16, bf16 };

// Forward and backward of rows x dim on device 0: x, dy, y, xhat, dx are
// rows x dim; gamma, beta, dgamma, dbeta dim; mean, rstd rows. `store`:
// the x̂ cache (xhat, which dx, dgamma and the caller read) in that dtype's
// values; y, dx, dgamma and dbeta stay f32 (the caller rounds them). Throws
// std::runtime_error without a device or on any CUDA error.
void run(const float* x, const float* gamma, const float* beta, const float* dy, int rows, int dim, float eps,
         float* y, float* xhat, float* mean, float* rstd, float* dx, float* dgamma, float* dbeta,
         Store store = Store::none);
void run(const double* x, const double* gamma, const double* beta, const double* dy, int rows, int dim,
         double eps, double* y, double* xhat, double* mean, double* rstd, double* dx, double* dgamma,
         double* dbeta);

}  // namespace kprop::layernorm::cuda_raw
