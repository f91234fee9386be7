// Flash attention backward (attention.bwd) on a CUDA device. Two layers, as
// kernels/layernorm/layernorm_cuda.h:
//  * cuda_bwd_raw: host arrays in, host arrays out, implemented in
//    attention_bwd_cuda.cu. Plain C++17, no kprop, RapidCheck or yaml headers.
//  * cuda_backward(Case): the Case -> BwdResult wrapper
//    (attention_bwd_cuda.cpp), host compiler only; declared in attention.h.
// Both exist only when the family is built with CUDA (KPROP_HAVE_CUDA);
// registration turns "no device" into kprop::TargetUnavailable (skipped).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention/attention_cuda.h"  // cuda_raw::Half, Mask, TcMask

namespace kprop::attention::cuda_bwd_raw {

// Number of CUDA devices; 0 when there is none or the runtime reports an
// error (no driver, insufficient driver). Cached after the first call.
int device_count();

struct Dims {
  int batch, heads_q, heads_kv, nq, nk, dim;
  int block_q, block_k;  // tile sizes (clamped to nq, nk on the device)
};
// The contract's masks: the forward's (attention_cuda.h).
using cuda_raw::Mask;

// Forward (O, LSE), D = rowsum(dO ⊙ O), then dQ, dK, dV, on device 0 in the
// precision T. Sizes from the contract: q, d_out, o, dq [B,Hq,Nq,D]; k, v,
// dk, dv [B,Hkv,Nk,D]; lse, d [B,Hq,Nq]. Returns the largest per-block
// shared-memory scratch in bytes (the kernels' working set; nothing
// Nq×Nk is ever allocated). Throws std::runtime_error without a device, on
// tiles that do not fit in shared memory, or on any CUDA error.
size_t backward(const Dims& dims, const Mask& mask, float scale, const float* q, const float* k,
                const float* v, const float* d_out, float* o, float* lse, float* d, float* dq, float* dk,
                float* dv);
size_t backward(const Dims& dims, const Mask& mask, double scale, const double* q, const double* k,
                const double* v, const double* d_out, double* o, double* lse, double* d, double* dq,
                double* dk, double* dv);

// ---------------------------------------------------------------- f16 / bf16
// The tensor-core backward (attention_bwd_cuda_tc.cu): WMMA 16×16×16 with f32
// accumulation, 64×64 tiles, D = 64 or 128, masks none / causal
// (bottom-right) / key_padding, GQA; P and dS rounded to the dtype before
// their products, σ applied once, gradients rounded to nearest at the store.
// Deterministic (no atomics). Device pointers: q, k, v, d_out and o (16-bit
// values of `type`, 16-byte aligned; o as the tensor-core forward stored
// it), lse [B, Hq, Nq] f32 (natural log, -inf on a fully masked row) in;
// d [B, Hq, Nq] f32 and dq [B, Hq, Nq, D], dk, dv [B, Hkv, Nk, D] (16-bit)
// out.
struct TcBwdParams {
  cuda_raw::Half type = cuda_raw::Half::f16;
  int batch = 1, heads_q = 1, heads_kv = 1, nq = 1, nk = 1, dim = 64;
  cuda_raw::TcMask mask = cuda_raw::TcMask::none;
  float scale = 0;  // 0: 1/sqrt(D), as the forward
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* d_out = nullptr;
  const void* o = nullptr;
  const float* lse = nullptr;
  const int* key_lengths = nullptr;  // device [batch], key_padding only
  float* d = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  // The walked tiles copied by cp.async one step ahead (double-buffered);
  // false: loaded synchronously (the benchmark compares the two).
  bool pipelined = true;
};
// Is the shape supported? The reason in `why` otherwise.
bool tc_backward_supported(const TcBwdParams& p, const char** why);
// Launches the D pre-pass, dK/dV and dQ kernels on `stream` (a
// cudaStream_t; nullptr: the default stream), no synchronization. Returns
// the shared memory one block uses. Throws std::runtime_error on an
// unsupported shape or a launch error.
size_t tc_backward_async(const TcBwdParams& p, void* stream);

// Host convenience (the spec's f16/bf16 cases, tests): inputs as floats
// already exact in `type`; runs the tensor-core forward (O, LSE) and the
// backward on device 0, synchronously; outputs as floats (O, dQ, dK, dV
// rounded to `type` by the kernels; LSE and D in f32). Returns the shared
// memory one backward block uses.
struct TcBwdHost {
  cuda_raw::Half type = cuda_raw::Half::f16;
  int batch = 1, heads_q = 1, heads_kv = 1, nq = 1, nk = 1, dim = 64;
  cuda_raw::TcMask mask = cuda_raw::TcMask::none;
  const int* key_lengths = nullptr;  // host [batch], key_padding only
  float scale = 0;
};
size_t tc_backward_host(const TcBwdHost& a, const float* q, const float* k, const float* v,
                        const float* d_out, float* o, float* lse, float* d, float* dq, float* dk, float* dv);

}  // namespace kprop::attention::cuda_bwd_raw
