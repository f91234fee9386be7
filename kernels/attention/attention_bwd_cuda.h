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

namespace kprop::attention::cuda_bwd_raw {

// Number of CUDA devices; 0 when there is none or the runtime reports an
// error (no driver, insufficient driver). Cached after the first call.
int device_count();

struct Dims {
  int batch, heads_q, heads_kv, nq, nk, dim;
  int block_q, block_k;  // tile sizes (clamped to nq, nk on the device)
};
// The contract's masks (attention.h): kind 0 none, 1 causal (query i sees
// key j iff j <= i + causal_offset), 2 key_padding (key_lengths[b]),
// 3 boolean (allowed[b][i][j]). Host pointers; null where the kind needs none.
struct Mask {
  int kind = 0;
  int causal_offset = 0;
  const int* key_lengths = nullptr;
  const uint8_t* allowed = nullptr;
};

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

}  // namespace kprop::attention::cuda_bwd_raw
