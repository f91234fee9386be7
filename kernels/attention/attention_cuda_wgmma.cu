// The Hopper (sm_90a) tensor-core forward: wgmma instead of mma.sync.
//
// Block = two warpgroups (256 threads), Bq = 128 query rows (64 per
// warpgroup), Bk = 64 keys per tile, D = 64 or 128, f16 or bf16 in, f32
// accumulators. Tiles sit in shared memory in the 128-byte-swizzle layout
// wgmma reads: each [rows][D] tile is stored as D/64 panels of [rows][64]
// (128-byte rows), 16-byte chunk c of row r at chunk c ^ (r & 7), panels
// 1024-byte aligned. K and V go through two buffers by cp.async (the next
// tile loads while this one computes); after each copy lands, every thread
// fences the async proxy before the barrier (cp.async writes are generic-
// proxy stores that wgmma reads through the async proxy).
// Per tile: S = Q·Kᵀ by wgmma m64n64k16 (Q and K both K-major from shared
// memory); the online softmax of the mma.sync kernel on the accumulator
// fragments (same per-warp layout as m16n8: rows g and g + 8, columns
// 2t, 2t + 1 of each 8-column block); O += P·V by wgmma m64nDk16 with P
// from registers (the A fragment layout of m16n8k16, per warp) and V from
// shared memory transposed (MN-major: LBO = the panel stride along D, SBO =
// 1024 bytes per 8 keys). Same masks, empty-row handling and outputs as the
// mma.sync kernel. The kernel body exists only in the sm_90a image
// (__CUDA_ARCH_FEAT_SM90_ALL); a probe kernel tells the host whether the
// image the driver loaded has it.
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>

#include "kernels/attention/attention_cuda_common.cuh"

namespace kprop::attention::cuda_detail {
namespace {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KPROP_WGMMA 1
#endif

#ifdef KPROP_WGMMA
// wgmma wrappers (written out by a small script: one per shape and type).
// ss: A and B from shared memory (K-major both); rs: A from registers, B
// from shared memory transposed (MN-major).
__device__ __forceinline__ void wgmma_ss_f16_n64(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%"
      "27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_ss_bf16_n64(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%"
      "27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_rs_f16_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                 int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%"
      "27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_rs_bf16_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                  int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%"
      "27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_rs_f16_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                                  int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%"
      "27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%"
      "52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_rs_bf16_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                                   int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%"
      "27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%"
      "52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from touching accumulators between issue and wait.
template <int N>
__device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle.
__device__ __forceinline__ uint64_t make_desc(const void* p, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  const uint32_t addr = smem_addr(p);
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFFu) << 32) | (uint64_t(1) << 62);
}

// Element index of (row, 16-byte chunk) in a [kRows][D] tile stored as 64-wide panels.
template <int kRows>
__device__ __forceinline__ int panel_index(int row, int chunk) {
  return (chunk >> 3) * (kRows * 64) + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

template <typename Elem, int D, int kRows, int kThreads>
__device__ __forceinline__ void load_panels(Elem* tile, const Elem* g, int row0, int n) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const bool valid = row0 + r < n;
    const Elem* src = valid ? g + size_t(row0 + r) * D + ch * 8 : g;
    cp_async16(tile + panel_index<kRows>(r, ch), src, valid ? 16 : 0);
  }
}

template <typename Elem>
struct Wg;
template <>
struct Wg<__half> {
  static __device__ __forceinline__ void s(float (&d)[32], uint64_t a, uint64_t b, int sc) {
    wgmma_ss_f16_n64(d, a, b, sc);
  }
  static __device__ __forceinline__ void pv(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_f16_n64(d, a, b, 1);
  }
  static __device__ __forceinline__ void pv(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_f16_n128(d, a, b, 1);
  }
};
template <>
struct Wg<__nv_bfloat16> {
  static __device__ __forceinline__ void s(float (&d)[32], uint64_t a, uint64_t b, int sc) {
    wgmma_ss_bf16_n64(d, a, b, sc);
  }
  static __device__ __forceinline__ void pv(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_bf16_n64(d, a, b, 1);
  }
  static __device__ __forceinline__ void pv(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
    wgmma_rs_bf16_n128(d, a, b, 1);
  }
};
#endif  // KPROP_WGMMA

constexpr int kWgBq = 128, kWgBk = 64, kWgThreads = 256;

template <int D>
constexpr size_t wg_smem_bytes() {
  return size_t(kWgBq * D + 4 * kWgBk * D) * 2 + 1024;  // + alignment slack
}

