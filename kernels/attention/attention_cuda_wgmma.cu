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
#include <cuda.h>  // CUtensorMap (the encoder itself comes through the runtime: no libcuda link)
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/attention/attention_cuda_common.cuh"

namespace kprop::attention::cuda_detail {
namespace {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KPROP_WGMMA 1
#endif

#ifdef KPROP_WGMMA
// wgmma wrappers, one per shape and type. ss: A and B from shared memory
// (K-major both); rs: A from registers, B from shared memory transposed
// (MN-major). KPROP_ACC32/64: the accumulator registers as asm operands
// %0 … %31 / %63 (and their list in the instruction).
#define KPROP_ACC32_LIST                                                                                     \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%" \
  "28,%29,%30,%31}"
#define KPROP_ACC64_LIST                                                                                     \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%" \
  "28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%" \
  "54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define KPROP_ACC32(d)                                                                                      \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),            \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),            \
      "+f"(d[30]), "+f"(d[31])
#define KPROP_ACC64(d)                                                                                       \
  KPROP_ACC32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), \
      "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),             \
      "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]),             \
      "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),             \
      "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KPROP_WGMMA_OP(shape, type) "wgmma.mma_async.sync.aligned." shape ".f32." type "." type " "
#define KPROP_PRED(n) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #n ", 0;\n"
// One wrapper per type and width N (f16 and bf16 alike): ss takes A's and B's
// shared-memory descriptors, rs A's four registers. PRED: the operand
// number of scale_d (after the N/2 accumulators and the A/B operands); OPS:
// the instruction's operands after the accumulators.
#define KPROP_WGMMA_SS(TYPE, N, ACC, PRED, OPS)                                                       \
  __device__ __forceinline__ void wgmma_ss_##TYPE##_n##N(float(&d)[N / 2], uint64_t da, uint64_t db,  \
                                                         int scale_d) {                               \
    asm volatile(KPROP_PRED(PRED) KPROP_WGMMA_OP("m64n" #N "k16", #TYPE) ACC##_LIST ", " OPS ";\n}\n" \
                 : ACC(d)                                                                             \
                 : "l"(da), "l"(db), "r"(scale_d));                                                   \
  }
#define KPROP_WGMMA_RS(TYPE, N, ACC, PRED, OPS)                                                       \
  __device__ __forceinline__ void wgmma_rs_##TYPE##_n##N(float(&d)[N / 2], const uint32_t(&a)[4],     \
                                                         uint64_t db, int scale_d) {                  \
    asm volatile(KPROP_PRED(PRED) KPROP_WGMMA_OP("m64n" #N "k16", #TYPE) ACC##_LIST ", " OPS ";\n}\n" \
                 : ACC(d)                                                                             \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));                \
  }
KPROP_WGMMA_SS(f16, 64, KPROP_ACC32, 34, "%32, %33, p, 1, 1, 0, 0")
KPROP_WGMMA_SS(bf16, 64, KPROP_ACC32, 34, "%32, %33, p, 1, 1, 0, 0")
KPROP_WGMMA_SS(f16, 128, KPROP_ACC64, 66, "%64, %65, p, 1, 1, 0, 0")
KPROP_WGMMA_SS(bf16, 128, KPROP_ACC64, 66, "%64, %65, p, 1, 1, 0, 0")
KPROP_WGMMA_RS(f16, 64, KPROP_ACC32, 37, "{%32,%33,%34,%35}, %36, p, 1, 1, 1")
KPROP_WGMMA_RS(bf16, 64, KPROP_ACC32, 37, "{%32,%33,%34,%35}, %36, p, 1, 1, 1")
KPROP_WGMMA_RS(f16, 128, KPROP_ACC64, 69, "{%64,%65,%66,%67}, %68, p, 1, 1, 1")
KPROP_WGMMA_RS(bf16, 128, KPROP_ACC64, 69, "{%64,%65,%66,%67}, %68, p, 1, 1, 1")
#undef KPROP_WGMMA_SS
#undef KPROP_WGMMA_RS

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

