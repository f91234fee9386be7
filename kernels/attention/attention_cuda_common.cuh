// Device helpers shared by the CUDA attention kernels (nvcc only, C++17):
// the tensor-core primitives (ldmatrix, mma.sync m16n8k16, cp.async) as
// inline PTX and the XOR swizzle of [rows][D] 16-bit tiles; the error check
// and buffers are kernels/cuda_support.cuh's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda_support.cuh"

namespace kprop::attention::cuda_detail {

using cuda_support::check;
using cuda_support::DeviceBuffer;

// Tile element (row, 16-byte chunk) of a [rows][D] tile of 16-bit values:
// chunk c of row r lives at chunk c ^ (r & 7), so the 8 rows one ldmatrix
// phase reads at the same logical chunk hit 8 different bank groups.
template <int D>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; src_bytes = 0 writes zeros.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a·b, m16n8k16, row-major A, column-major B, f32 accumulators.
template <typename Elem>
struct Mma;
template <>
struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};
template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

// Arguments of the tensor-core kernels (attention_cuda.cu, attention_cuda_wgmma.cu).
struct TcArgs {
  int hq, hkv, nq, nk, mask, offset;  // mask: 0 none, 1 causal, 2 key_padding; offset = Nk − Nq
  const int* key_lengths;
  float scale_log2;  // scale · log2 e
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
};

// attention_cuda_wgmma.cu: the sm_90a kernel (Bq = 128: two warpgroups of
// 64 rows, Bk = 64). wgmma_available: this build holds its sm_90a code and
// device 0 runs it (probed once); wgmma_launch throws where it does not.
bool wgmma_available();
// min_blocks: 1 or 2 (0: 2), the blocks per SM the registers are budgeted for.
void wgmma_launch(bool bf16, int dim, int batch, int min_blocks, const TcArgs& a, cudaStream_t stream);
// The warp-specialized sm_90a kernel (a TMA producer warpgroup, two
// consumer warpgroups of 64 rows; Bk = block_k, 64 or 128; pingpong: the
// consumers take turns issuing their GEMMs). Same availability as wgmma.
void ws_launch(bool bf16, int dim, int batch, int block_k, bool pingpong, const TcArgs& a,
               cudaStream_t stream);

}  // namespace kprop::attention::cuda_detail