// kMinBlocks: blocks per SM the register budget is cut for (2: at most 128
// registers, so a second block's GEMMs can run while this one is in softmax).
template <typename Elem, int D, int kMinBlocks>
__global__ void __launch_bounds__(kWgThreads, kMinBlocks) wg_forward_kernel(TcArgs a) {
#ifdef KPROP_WGMMA
  using M = Mma<Elem>;
  constexpr int Bq = kWgBq, Bk = kWgBk, kSt = Bk / 8;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = smem_addr(smem_raw);
  Elem* qs = reinterpret_cast<Elem*>(smem_raw + (((base + 1023u) & ~1023u) - base));
  Elem* ks = qs + Bq * D;      // two buffers of Bk × D
  Elem* vs = ks + 2 * Bk * D;  // two buffers of Bk × D
  const float neg_inf = -INFINITY;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wg = warp / 4;
  const int qt = gridDim.x - 1 - blockIdx.x;  // the longest causal tiles first
  const int h = blockIdx.y, b = blockIdx.z, i0 = qt * Bq;
  const int kvh = h / (a.hq / a.hkv);
  const Elem* qg = static_cast<const Elem*>(a.q) + (size_t(b) * a.hq + h) * size_t(a.nq) * D;
  const Elem* kg = static_cast<const Elem*>(a.k) + (size_t(b) * a.hkv + kvh) * size_t(a.nk) * D;
  const Elem* vg = static_cast<const Elem*>(a.v) + (size_t(b) * a.hkv + kvh) * size_t(a.nk) * D;

  const int key_limit = a.mask == 2 ? min(a.key_lengths[b], a.nk) : a.nk;
  int key_end = key_limit;
  if (a.mask == 1) key_end = max(0, min(key_end, i0 + Bq + a.offset));
  const int n_tiles = (key_end + Bk - 1) / Bk;

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m[2] = {neg_inf, neg_inf}, l[2] = {0.f, 0.f};

  if (n_tiles > 0) {
    load_panels<Elem, D, Bq, kWgThreads>(qs, qg, i0, a.nq);
    load_panels<Elem, D, Bk, kWgThreads>(ks, kg, 0, a.nk);
    load_panels<Elem, D, Bk, kWgThreads>(vs, vg, 0, a.nk);
    cp_async_commit();
  }
  const int row_a = i0 + wg * 64 + (warp % 4) * 16 + g;  // rows row_a and row_a + 8
  for (int tile = 0; tile < n_tiles; ++tile) {
    const int buf = tile & 1, j0 = tile * Bk;
    if (tile + 1 < n_tiles) {
      load_panels<Elem, D, Bk, kWgThreads>(ks + (buf ^ 1) * Bk * D, kg, j0 + Bk, a.nk);
      load_panels<Elem, D, Bk, kWgThreads>(vs + (buf ^ 1) * Bk * D, vg, j0 + Bk, a.nk);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();
    __syncthreads();
    const Elem* kt = ks + buf * Bk * D;
    const Elem* vt = vs + buf * Bk * D;

    // S = Q Kᵀ: this warpgroup's 64 rows × 64 keys.
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.f;
    pin(s);
    pin(o);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = make_desc(qs + (kk / 4) * (Bq * 64) + wg * 64 * 64 + (kk % 4) * 16, 16, 1024);
      const uint64_t db = make_desc(kt + (kk / 4) * (Bk * 64) + (kk % 4) * 16, 16, 1024);
      Wg<Elem>::s(s, da, db, kk > 0 ? 1 : 0);
    }
    wg_commit();
    wg_wait0();
    pin(s);

    const bool need_mask = j0 + Bk > key_limit || (a.mask == 1 && j0 + Bk - 1 > i0 + a.offset);
#pragma unroll
    for (int n = 0; n < kSt; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n * 4 + e] * a.scale_log2;
        if (need_mask) {
          const int col = j0 + n * 8 + 2 * t + (e & 1), row = row_a + (e / 2) * 8;
          if (col >= key_limit || (a.mask == 1 && col > row + a.offset)) x = neg_inf;
        }
        s[n * 4 + e] = x;
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int n = 0; n < kSt; ++n) mx = fmaxf(mx, fmaxf(s[n * 4 + 2 * r], s[n * 4 + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base_m = mx == neg_inf ? 0.f : mx;  // nothing visible yet: every P is exp2(−inf) = 0
      const float corr = exp2f(m[r] - base_m);        // m = −inf: 0
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kSt; ++n) {
        s[n * 4 + 2 * r] = exp2f(s[n * 4 + 2 * r] - base_m);
        s[n * 4 + 2 * r + 1] = exp2f(s[n * 4 + 2 * r + 1] - base_m);
        sum += s[n * 4 + 2 * r] + s[n * 4 + 2 * r + 1];
      }
      l[r] = l[r] * corr + sum;
      m[r] = mx;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) o[n * 4 + 2 * r] *= corr, o[n * 4 + 2 * r + 1] *= corr;
    }

    // O += P V.
    uint32_t pa[Bk / 16][4];
#pragma unroll
    for (int kk = 0; kk < Bk / 16; ++kk) {
      pa[kk][0] = M::pack(s[(2 * kk) * 4 + 0], s[(2 * kk) * 4 + 1]);
      pa[kk][1] = M::pack(s[(2 * kk) * 4 + 2], s[(2 * kk) * 4 + 3]);
      pa[kk][2] = M::pack(s[(2 * kk + 1) * 4 + 0], s[(2 * kk + 1) * 4 + 1]);
      pa[kk][3] = M::pack(s[(2 * kk + 1) * 4 + 2], s[(2 * kk + 1) * 4 + 3]);
    }
    pin(o);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < Bk / 16; ++kk)
      Wg<Elem>::pv(o, pa[kk], make_desc(vt + kk * 16 * 64, Bk * 64 * 2, 1024));
    wg_commit();
    wg_wait0();
    pin(o);
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }

  Elem* og = static_cast<Elem*>(a.o) + (size_t(b) * a.hq + h) * size_t(a.nq) * D;
  float* lg = a.lse + (size_t(b) * a.hq + h) * size_t(a.nq);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float lr = l[r];
    lr += __shfl_xor_sync(0xffffffffu, lr, 1);
    lr += __shfl_xor_sync(0xffffffffu, lr, 2);
    const int row = row_a + r * 8;
    if (row >= a.nq) continue;
    const float inv = lr > 0.f ? 1.f / lr : 0.f;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const uint32_t packed = M::pack(o[n * 4 + 2 * r] * inv, o[n * 4 + 2 * r + 1] * inv);
      *reinterpret_cast<uint32_t*>(og + size_t(row) * D + n * 8 + 2 * t) = packed;
    }
    if (t == 0) lg[row] = lr > 0.f ? m[r] * 0.69314718055994531f + logf(lr) : neg_inf;
  }