// Keeps register A fragments alive (unchanged) until the wgmma reading them is waited for.
template <int N>
__device__ __forceinline__ void pin(uint32_t (&p)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(p[i][j])::"memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
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

// Rows [row0, row0 + kRows) of a [n][D] tensor into 64-wide panels.
template <typename Elem, int D, int kRows, int kThreads>
__device__ __forceinline__ void load_panels(Elem* tile, const Elem* g, int row0, int n) {
  load_rows<Elem, D, kRows, kThreads>(tile, g, row0, n,
                                      [](int r, int ch) { return panel_index<kRows>(r, ch); });
}

template <typename Elem>
struct Wg;
// The S = QKᵀ (ss) and O += PV (rs) GEMMs of one warpgroup, by element type
// and accumulator width (32: n64, 64: n128).
#define KPROP_WG(ELEM, TYPE)                                                                        \
  template <>                                                                                       \
  struct Wg<ELEM> {                                                                                 \
    static __device__ __forceinline__ void s(float (&d)[32], uint64_t a, uint64_t b, int sc) {      \
      wgmma_ss_##TYPE##_n64(d, a, b, sc);                                                           \
    }                                                                                               \
    static __device__ __forceinline__ void s(float (&d)[64], uint64_t a, uint64_t b, int sc) {      \
      wgmma_ss_##TYPE##_n128(d, a, b, sc);                                                          \
    }                                                                                               \
    static __device__ __forceinline__ void pv(float (&d)[32], const uint32_t (&a)[4], uint64_t b) { \
      wgmma_rs_##TYPE##_n64(d, a, b, 1);                                                            \
    }                                                                                               \
    static __device__ __forceinline__ void pv(float (&d)[64], const uint32_t (&a)[4], uint64_t b) { \
      wgmma_rs_##TYPE##_n128(d, a, b, 1);                                                           \
    }                                                                                               \
  };
KPROP_WG(__half, f16)
KPROP_WG(__nv_bfloat16, bf16)
#undef KPROP_WG

// The two GEMMs of one warpgroup per key tile, fenced and committed, not
// waited for: S = Q·Kᵀ for warpgroup w's 64 rows of the Q panels qs (Bq
// rows) against the key tile kt, and O += P·V from P's packed fragments pa
// and the value tile vt (Bk keys each).
template <typename Elem, int D, int Bq, int Bk, int N>
__device__ __forceinline__ void wg_issue_qk(float (&s)[N], const Elem* qs, const Elem* kt, int w) {
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t da = make_desc(qs + (kk / 4) * (Bq * 64) + w * 64 * 64 + (kk % 4) * 16, 16, 1024);
    const uint64_t db = make_desc(kt + (kk / 4) * (Bk * 64) + (kk % 4) * 16, 16, 1024);
    Wg<Elem>::s(s, da, db, kk > 0 ? 1 : 0);
  }
  wg_commit();
}
template <typename Elem, int Bk, int N>
__device__ __forceinline__ void wg_issue_pv(float (&o)[N], const uint32_t (&pa)[Bk / 16][4], const Elem* vt) {
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < Bk / 16; ++kk)
    Wg<Elem>::pv(o, pa[kk], make_desc(vt + kk * 16 * 64, Bk * 64 * 2, 1024));
  wg_commit();
}

