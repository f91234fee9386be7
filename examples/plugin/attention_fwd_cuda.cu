// An attention forward on the GPU, written outside kprop and tested through
// kprop's C ABI with device tensors (kprop_op_device in kprop/abi.h). It
// needs only include/kprop/abi.h and the CUDA runtime:
//
//   nvcc -O2 -shared -Xcompiler -fPIC -cudart shared -I kprop/include attention_fwd_cuda.cu \
//        -o libattention_fwd_cuda.so
//   prop_runner --spec specs/attention_fwd.yaml --target plugin:./libattention_fwd_cuda.so
//
// Simple, not fast: one thread per query row, in f32 whatever the storage
// (f32, f16 or bf16 tensors; O stored in the case's dtype, LSE in f32 as the
// ABI asks for half cases), reading every tensor through its strides: the
// row maximum, the sum of the exponentials, then each output channel as its
// own sum over the keys (no accumulator array, so any head dim). f64 cases
// are declined (KPROP_UNSUPPORTED), so the run reports them as declined,
// never as passed.
//
// KPROP_EXAMPLE_BUG plants one bug, for kprop's own tests:
//   1  no guard for a fully masked row: O = 0 / 0 (NaN)
//   2  a stray write far past the end of O: an illegal address, a sticky
//      CUDA error (kprop fails the case and restarts its plugin host)
//   3  indexes Q, K, V and O as if they were contiguous (row-major offsets
//      from the shape, strides ignored): right on kprop's default tensors,
//      wrong under run.padded_tensors
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <kprop/abi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

#ifndef KPROP_EXAMPLE_BUG
#define KPROP_EXAMPLE_BUG 0
#endif

KPROP_PLUGIN();

// Every tensor of attention.fwd arrives in CUDA device memory.
KPROP_EXPORT int32_t kprop_op_device(const char* op) {
  return std::strcmp(op, "attention.fwd") == 0 ? KPROP_CUDA : KPROP_HOST;
}

namespace {

__device__ int64_t offset4(const kprop_tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
#if KPROP_EXAMPLE_BUG == 3
  return ((i0 * t.shape[1] + i1) * t.shape[2] + i2) * t.shape[3] + i3;
#else
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3];
#endif
}

__device__ bool visible(const kprop_attention_fwd_args& a, int64_t b, int64_t i, int64_t j, int64_t nq,
                        int64_t nk) {
  switch (a.mask) {
    case KPROP_MASK_CAUSAL:
      return j <= i + nk - nq;  // bottom-right aligned
    case KPROP_MASK_KEY_PADDING:
      return j < static_cast<const int32_t*>(a.key_lengths.data)[b * a.key_lengths.strides[0]];
    case KPROP_MASK_BOOLEAN:
      return static_cast<const uint8_t*>(a.allowed.data)[b * a.allowed.strides[0] + i * a.allowed.strides[1] +
                                                         j * a.allowed.strides[2]] != 0;
    default:
      return true;
  }
}

// Element `at` of a tensor stored as T, in f32; and x stored as T (round to nearest even).
template <typename T>
__device__ float load(const void* data, int64_t at) {
  const T x = static_cast<const T*>(data)[at];
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return x;
}
template <typename T>
__device__ void store(void* data, int64_t at, float x) {
  if constexpr (std::is_same_v<T, __half>)
    static_cast<T*>(data)[at] = __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    static_cast<T*>(data)[at] = __float2bfloat16_rn(x);
  else
    static_cast<T*>(data)[at] = x;
}

template <typename T>
__device__ float score(const kprop_attention_fwd_args& a, int64_t b, int64_t h, int64_t kv, int64_t i,
                       int64_t j, int64_t dim) {
  float dot = 0.f;
  for (int64_t d = 0; d < dim; ++d)
    dot += load<T>(a.q.data, offset4(a.q, b, h, i, d)) * load<T>(a.k.data, offset4(a.k, b, kv, j, d));
  return static_cast<float>(a.scale) * dot;
}

// The args struct travels by value (kernel parameters): its pointers are device pointers.
template <typename T>
__global__ void forward(kprop_attention_fwd_args a) {
  const int64_t batch = a.q.shape[0], hq = a.q.shape[1], nq = a.q.shape[2], dim = a.q.shape[3];
  const int64_t hkv = a.k.shape[1], nk = a.k.shape[2], group = hq / hkv;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= batch * hq * nq) return;
  const int64_t i = row % nq, h = (row / nq) % hq, b = row / (nq * hq), kv = h / group;
  float* lse = static_cast<float*>(a.lse.data);

  float m = -INFINITY;
  for (int64_t j = 0; j < nk; ++j)
    if (visible(a, b, i, j, nq, nk)) m = fmaxf(m, score<T>(a, b, h, kv, i, j, dim));
  float l = 0.f;
  for (int64_t j = 0; j < nk; ++j)
    if (visible(a, b, i, j, nq, nk)) l += expf(score<T>(a, b, h, kv, i, j, dim) - m);
  const int64_t lse_at = b * a.lse.strides[0] + h * a.lse.strides[1] + i * a.lse.strides[2];
#if KPROP_EXAMPLE_BUG == 1
  const bool empty = false;
#else
  const bool empty = l == 0.f;  // a fully masked row: O = 0, LSE = -inf
#endif
  for (int64_t d = 0; d < dim; ++d) {
    float acc = 0.f;
    for (int64_t j = 0; j < nk; ++j)
      if (visible(a, b, i, j, nq, nk))
        acc += expf(score<T>(a, b, h, kv, i, j, dim) - m) * load<T>(a.v.data, offset4(a.v, b, kv, j, d));
    store<T>(a.o.data, offset4(a.o, b, h, i, d), empty ? 0.f : acc / l);
  }
  lse[lse_at] = empty ? -INFINITY : m + logf(l);
#if KPROP_EXAMPLE_BUG == 2
  if (row == 0) store<T>(a.o.data, int64_t(1) << 40, 0.f);  // 4 TiB past O: no such address
#endif
}

}  // namespace

KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args* args, char* error, size_t error_size) {
  if (args->q.dtype != KPROP_F32 && args->q.dtype != KPROP_F16 && args->q.dtype != KPROP_BF16) {
    std::snprintf(error, error_size, "this CUDA example takes f32, f16 and bf16 tensors (dtype %d)",
                  args->q.dtype);
    return KPROP_UNSUPPORTED;
  }
  if (args->q.device != KPROP_CUDA) {
    std::snprintf(error, error_size, "expected device tensors (kprop_op_device)");
    return KPROP_ERROR;
  }
  const int64_t rows = args->q.shape[0] * args->q.shape[1] * args->q.shape[2];
  if (rows == 0) return KPROP_OK;  // nothing to compute; a grid of 0 blocks is a launch error
  const int threads = 128;
  const unsigned blocks = static_cast<unsigned>((rows + threads - 1) / threads);
  if (args->q.dtype == KPROP_F16)
    forward<__half><<<blocks, threads>>>(*args);
  else if (args->q.dtype == KPROP_BF16)
    forward<__nv_bfloat16><<<blocks, threads>>>(*args);
  else
    forward<float><<<blocks, threads>>>(*args);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::snprintf(error, error_size, "launch failed: %s", cudaGetErrorString(e));
    return KPROP_ERROR;
  }
  return KPROP_OK;  // kprop synchronizes and checks for errors in the kernel
}
