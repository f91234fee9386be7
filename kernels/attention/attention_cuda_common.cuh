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

// Copies rows [row0, row0 + kRows) of a [n][D] tensor in global memory to
// shared memory by 16-byte cp.async, the chunk of row r holding its columns
// 8·ch … 8·ch + 7 to tile + at(r, ch) (the kernel's layout: swizzle, panels);
// rows at or past n are zero-filled.
template <typename Elem, int D, int kRows, int kThreads, typename At>
__device__ __forceinline__ void load_rows(Elem* tile, const Elem* g, int row0, int n, At at) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const bool valid = row0 + r < n;
    const Elem* src = valid ? g + size_t(row0 + r) * D + ch * 8 : g;
    cp_async16(tile + at(r, ch), src, valid ? 16 : 0);
  }
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
// One specialisation per type: TYPE in the instruction, PAIR the packed
// two-element type, PACK its round-to-nearest conversion from two floats.
#define KPROP_MMA(ELEM, TYPE, PAIR, PACK)                                                          \
  template <>                                                                                      \
  struct Mma<ELEM> {                                                                               \
    static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, \
                                               uint32_t b1) {                                      \
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE                          \
                   ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                  \
                   : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                \
    }                                                                                              \
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {                          \
      PAIR h = PACK(lo, hi);                                                                       \
      return *reinterpret_cast<uint32_t*>(&h);                                                     \
    }                                                                                              \
  };
KPROP_MMA(__half, "f16", __half2, __floats2half2_rn)
KPROP_MMA(__nv_bfloat16, "bf16", __nv_bfloat162, __floats2bfloat162_rn)
#undef KPROP_MMA

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

// What one block of the tensor-core kernels works on: query tile qt (the
// longest causal tiles first) of head h in batch b, its first row i0 (Bq
// rows), the kv head kvh it reads (GQA), this head's Q and the kv head's K
// and V in global memory (D columns), and its keys: [0, key_limit) are not
// padding, [0, key_end) are also not hidden by the causal mask from the
// tile's last row.
template <typename Elem>
struct TcTile {
  int qt, h, b, i0, kvh, key_limit, key_end;
  const Elem *qg, *kg, *vg;
  __device__ __forceinline__ TcTile(const TcArgs& a, int Bq, int D)
      : qt(gridDim.x - 1 - blockIdx.x),
        h(blockIdx.y),
        b(blockIdx.z),
        i0(qt * Bq),
        kvh(h / (a.hq / a.hkv)),
        key_limit(a.mask == 2 ? min(a.key_lengths[b], a.nk) : a.nk),
        key_end(a.mask == 1 ? max(0, min(key_limit, i0 + Bq + a.offset)) : key_limit),
        qg(static_cast<const Elem*>(a.q) + (size_t(b) * a.hq + h) * size_t(a.nq) * D),
        kg(static_cast<const Elem*>(a.k) + (size_t(b) * a.hkv + kvh) * size_t(a.nk) * D),
        vg(static_cast<const Elem*>(a.v) + (size_t(b) * a.hkv + kvh) * size_t(a.nk) * D) {}
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
