// LayerNorm forward and backward on a CUDA device, in the case's dtype.
//
// One block per row for the forward and for dx; a third kernel sums dγ and
// dβ over rows, one thread per column, rows in order (deterministic, no
// atomics). Statistics: x is shifted by its first element (as the CPU fused
// kernel: exact at large offsets, Sterbenz), then two passes over the row in
// global memory with fixed-shape tree reductions: c = mean(x − x₀), then
// σ² = mean(((x − x₀) − c)²). Every reduction has a fixed order, so results
// are bitwise run-to-run deterministic. Plain IEEE sqrt and division (no
// fast math), as the CPU implementations.
//
// f16 / bf16 cases (the float kernels, `store`): the forward writes the x̂
// cache rounded to the storage dtype (round to nearest even) and y from the
// unrounded f32 x̂, as the CPU fused kernel (fused.cpp); both backward
// kernels read that stored cache, so dx, dγ and dβ are the contract's
// backward of the x̂ the target reports (layernorm.h, precision contract).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/cuda_support.cuh"
#include "kernels/layernorm/layernorm_cuda.h"

namespace kprop::layernorm::cuda_raw {
namespace {

constexpr int kThreads = 256;  // a multiple of the warp size

using cuda_support::check;
using cuda_support::download;

// A value of the x̂ cache as stored: rounded to f16 / bf16 (nearest even;
// past the range: inf, as the CPU's half::f16_from_float) and read back as
// float; f32 and f64 store exactly.
__device__ __forceinline__ float stored(float v, Store s) {
  if (s == Store::f16) return __half2float(__float2half_rn(v));
  if (s == Store::bf16) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}
__device__ __forceinline__ double stored(double v, Store) {
  return v;
}

// Sum of v over the block; every thread gets the result. `scratch` holds one
// value per warp. Fixed shape, so the rounding is the same on every run.
template <typename T>
__device__ T block_sum(T v, T* scratch) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? scratch[lane] : T(0);
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

template <typename T>
__global__ void forward_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                               const T* __restrict__ beta, int D, T eps, T* __restrict__ y,
                               T* __restrict__ xhat, T* __restrict__ mean, T* __restrict__ rstd,
                               Store store) {
  __shared__ T scratch[kThreads / 32];
  const size_t o = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(D);
  const T* xr = x + o;
  const T shift = xr[0];
  T s = 0;
  for (int i = threadIdx.x; i < D; i += kThreads) s += xr[i] - shift;
  const T center = block_sum(s, scratch) / T(D);
  T ss = 0;
  for (int i = threadIdx.x; i < D; i += kThreads) {
    const T d = (xr[i] - shift) - center;
    ss += d * d;
  }
  const T var = block_sum(ss, scratch) / T(D);
  const T rs = T(1) / sqrt(var + eps);
  for (int i = threadIdx.x; i < D; i += kThreads) {
    const T xh = ((xr[i] - shift) - center) * rs;
    xhat[o + i] = stored(xh, store);  // the cache the backward kernels read
    y[o + i] = gamma[i] * xh + beta[i];
  }
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = shift + center;
    rstd[blockIdx.x] = rs;
  }
}

// dx of one row from the cache (x̂ as stored, rstd): dx = rstd·(g − mean(g) − x̂·mean(g x̂)).
template <typename T>
__global__ void backward_dx_kernel(const T* __restrict__ dy, const T* __restrict__ gamma,
                                   const T* __restrict__ xhat, const T* __restrict__ rstd, int D,
                                   T* __restrict__ dx) {
  __shared__ T scratch[kThreads / 32];
  const size_t o = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(D);
  T sg = 0, sgx = 0;
  for (int i = threadIdx.x; i < D; i += kThreads) {
    const T g = gamma[i] * dy[o + i];
    sg += g;
    sgx += g * xhat[o + i];
  }
  const T mean_g = block_sum(sg, scratch) / T(D);
  const T mean_gx = block_sum(sgx, scratch) / T(D);
  const T rs = rstd[blockIdx.x];
  for (int i = threadIdx.x; i < D; i += kThreads) {
    const T g = gamma[i] * dy[o + i];
    dx[o + i] = rs * (g - mean_g - xhat[o + i] * mean_gx);
  }
}