// One S tile's online-softmax step on this thread's accumulator fragment
// (the m16n8 layout per warp: rows row_a and row_a + 8, columns j0 + 8n + 2t
// and + 1 of each of the kSt 8-column blocks). Scales to log2 units, masks
// (key_limit; causal with the offset; first_row: the block's first query
// row, for the test whether the tile needs masking at all), updates the running max m and sum l,
// leaves P = exp2(S − m) in s and returns in corr the factor the O rows
// must be multiplied by (exp2(m_old − m_new); 0 while nothing was visible).
// 2^x by the special-function unit alone (ex2.approx.ftz: 2^-22 relative,
// subnormal results flushed to 0, which P·V and l cannot tell from the f16
// or bf16 rounding of P that follows); exp2f adds a range fix-up for
// subnormals around the same instruction.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int kSt>
__device__ __forceinline__ void softmax_step(float (&s)[kSt * 4], float (&m)[2], float (&l)[2],
                                             float (&corr)[2], const TcArgs& a, int j0, int first_row,
                                             int row_a, int key_limit, int t) {
  const float neg_inf = -INFINITY;
  const bool need_mask = j0 + kSt * 8 > key_limit || (a.mask == 1 && j0 + kSt * 8 - 1 > first_row + a.offset);
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
    corr[r] = fast_exp2(m[r] - base_m);             // m = −inf: 0
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < kSt; ++n) {
      s[n * 4 + 2 * r] = fast_exp2(s[n * 4 + 2 * r] - base_m);
      s[n * 4 + 2 * r + 1] = fast_exp2(s[n * 4 + 2 * r + 1] - base_m);
      sum += s[n * 4 + 2 * r] + s[n * 4 + 2 * r + 1];
    }
    l[r] = l[r] * corr[r] + sum;
    m[r] = mx;
  }
}

template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 2], const float (&corr)[2]) {
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int r = 0; r < 2; ++r) o[n * 4 + 2 * r] *= corr[r], o[n * 4 + 2 * r + 1] *= corr[r];
}

// P (the softmax's s, f32) as wgmma A fragments in the 16-bit type, one per 16 keys.
template <typename Elem, int kSt>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[kSt / 2][4], const float (&s)[kSt * 4]) {
  using M = Mma<Elem>;
#pragma unroll
  for (int kk = 0; kk < kSt / 2; ++kk) {
    pa[kk][0] = M::pack(s[(2 * kk) * 4 + 0], s[(2 * kk) * 4 + 1]);
    pa[kk][1] = M::pack(s[(2 * kk) * 4 + 2], s[(2 * kk) * 4 + 3]);
    pa[kk][2] = M::pack(s[(2 * kk + 1) * 4 + 0], s[(2 * kk + 1) * 4 + 1]);
    pa[kk][3] = M::pack(s[(2 * kk + 1) * 4 + 2], s[(2 * kk + 1) * 4 + 3]);
  }
}

// O / l in the 16-bit type and LSE = m·ln 2 + ln l (−inf where l = 0, O = 0 there).
template <typename Elem, int D>
__device__ __forceinline__ void store_rows(const TcArgs& a, int b, int h, int row_a, int t,
                                           const float (&o)[D / 2], const float (&m)[2],
                                           const float (&l)[2]) {
  using M = Mma<Elem>;
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
    if (t == 0) lg[row] = lr > 0.f ? m[r] * 0.69314718055994531f + logf(lr) : -INFINITY;
  }
}
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
  constexpr int Bq = kWgBq, Bk = kWgBk, kSt = Bk / 8;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = smem_addr(smem_raw);
  Elem* qs = reinterpret_cast<Elem*>(smem_raw + (((base + 1023u) & ~1023u) - base));
  Elem* ks = qs + Bq * D;      // two buffers of Bk × D
  Elem* vs = ks + 2 * Bk * D;  // two buffers of Bk × D
  const float neg_inf = -INFINITY;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wg = warp / 4;
  const TcTile<Elem> blk(a, Bq, D);
  const int h = blk.h, b = blk.b, i0 = blk.i0, key_limit = blk.key_limit, key_end = blk.key_end;
  const Elem *qg = blk.qg, *kg = blk.kg, *vg = blk.vg;
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
    wg_issue_qk<Elem, D, Bq, Bk>(s, qs, kt, wg);
    wg_wait0();
    pin(s);

    float corr[2];
    softmax_step<kSt>(s, m, l, corr, a, j0, i0, row_a, key_limit, t);
    rescale<D>(o, corr);

    // O += P V.
    uint32_t pa[Bk / 16][4];
    pack_p<Elem, kSt>(pa, s);
    pin(o);
    wg_issue_pv<Elem, Bk>(o, pa, vt);
    wg_wait0();
    pin(o);
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }

  store_rows<Elem, D>(a, b, h, row_a, t, o, m, l);