#else
  (void)a;
  __trap();
#endif
}

__global__ void wg_probe(int* flag) {
#ifdef KPROP_WGMMA
  *flag = 1;
#else
  *flag = 0;
#endif
}

template <typename Elem, int D, int kMinBlocks>
void launch(int batch, const TcArgs& a, cudaStream_t stream) {
  constexpr size_t smem = wg_smem_bytes<D>();
  static const bool configured = [] {
    check(cudaFuncSetAttribute(wg_forward_kernel<Elem, D, kMinBlocks>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "cudaFuncSetAttribute");
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((a.nq + kWgBq - 1) / kWgBq), unsigned(a.hq), unsigned(batch));
  wg_forward_kernel<Elem, D, kMinBlocks><<<grid, kWgThreads, smem, stream>>>(a);
  check(cudaGetLastError(), "attention wgmma forward launch");
}

}  // namespace

bool wgmma_available() {
  static const bool ok = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return false;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9 || prop.minor != 0) return false;
    int* d = nullptr;
    int flag = 0;
    if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return false;
    wg_probe<<<1, 1>>>(d);
    const bool ran = cudaGetLastError() == cudaSuccess &&
                     cudaMemcpy(&flag, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(d);
    return ran && flag == 1;
  }();
  return ok;
}

template <int kMinBlocks>
void launch_typed(bool bf16, int dim, int batch, const TcArgs& a, cudaStream_t stream) {
  if (dim == 64)
    bf16 ? launch<__nv_bfloat16, 64, kMinBlocks>(batch, a, stream)
         : launch<__half, 64, kMinBlocks>(batch, a, stream);
  else
    bf16 ? launch<__nv_bfloat16, 128, kMinBlocks>(batch, a, stream)
         : launch<__half, 128, kMinBlocks>(batch, a, stream);
}

void wgmma_launch(bool bf16, int dim, int batch, int min_blocks, const TcArgs& a, cudaStream_t stream) {
  if (!wgmma_available())
    throw std::runtime_error("attention wgmma forward: needs an sm_90 device and the sm_90a build");
  if (min_blocks == 1)
    launch_typed<1>(bf16, dim, batch, a, stream);
  else
    launch_typed<2>(bf16, dim, batch, a, stream);
}

}  // namespace kprop::attention::cuda_detail