// dγ and dβ: one thread per column, rows summed in order; x̂ as stored.
template <typename T>
__global__ void backward_params_kernel(const T* __restrict__ dy, const T* __restrict__ xhat, int rows, int D,
                                       T* __restrict__ dgamma, T* __restrict__ dbeta) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= D) return;
  T sg = 0, sb = 0;
  for (int r = 0; r < rows; ++r) {
    const size_t o = static_cast<size_t>(r) * static_cast<size_t>(D) + static_cast<size_t>(i);
    sg += dy[o] * xhat[o];
    sb += dy[o];
  }
  dgamma[i] = sg;
  dbeta[i] = sb;
}

using Buffers = cuda_support::DeviceBuffers;

template <typename T>
void run_t(const T* hx, const T* hgamma, const T* hbeta, const T* hdy, int rows_i, int dim, T eps, T* hy,
           T* hxhat, T* hmean, T* hrstd, T* hdx, T* hdgamma, T* hdbeta, Store store) {
  if (device_count() <= 0) throw std::runtime_error("no CUDA device");
  if (rows_i < 1 || dim < 1) throw std::runtime_error("layernorm cuda: empty case");
  const size_t rows = static_cast<size_t>(rows_i), D = static_cast<size_t>(dim), n = rows * D;
  Buffers b;
  const T *x = b.upload(hx, n), *gamma = b.upload(hgamma, D), *beta = b.upload(hbeta, D),
          *dy = b.upload(hdy, n);
  T *y = b.alloc<T>(n), *xhat = b.alloc<T>(n), *mean = b.alloc<T>(rows), *rstd = b.alloc<T>(rows),
    *dx = b.alloc<T>(n), *dgamma = b.alloc<T>(D), *dbeta = b.alloc<T>(D);
  const unsigned grid = static_cast<unsigned>(rows_i);
  forward_kernel<T><<<grid, kThreads>>>(x, gamma, beta, dim, eps, y, xhat, mean, rstd, store);
  check(cudaGetLastError(), "forward launch");
  backward_dx_kernel<T><<<grid, kThreads>>>(dy, gamma, xhat, rstd, dim, dx);
  check(cudaGetLastError(), "backward launch");
  const unsigned col_blocks = static_cast<unsigned>((dim + kThreads - 1) / kThreads);
  backward_params_kernel<T><<<col_blocks, kThreads>>>(dy, xhat, rows_i, dim, dgamma, dbeta);
  check(cudaGetLastError(), "dgamma/dbeta launch");
  check(cudaDeviceSynchronize(), "kernels");
  download(hy, y, n);
  download(hxhat, xhat, n);
  download(hmean, mean, rows);
  download(hrstd, rstd, rows);
  download(hdx, dx, n);
  download(hdgamma, dgamma, D);
  download(hdbeta, dbeta, D);
}

}  // namespace

int device_count() {
  return cuda_support::device_count();
}

void run(const float* x, const float* gamma, const float* beta, const float* dy, int rows, int dim, float eps,
         float* y, float* xhat, float* mean, float* rstd, float* dx, float* dgamma, float* dbeta,
         Store store) {
  run_t(x, gamma, beta, dy, rows, dim, eps, y, xhat, mean, rstd, dx, dgamma, dbeta, store);
}

void run(const double* x, const double* gamma, const double* beta, const double* dy, int rows, int dim,
         double eps, double* y, double* xhat, double* mean, double* rstd, double* dx, double* dgamma,
         double* dbeta) {
  run_t(x, gamma, beta, dy, rows, dim, eps, y, xhat, mean, rstd, dx, dgamma, dbeta, Store::none);
}

}  // namespace kprop::layernorm::cuda_raw