#else
  (void)a;
  __trap();
#endif
}

// ------------------------------------------------------------ warp-specialized
// The FlashAttention-3 structure on the same tiles: warpgroup 0 is the
// producer (one thread issues TMA copies of Q once and of K and V per tile
// into two stages each, completing on mbarriers; the warpgroup gives its
// registers away with setmaxnreg), warpgroups 1 and 2 are consumers of 64
// query rows each. No __syncthreads in the loop: a consumer waits on the
// stage's `full` barrier and releases it on its `empty` barrier, so the two
// consumers drift apart and one's softmax runs while the other's GEMMs do.
// Inside a consumer the next tile's S = Q·Kᵀ is issued before this tile's
// P·V and runs during the softmax (intra-warpgroup overlap), and with
// kPingPong the two consumers take turns issuing their GEMMs (named
// barriers 1 and 2), so their softmaxes alternate with the other's GEMMs.
// TMA with the 128-byte swizzle writes exactly the panel layout above (a box
// of [rows][64] 16-bit values is one panel); rows past N (of this batch and
// head: the maps are 3-D, [B·H][N][D]) arrive as zeros.
#ifdef KPROP_WGMMA
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int x, int y, int z,
                                         uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, "
      "%5}], [%2];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(x), "r"(y), "r"(z)
      : "memory");
}
__device__ __forceinline__ void named_sync(int id) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void named_arrive(int id) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}
#endif  // KPROP_WGMMA

constexpr int kWsThreads = 384, kWsStages = 2;

template <int D, int Bk>
constexpr size_t ws_smem_bytes() {
  return size_t(kWgBq * D + 2 * kWsStages * Bk * D) * 2 + 1024;  // + alignment slack
}

template <typename Elem, int D, int Bk, bool kPingPong>
__global__ void __launch_bounds__(kWsThreads, 1)
    ws_forward_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                      const __grid_constant__ CUtensorMap tv, TcArgs a) {
#ifdef KPROP_WGMMA
  constexpr int Bq = kWgBq, kSt = Bk / 8, kPanels = D / 64, kS = kWsStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // q_full, then per stage k_full, v_full, k_empty, v_empty.
  __shared__ __align__(8) uint64_t bars[1 + 4 * kS];
  uint64_t* q_full = bars;
  uint64_t* k_full = bars + 1;
  uint64_t* v_full = bars + 1 + kS;
  uint64_t* k_empty = bars + 1 + 2 * kS;
  uint64_t* v_empty = bars + 1 + 3 * kS;
  const uint32_t base = smem_addr(smem_raw);
  Elem* qs = reinterpret_cast<Elem*>(smem_raw + (((base + 1023u) & ~1023u) - base));
  Elem* ks = qs + Bq * D;       // kS stages of Bk × D
  Elem* vs = ks + kS * Bk * D;  // kS stages of Bk × D

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const TcTile<Elem> blk(a, Bq, D);
  const int h = blk.h, b = blk.b, i0 = blk.i0, kvh = blk.kvh, key_limit = blk.key_limit,
            key_end = blk.key_end;
  const int n_tiles = (key_end + Bk - 1) / Bk;

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int st = 0; st < kS; ++st) {
      mbar_init(k_full + st, 1), mbar_init(v_full + st, 1);
      mbar_init(k_empty + st, 8), mbar_init(v_empty + st, 8);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp < 4) {  // ---------------------------------------------- producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == 0 && n_tiles > 0) {
      const int zq = b * a.hq + h, zkv = b * a.hkv + kvh;
      mbar_expect_tx(q_full, Bq * D * 2);
      for (int p = 0; p < kPanels; ++p) tma_load(qs + p * Bq * 64, &tq, p * 64, i0, zq, q_full);
      for (int tile = 0; tile < n_tiles; ++tile) {
        const int st = tile % kS;
        const uint32_t parity = ((tile / kS) & 1) ^ 1;  // the previous round's release
        Elem* kt = ks + st * Bk * D;
        Elem* vt = vs + st * Bk * D;
        if (tile >= kS) mbar_wait(k_empty + st, parity);
        mbar_expect_tx(k_full + st, Bk * D * 2);
        for (int p = 0; p < kPanels; ++p)
          tma_load(kt + p * Bk * 64, &tk, p * 64, tile * Bk, zkv, k_full + st);
        if (tile >= kS) mbar_wait(v_empty + st, parity);
        mbar_expect_tx(v_full + st, Bk * D * 2);
        for (int p = 0; p < kPanels; ++p)
          tma_load(vt + p * Bk * 64, &tv, p * 64, tile * Bk, zkv, v_full + st);
      }
    }
    return;
  }
  // ------------------------------------------------------------ consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
  const int cw = warp / 4 - 1;  // consumer 0 or 1: rows cw·64 … cw·64 + 63 of the block
  const int g = lane / 4, t = lane % 4;
  const int row_a = i0 + cw * 64 + (warp % 4) * 16 + g;  // rows row_a and row_a + 8
  // A stage is released once per warp, after the warp's wgmma.wait_group has
  // seen the warpgroup's GEMM that read it complete.
  auto release = [lane](uint64_t* bar) {
    if (lane == 0) mbar_arrive(bar);
  };
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, corr[2];

  if (n_tiles > 0) {
    auto issue_s = [&](float(&s)[kSt * 4], const Elem* kt) {
      pin(s);
      wg_issue_qk<Elem, D, Bq, Bk>(s, qs, kt, cw);
    };
    auto issue_pv = [&](uint32_t(&pa)[kSt / 2][4], const Elem* vt) {
      pin(o);
      wg_issue_pv<Elem, Bk>(o, pa, vt);
    };
    float s[kSt * 4];
    uint32_t pa[kSt / 2][4];
    mbar_wait(q_full, 0);
    mbar_wait(k_full, 0);
    issue_s(s, ks);
    wg_wait<0>();
    pin(s);
    release(k_empty);
    softmax_step<kSt>(s, m, l, corr, a, 0, i0, row_a, key_limit, t);  // O is 0: no rescale
    pack_p<Elem, kSt>(pa, s);
    if (kPingPong && cw == 1) named_arrive(1);  // consumer 0 issues first
    for (int tile = 1; tile < n_tiles; ++tile) {
      const int st = tile % kS, prev = (tile - 1) % kS;
      mbar_wait(k_full + st, (tile / kS) & 1);
      if (kPingPong) named_sync(1 + cw);
      issue_s(s, ks + st * Bk * D);  // S of this tile, while ...
      mbar_wait(v_full + prev, ((tile - 1) / kS) & 1);
      issue_pv(pa, vs + prev * Bk * D);  // ... the previous tile's P·V is queued behind it
      if (kPingPong) named_arrive(2 - cw);
      wg_wait<1>();  // S done; P·V may still run
      pin(s);
      release(k_empty + st);
      softmax_step<kSt>(s, m, l, corr, a, tile * Bk, i0, row_a, key_limit, t);
      wg_wait<0>();  // P·V done: O and the previous P may be touched again
      pin(o);
      pin(pa);
      release(v_empty + prev);
      rescale<D>(o, corr);
      pack_p<Elem, kSt>(pa, s);
    }
    const int last = (n_tiles - 1) % kS;
    mbar_wait(v_full + last, ((n_tiles - 1) / kS) & 1);
    issue_pv(pa, vs + last * Bk * D);
    wg_wait<0>();
    pin(o);
    pin(pa);
    release(v_empty + last);
    if (kPingPong && cw == 0) named_sync(1);  // the arrive consumer 1 made after its last issue
  }
  store_rows<Elem, D>(a, b, h, row_a, t, o, m, l);
#else
  (void)tq, (void)tk, (void)tv, (void)a;
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

// The driver's tensor-map encoder, reached through the runtime (so nothing
// links libcuda); null where the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// [heads][n][D] 16-bit values as TMA boxes of [box_rows][64] with the
// 128-byte swizzle (one panel each); rows past n read as zeros.
CUtensorMap panel_map(bool bf16, const void* base, int heads, int n, int dim, int box_rows) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr)
    throw std::runtime_error("attention wgmma_ws forward: the driver has no cuTensorMapEncodeTiled");
  CUtensorMap map{};
  const cuuint64_t dims[3] = {cuuint64_t(dim), cuuint64_t(n), cuuint64_t(heads)};
  const cuuint64_t strides[2] = {cuuint64_t(dim) * 2, cuuint64_t(n) * dim * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, cuuint32_t(box_rows), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode(&map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                            3, const_cast<void*>(base), dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("attention wgmma_ws forward: cuTensorMapEncodeTiled failed (error " +
                             std::to_string(int(r)) + "; inputs must be 16-byte aligned)");
  return map;
}

template <typename Elem, int D, int Bk, bool kPingPong>
void ws_launch_typed(int batch, const TcArgs& a, cudaStream_t stream) {
  constexpr size_t smem = ws_smem_bytes<D, Bk>();
  constexpr bool bf16 = std::is_same_v<Elem, __nv_bfloat16>;
  static const bool configured = [] {
    check(cudaFuncSetAttribute(ws_forward_kernel<Elem, D, Bk, kPingPong>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "cudaFuncSetAttribute");
    return true;
  }();
  (void)configured;
  const CUtensorMap tq = panel_map(bf16, a.q, batch * a.hq, a.nq, D, kWgBq);
  const CUtensorMap tk = panel_map(bf16, a.k, batch * a.hkv, a.nk, D, Bk);
  const CUtensorMap tv = panel_map(bf16, a.v, batch * a.hkv, a.nk, D, Bk);
  const dim3 grid(unsigned((a.nq + kWgBq - 1) / kWgBq), unsigned(a.hq), unsigned(batch));
  ws_forward_kernel<Elem, D, Bk, kPingPong><<<grid, kWsThreads, smem, stream>>>(tq, tk, tv, a);
  check(cudaGetLastError(), "attention wgmma_ws forward launch");
}

template <typename Elem, int D>
void ws_dispatch_d(int block_k, bool pingpong, int batch, const TcArgs& a, cudaStream_t stream) {
  if (block_k == 64)
    pingpong ? ws_launch_typed<Elem, D, 64, true>(batch, a, stream)
             : ws_launch_typed<Elem, D, 64, false>(batch, a, stream);
  else
    pingpong ? ws_launch_typed<Elem, D, 128, true>(batch, a, stream)
             : ws_launch_typed<Elem, D, 128, false>(batch, a, stream);
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

void ws_launch(bool bf16, int dim, int batch, int block_k, bool pingpong, const TcArgs& a,
               cudaStream_t stream) {
  if (!wgmma_available())
    throw std::runtime_error("attention wgmma_ws forward: needs an sm_90 device and the sm_90a build");
  if (block_k != 64 && block_k != 128)
    throw std::runtime_error("attention wgmma_ws forward: block_k must be 64 or 128");
  if (dim == 64)
    bf16 ? ws_dispatch_d<__nv_bfloat16, 64>(block_k, pingpong, batch, a, stream)
         : ws_dispatch_d<__half, 64>(block_k, pingpong, batch, a, stream);
  else
    bf16 ? ws_dispatch_d<__nv_bfloat16, 128>(block_k, pingpong, batch, a, stream)
         : ws_dispatch_d<__half, 128>(block_k, pingpong, batch, a, stream);
}

}  // namespace kprop::attention::cuda_detail
