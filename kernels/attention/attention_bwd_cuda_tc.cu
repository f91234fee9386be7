// Flash attention backward on tensor cores (f16 / bf16 inputs, f32
// accumulation), FlashAttention-2 order, deterministic (no atomics):
//  1. D pre-pass: one warp per query row, D = rowsum(dO ⊙ O) in f32 over the
//     stored (16-bit) O, lanes reduced in a fixed butterfly order;
//  2. dK, dV: one block per (batch, kv head, 64-key tile); K and V stay in
//     shared memory while the block walks the query heads of its GQA group
//     and the 64-row query tiles that can see the tile;
//  3. dQ: one block per (batch, query head, 64-row query tile) walking the
//     key tiles its rows can see (recomputing S and dP a second time instead
//     of adding dQ atomically from kernel 2 buys determinism).
// Per tile pair: S = Q·Kᵀ and dP = dO·Vᵀ on the tensor cores (WMMA
// 16×16×16, f32 accumulators) into shared memory; P = exp(σ·S − LSE) in f32
// (0 where masked, past the lengths, or on a fully masked row), rounded to
// the dtype for dV += Pᵀ·dO; dS = P ⊙ (dP − D) in f32 from the unrounded P,
// rounded for dK += dSᵀ·Q and dQ += dS·K. The dK, dV and dQ accumulators
// stay in WMMA fragments (registers) across the loop; σ is applied once at
// the end and each gradient is rounded to nearest at its store. These are
// the rounding points the CPU kernels' half storage models (backward.cpp)
// and FlashAttention uses.
// 256 threads (8 warps) per block; D = 64 or 128; masks none, causal
// (bottom-right) and key_padding; GQA. WMMA with bf16 needs sm_80.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/attention/attention_bwd_cuda.h"
#include "kernels/attention/attention_cuda_common.cuh"  // cp.async
#include "kernels/cuda_support.cuh"

namespace kprop::attention::cuda_bwd_raw {
namespace {

using cuda_detail::cp_async16;
using cuda_detail::cp_async_commit;
using cuda_detail::cp_async_wait;
using cuda_support::check;
namespace wmma = nvcuda::wmma;

constexpr int kTile = 64;  // Bq = Bk
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kLdS = kTile + 4;  // f32 score tiles: row stride (a multiple of 4 floats, as WMMA needs)
constexpr int kLdP = kTile + 8;  // 16-bit P and dS tiles (a multiple of 8 elements)
// Blocks per SM the dK/dV and dQ kernels are compiled for: two at D = 64
// (106.5 KiB of shared memory each: two fit in the 228 KiB of a Hopper SM,
// registers capped at 128 a thread; an A100's 164 KiB holds one, so there
// the cap only limits registers), one at D = 128 (154.5 KiB each). On
// compute capability 8.6/8.9 (99 KiB a block) neither fits: declined.
template <int D>
constexpr int kBlocksPerSm = D == 64 ? 2 : 1;

template <typename H>
struct Cvt;
template <>
struct Cvt<__half> {
  static __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half from_f(float x) { return __float2half_rn(x); }
};
template <>
struct Cvt<__nv_bfloat16> {
  static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_f(float x) { return __float2bfloat16_rn(x); }
};

struct TcDims {
  int batch, hq, hkv, nq, nk, mask, offset;  // mask: 0 none, 1 causal, 2 key_padding; offset = Nk − Nq
  const int* key_lengths;                    // device, key_padding only
  float scale;
  __device__ int group() const { return hq / hkv; }
  __device__ bool visible(int b, int i, int j) const {
    if (mask == 1) return j <= i + offset;
    if (mask == 2) return j < key_lengths[b];
    return true;
  }
};

// Shared memory of both tile kernels, in bytes from a 128-byte aligned base
// (every WMMA pointer below is then 32-byte aligned: each region's size and
// each fragment's offset in it are multiples of 32 bytes).
template <int D>
struct Smem {
  static constexpr int kLdH = D + 8;  // 16-bit [64][D] tiles (a multiple of 8 elements, 16-byte rows)
  static constexpr size_t kHalfTile = size_t(kTile) * kLdH * 2, kScoreTile = size_t(kTile) * kLdS * 4,
                          kPTile = size_t(kTile) * kLdP * 2;
  // fixed0, fixed1: the tiles a block keeps (K, V in dK/dV; Q, dO in dQ);
  // stream[2][2]: the tiles it walks (Q, dO; K, V), double-buffered.
  static constexpr size_t fixed0 = 0, fixed1 = fixed0 + kHalfTile, stream = fixed1 + kHalfTile,
                          ss = stream + 4 * kHalfTile, dps = ss + kScoreTile, ph = dps + kScoreTile,
                          dsh = ph + kPTile, lse = dsh + kPTile, d = lse + kTile * 4, total = d + kTile * 4;
  __host__ __device__ static constexpr size_t streamed(int buffer, int which) {
    return stream + (2 * buffer + which) * kHalfTile;
  }
  // The f32 staging of a [64][D + 4] gradient tile reuses S and dP.
  static_assert(size_t(kTile) * (D + 4) * 4 <= 2 * kScoreTile, "staging fits in the score tiles");
};

// Rows [0, valid) of a [n][D] tensor at g (16-bit, 16-byte rows) into a
// [64][D + 8] tile; rows past `valid` are zeros.
template <typename H, int D>
__device__ __forceinline__ void load_tile(H* tile, const H* __restrict__ g, int valid) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (r < valid) x = *reinterpret_cast<const uint4*>(g + size_t(r) * D + ch * 8);
    *reinterpret_cast<uint4*>(tile + r * Smem<D>::kLdH + ch * 8) = x;
  }
}

// load_tile by cp.async (16 bytes a thread, zeros past `valid`); kAsync
// false: load_tile. The caller commits the group and waits for it.
template <typename H, int D, bool kAsync>
__device__ __forceinline__ void stream_tile(H* tile, const H* __restrict__ g, int valid) {
  if constexpr (!kAsync) {
    load_tile<H, D>(tile, g, valid);
  } else {
    constexpr int kChunks = D / 8;
    for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
      const int r = c / kChunks, ch = c % kChunks;
      const bool ok = r < valid;
      cp_async16(tile + r * Smem<D>::kLdH + ch * 8, ok ? g + size_t(r) * D + ch * 8 : g, ok ? 16 : 0);
    }
  }
}

// Waits for this step's copies; the next step's (issued when `next`) may
// still be in flight.
template <bool kAsync>
__device__ __forceinline__ void await_step(bool next) {
  if constexpr (kAsync) {
    if (next)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
  }
}

// C[64][64] (f32, stride kLdS) = A·Bᵀ for A, B [64][D] 16-bit tiles.
template <typename H, int D>
__device__ __forceinline__ void gemm_abt(const H* A, const H* B, float* C) {
  constexpr int ld = Smem<D>::kLdH, kFrags = 16 / kWarps;
  // Warp w owns output fragments w + 8t: column block w % 4 for every t,
  // so each k step loads its B fragment once.
  const int warp = threadIdx.x / 32, fc = warp % 4;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFrags];
#pragma unroll
  for (int t = 0; t < kFrags; ++t) wmma::fill_fragment(acc[t], 0.f);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::col_major> b;  // b(k, n) = B[n][k]
    wmma::load_matrix_sync(b, B + fc * 16 * ld + kk * 16, ld);
#pragma unroll
    for (int t = 0; t < kFrags; ++t) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> a;
      wmma::load_matrix_sync(a, A + (warp + t * kWarps) / 4 * 16 * ld + kk * 16, ld);
      wmma::mma_sync(acc[t], a, b, acc[t]);
    }
  }
#pragma unroll
  for (int t = 0; t < kFrags; ++t)
    wmma::store_matrix_sync(C + (warp + t * kWarps) / 4 * 16 * kLdS + fc * 16, acc[t], kLdS,
                            wmma::mem_row_major);
}

// A warp's share of a [64][D] f32 accumulator: fragments warp + t·kWarps.
template <int D>
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>[D / 32];

// acc += A'·B, A' the 64×64 16-bit tile A (stride kLdP), transposed when
// kTransA, B a [64][D] 16-bit tile.
template <typename H, int D, bool kTransA>
__device__ __forceinline__ void gemm_acc(Acc<D>& acc, const H* A, const H* B) {
  constexpr int ld = Smem<D>::kLdH;
  using Layout = std::conditional_t<kTransA, wmma::col_major, wmma::row_major>;
  // Fragment f = warp + 8t is (f / (D/16), f % (D/16)); D/16 divides 8, so
  // its column block is warp % (D/16) for every t: one B load per k step.
  static_assert(kWarps % (D / 16) == 0, "a warp's fragments share their column block");
  const int warp = threadIdx.x / 32, fc = warp % (D / 16);
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::row_major> b;
    wmma::load_matrix_sync(b, B + kk * 16 * ld + fc * 16, ld);
#pragma unroll
    for (int t = 0; t < D / 32; ++t) {
      const int fr = (warp + t * kWarps) / (D / 16);
      wmma::fragment<wmma::matrix_a, 16, 16, 16, H, Layout> a;
      // Transposed: a(m, k) = A[k][m], column-major from A[kk·16][fr·16].
      wmma::load_matrix_sync(a, kTransA ? A + kk * 16 * kLdP + fr * 16 : A + fr * 16 * kLdP + kk * 16, kLdP);
      wmma::mma_sync(acc[t], a, b, acc[t]);
    }
  }
}

// Stores a [64][D] accumulator, times `factor` and rounded to H, to rows
// [0, valid) of g ([n][D]), through the f32 staging tile.
template <typename H, int D>
__device__ __forceinline__ void store_acc(Acc<D>& acc, float* stage, float factor, H* __restrict__ g,
                                          int valid) {
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int t = 0; t < D / 32; ++t) {
    const int f = warp + t * kWarps, fr = f / (D / 16), fc = f % (D / 16);
    wmma::store_matrix_sync(stage + fr * 16 * (D + 4) + fc * 16, acc[t], D + 4, wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < valid * D; e += kThreads) {
    const int r = e / D, c = e % D;
    g[size_t(r) * D + c] = Cvt<H>::from_f(factor * stage[r * (D + 4) + c]);
  }
  __syncthreads();  // the staging tile is reused
}

// P and dS of query rows [i0, i0 + rows) against keys [j0, j0 + cols) from
// the score tiles: P (when wanted) and dS rounded to H into Ph, dSh.
template <typename H, bool kWantP>
__device__ __forceinline__ void probabilities(const TcDims& s, int b, int i0, int rows, int j0, int cols,
                                              const float* Ss, const float* dPs, const float* lse_s,
                                              const float* d_s, H* Ph, H* dSh) {
  for (int e = threadIdx.x; e < kTile * kTile; e += kThreads) {
    const int i = e / kTile, j = e % kTile;
    float p = 0.f, ds = 0.f;
    if (i < rows && j < cols && lse_s[i] != -INFINITY && s.visible(b, i0 + i, j0 + j)) {
      p = expf(s.scale * Ss[i * kLdS + j] - lse_s[i]);
      ds = p * (dPs[i * kLdS + j] - d_s[i]);
    }
    if (kWantP) Ph[i * kLdP + j] = Cvt<H>::from_f(p);
    dSh[i * kLdP + j] = Cvt<H>::from_f(ds);
  }
}

struct Tiles {
  void* base;
  template <typename X>
  __device__ X* at(size_t offset) const {
    return reinterpret_cast<X*>(static_cast<unsigned char*>(base) + offset);
  }
};

// One step of either kernel on a (query tile, key tile) pair, once its
// tiles are in shared memory: S = Q·Kᵀ and dP = dO·Vᵀ, then P (kWantP) and
// dS. Barriers before (the step's tiles, LSE and D are in), between and after
// (P and dS are in, for the step's products).
template <typename H, int D, bool kWantP>
__device__ __forceinline__ void tile_pair(const TcDims& s, int b, int i0, int rows, int j0, int cols,
                                          const H* Qs, const H* Ks, const H* dOs, const H* Vs, float* Ss,
                                          float* dPs, const float* lse_s, const float* d_s, H* Ph, H* dSh) {
  __syncthreads();
  gemm_abt<H, D>(Qs, Ks, Ss);
  gemm_abt<H, D>(dOs, Vs, dPs);
  __syncthreads();
  probabilities<H, kWantP>(s, b, i0, rows, j0, cols, Ss, dPs, lse_s, d_s, Ph, dSh);
  __syncthreads();
}

// ---------------------------------------------------------------- D
template <typename H, int D>
__global__ void __launch_bounds__(kThreads)
    d_kernel(size_t rows, const H* __restrict__ d_out, const H* __restrict__ o, float* __restrict__ d) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  float sum = 0.f;
#pragma unroll
  for (int c = lane; c < D; c += 32) sum += Cvt<H>::to_f(d_out[row * D + c]) * Cvt<H>::to_f(o[row * D + c]);
#pragma unroll
  for (int w = 16; w > 0; w /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, w);
  if (lane == 0) d[row] = sum;
}

// ---------------------------------------------------------------- dK, dV
// kAsync: the walked tiles are double-buffered and copied by cp.async one
// step ahead, so the next tile's loads run under this one's arithmetic;
// false: loaded synchronously (the benchmark's flash_bwd_sync measures what
// the copies one step ahead buy).
template <typename H, int D, bool kAsync>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm<D>)
    dkdv_kernel(TcDims s, const H* __restrict__ q, const H* __restrict__ k, const H* __restrict__ v,
                const H* __restrict__ d_out, const float* __restrict__ lse, const float* __restrict__ dd,
                H* __restrict__ dk, H* __restrict__ dv) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using L = Smem<D>;
  const Tiles sm{smem_raw};
  H *Ks = sm.at<H>(L::fixed0), *Vs = sm.at<H>(L::fixed1), *Ph = sm.at<H>(L::ph), *dSh = sm.at<H>(L::dsh);
  float *Ss = sm.at<float>(L::ss), *dPs = sm.at<float>(L::dps), *lse_s = sm.at<float>(L::lse),
        *d_s = sm.at<float>(L::d);
  const int n_tiles = (s.nk + kTile - 1) / kTile;
  const int kt = blockIdx.x % n_tiles, kvh = blockIdx.x / n_tiles % s.hkv, b = blockIdx.x / n_tiles / s.hkv;
  const int j0 = kt * kTile, cols = min(kTile, s.nk - j0);
  const size_t kv0 = (static_cast<size_t>(b) * s.hkv + kvh) * s.nk + j0;
  load_tile<H, D>(Ks, k + kv0 * D, cols);
  load_tile<H, D>(Vs, v + kv0 * D, cols);
  Acc<D> dk_acc, dv_acc;
#pragma unroll
  for (int t = 0; t < D / 32; ++t) wmma::fill_fragment(dk_acc[t], 0.f), wmma::fill_fragment(dv_acc[t], 0.f);
  // The (query head of the group, query tile) pairs that can see this key
  // tile, in order: causal rows from the first one that sees key j0; none
  // when key padding hides the whole tile.
  const int i_first = (s.mask == 1 ? max(0, j0 - s.offset) : 0) / kTile * kTile;
  const bool hidden = s.mask == 2 && j0 >= s.key_lengths[b];
  const int per_head = hidden ? 0 : max(0, (s.nq - i_first + kTile - 1) / kTile);
  const int steps = per_head * s.group();
  // Step n: rows [i0, i0 + 64) of query head row0 / nq.
  auto at = [&](int n, size_t& row0, int& i0) {
    row0 = (static_cast<size_t>(b) * s.hq + kvh * s.group() + n / per_head) * s.nq;
    i0 = i_first + n % per_head * kTile;
  };
  auto issue = [&](int n) {
    size_t row0;
    int i0;
    at(n, row0, i0);
    const int rows = min(kTile, s.nq - i0);
    stream_tile<H, D, kAsync>(sm.at<H>(L::streamed(n & 1, 0)), q + (row0 + i0) * D, rows);
    stream_tile<H, D, kAsync>(sm.at<H>(L::streamed(n & 1, 1)), d_out + (row0 + i0) * D, rows);
    if (kAsync) cp_async_commit();
  };
  if (steps > 0) issue(0);
  for (int n = 0; n < steps; ++n) {
    size_t row0;
    int i0;
    at(n, row0, i0);
    const int rows = min(kTile, s.nq - i0);
    const H *Qs = sm.at<H>(L::streamed(n & 1, 0)), *dOs = sm.at<H>(L::streamed(n & 1, 1));
    if (n + 1 < steps) issue(n + 1);  // into the other buffer, last read before the previous step's barrier
    await_step<kAsync>(n + 1 < steps);
    for (int i = threadIdx.x; i < kTile; i += kThreads)
      lse_s[i] = i < rows ? lse[row0 + i0 + i] : -INFINITY, d_s[i] = i < rows ? dd[row0 + i0 + i] : 0.f;
    tile_pair<H, D, true>(s, b, i0, rows, j0, cols, Qs, Ks, dOs, Vs, Ss, dPs, lse_s, d_s, Ph, dSh);
    gemm_acc<H, D, true>(dv_acc, Ph, dOs);
    gemm_acc<H, D, true>(dk_acc, dSh, Qs);
    __syncthreads();  // this step's buffers, P and dS are overwritten next
  }
  __syncthreads();
  store_acc<H, D>(dv_acc, Ss, 1.f, dv + kv0 * D, cols);
  store_acc<H, D>(dk_acc, Ss, s.scale, dk + kv0 * D, cols);
}

// ---------------------------------------------------------------- dQ
template <typename H, int D, bool kAsync>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm<D>)
    dq_kernel(TcDims s, const H* __restrict__ q, const H* __restrict__ k, const H* __restrict__ v,
              const H* __restrict__ d_out, const float* __restrict__ lse, const float* __restrict__ dd,
              H* __restrict__ dq) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using L = Smem<D>;
  const Tiles sm{smem_raw};
  H *Qs = sm.at<H>(L::fixed0), *dOs = sm.at<H>(L::fixed1), *dSh = sm.at<H>(L::dsh);
  float *Ss = sm.at<float>(L::ss), *dPs = sm.at<float>(L::dps), *lse_s = sm.at<float>(L::lse),
        *d_s = sm.at<float>(L::d);
  const int n_tiles = (s.nq + kTile - 1) / kTile;
  const int qt = blockIdx.x % n_tiles, h = blockIdx.x / n_tiles % s.hq, b = blockIdx.x / n_tiles / s.hq;
  const int i0 = qt * kTile, rows = min(kTile, s.nq - i0);
  const size_t row0 = (static_cast<size_t>(b) * s.hq + h) * s.nq + i0;
  const size_t kv0 = (static_cast<size_t>(b) * s.hkv + h / s.group()) * s.nk;
  load_tile<H, D>(Qs, q + row0 * D, rows);
  load_tile<H, D>(dOs, d_out + row0 * D, rows);
  for (int i = threadIdx.x; i < kTile; i += kThreads)
    lse_s[i] = i < rows ? lse[row0 + i] : -INFINITY, d_s[i] = i < rows ? dd[row0 + i] : 0.f;
  Acc<D> dq_acc;
#pragma unroll
  for (int t = 0; t < D / 32; ++t) wmma::fill_fragment(dq_acc[t], 0.f);
  // Keys [0, end) hold every key a row of the tile sees: key tiles [0, steps).
  const int end = s.mask == 1   ? min(max(i0 + rows + s.offset, 0), s.nk)
                  : s.mask == 2 ? min(s.key_lengths[b], s.nk)
                                : s.nk;
  const int steps = max(0, (end + kTile - 1) / kTile);
  auto issue = [&](int n) {
    const int j0 = n * kTile, cols = min(kTile, s.nk - j0);
    stream_tile<H, D, kAsync>(sm.at<H>(L::streamed(n & 1, 0)), k + (kv0 + j0) * D, cols);
    stream_tile<H, D, kAsync>(sm.at<H>(L::streamed(n & 1, 1)), v + (kv0 + j0) * D, cols);
    if (kAsync) cp_async_commit();
  };
  if (steps > 0) issue(0);
  for (int n = 0; n < steps; ++n) {
    const int j0 = n * kTile, cols = min(kTile, s.nk - j0);
    const H *Ks = sm.at<H>(L::streamed(n & 1, 0)), *Vs = sm.at<H>(L::streamed(n & 1, 1));
    if (n + 1 < steps) issue(n + 1);  // into the other buffer, last read before the previous step's barrier
    await_step<kAsync>(n + 1 < steps);
    tile_pair<H, D, false>(s, b, i0, rows, j0, cols, Qs, Ks, dOs, Vs, Ss, dPs, lse_s, d_s, nullptr, dSh);
    gemm_acc<H, D, false>(dq_acc, dSh, Ks);
    __syncthreads();  // this step's buffers and dS are overwritten next
  }
  store_acc<H, D>(dq_acc, Ss, s.scale, dq + row0 * D, rows);
}

// ---------------------------------------------------------------- host side
float scale_of(const TcBwdParams& p) {
  return p.scale != 0 ? p.scale : 1.f / std::sqrt(float(p.dim));
}

template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  int dev = 0, optin = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
        "cudaDeviceGetAttribute");
  // A device with less (compute capability 8.6 and 8.9 allow 99 KiB a
  // block: D = 64 needs 106.5 KiB) cannot run these tiles: declined, as any
  // launch the device cannot take, never a target error.
  if (bytes > static_cast<size_t>(optin))
    throw cuda_raw::DeviceLimit("the tensor-core backward's 64x64 tiles need " + std::to_string(bytes) +
                                " bytes of shared memory a block at this head dimension; the device allows " +
                                std::to_string(optin));
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "cudaFuncSetAttribute");
}

template <typename H, int D, bool kAsync>
size_t launch(const TcBwdParams& p, cudaStream_t stream) {
  const TcDims s{p.batch,     p.heads_q,     p.heads_kv, p.nq, p.nk, static_cast<int>(p.mask),
                 p.nk - p.nq, p.key_lengths, scale_of(p)};
  const size_t rows = size_t(p.batch) * p.heads_q * p.nq, bytes = Smem<D>::total;
  // Once per instantiation and device (the limit is a device's setting).
  {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    static std::mutex mutex;
    static std::set<int> raised;
    const std::lock_guard<std::mutex> lock(mutex);
    if (!raised.count(dev)) {
      allow_shared(dkdv_kernel<H, D, kAsync>, bytes);
      allow_shared(dq_kernel<H, D, kAsync>, bytes);
      raised.insert(dev);
    }
  }
  const auto* q = static_cast<const H*>(p.q);
  const auto* k = static_cast<const H*>(p.k);
  const auto* v = static_cast<const H*>(p.v);
  const auto* d_out = static_cast<const H*>(p.d_out);
  d_kernel<H, D><<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      rows, d_out, static_cast<const H*>(p.o), p.d);
  check(cudaGetLastError(), "attention tensor-core backward: D launch");
  const auto kv_blocks = static_cast<unsigned>(size_t(p.batch) * p.heads_kv * ((p.nk + kTile - 1) / kTile));
  dkdv_kernel<H, D, kAsync><<<kv_blocks, kThreads, bytes, stream>>>(
      s, q, k, v, d_out, p.lse, p.d, static_cast<H*>(p.dk), static_cast<H*>(p.dv));
  check(cudaGetLastError(), "attention tensor-core backward: dK/dV launch");
  const auto q_blocks = static_cast<unsigned>(size_t(p.batch) * p.heads_q * ((p.nq + kTile - 1) / kTile));
  dq_kernel<H, D, kAsync>
      <<<q_blocks, kThreads, bytes, stream>>>(s, q, k, v, d_out, p.lse, p.d, static_cast<H*>(p.dq));
  check(cudaGetLastError(), "attention tensor-core backward: dQ launch");
  return bytes;
}

template <typename H>
std::vector<uint16_t> to_bits(const float* x, size_t n) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    H h;
    if constexpr (std::is_same_v<H, __half>)
      h = __float2half_rn(x[i]);
    else
      h = __float2bfloat16_rn(x[i]);
    std::memcpy(&out[i], &h, 2);
  }
  return out;
}
template <typename H>
void from_bits(const std::vector<uint16_t>& bits, float* x) {
  for (size_t i = 0; i < bits.size(); ++i) {
    H h;
    std::memcpy(&h, &bits[i], 2);
    if constexpr (std::is_same_v<H, __half>)
      x[i] = __half2float(h);
    else
      x[i] = __bfloat162float(h);
  }
}

template <typename H>
size_t host_t(const TcBwdHost& a, const float* hq, const float* hk, const float* hv, const float* hdo,
              float* ho, float* hlse, float* hd, float* hdq, float* hdk, float* hdv) {
  const size_t qn = size_t(a.batch) * a.heads_q * a.nq * a.dim,
               kvn = size_t(a.batch) * a.heads_kv * a.nk * a.dim, rows = size_t(a.batch) * a.heads_q * a.nq;
  cuda_support::DeviceBuffers buf;
  const std::vector<uint16_t> bq = to_bits<H>(hq, qn), bk = to_bits<H>(hk, kvn), bv = to_bits<H>(hv, kvn),
                              bdo = to_bits<H>(hdo, qn);
  TcBwdParams p;
  p.type = a.type, p.batch = a.batch, p.heads_q = a.heads_q, p.heads_kv = a.heads_kv, p.nq = a.nq,
  p.nk = a.nk;
  p.dim = a.dim, p.mask = a.mask, p.scale = a.scale;
  p.q = buf.upload(bq.data(), qn), p.k = buf.upload(bk.data(), kvn), p.v = buf.upload(bv.data(), kvn);
  p.d_out = buf.upload(bdo.data(), qn);
  if (a.mask == cuda_raw::TcMask::key_padding) p.key_lengths = buf.upload(a.key_lengths, size_t(a.batch));
  auto* o = buf.alloc<uint16_t>(qn);
  auto* dq = buf.alloc<uint16_t>(qn);
  auto* dk = buf.alloc<uint16_t>(kvn);
  auto* dv = buf.alloc<uint16_t>(kvn);
  float* lse = buf.alloc<float>(rows);
  float* d = buf.alloc<float>(rows);
  // Outputs poisoned (all-ones bytes: NaN in f16, bf16 and f32): an element
  // no kernel writes shows.
  for (void* out : {static_cast<void*>(o), static_cast<void*>(dq)})
    check(cudaMemset(out, 0xFF, qn * 2), "cudaMemset");
  for (void* out : {static_cast<void*>(dk), static_cast<void*>(dv)})
    check(cudaMemset(out, 0xFF, kvn * 2), "cudaMemset");
  for (void* out : {static_cast<void*>(lse), static_cast<void*>(d)})
    check(cudaMemset(out, 0xFF, rows * sizeof(float)), "cudaMemset");
  p.o = o, p.lse = lse, p.d = d, p.dq = dq, p.dk = dk, p.dv = dv;
  cuda_raw::TcParams f;
  f.type = a.type, f.batch = a.batch, f.heads_q = a.heads_q, f.heads_kv = a.heads_kv, f.nq = a.nq,
  f.nk = a.nk;
  f.dim = a.dim, f.mask = a.mask, f.scale = a.scale, f.key_lengths = p.key_lengths;
  f.q = p.q, f.k = p.k, f.v = p.v, f.o = o, f.lse = lse;
  cuda_raw::tc_forward_async(f, nullptr);
  const size_t bytes = tc_backward_async(p, nullptr);
  check(cudaDeviceSynchronize(), "attention tensor-core backward");
  std::vector<uint16_t> bits(qn);
  cuda_support::download(bits.data(), o, qn);
  from_bits<H>(bits, ho);
  cuda_support::download(bits.data(), dq, qn);
  from_bits<H>(bits, hdq);
  bits.resize(kvn);
  cuda_support::download(bits.data(), dk, kvn);
  from_bits<H>(bits, hdk);
  cuda_support::download(bits.data(), dv, kvn);
  from_bits<H>(bits, hdv);
  cuda_support::download(hlse, lse, rows);
  cuda_support::download(hd, d, rows);
  return bytes;
}

}  // namespace

bool tc_backward_supported(const TcBwdParams& p, const char** why) {
  // The forward's shape rules (D = 64 or 128, dimensions >= 1, GQA groups,
  // key lengths for key_padding) are the backward's.
  cuda_raw::TcParams f;
  f.type = p.type, f.batch = p.batch, f.heads_q = p.heads_q, f.heads_kv = p.heads_kv, f.nq = p.nq,
  f.nk = p.nk;
  f.dim = p.dim, f.mask = p.mask, f.key_lengths = p.key_lengths;
  return cuda_raw::tc_supported(f, why);
}

size_t tc_backward_async(const TcBwdParams& p, void* stream) {
  const char* why = nullptr;
  if (!tc_backward_supported(p, &why))
    throw std::runtime_error(std::string("attention tensor-core backward: ") + why);
  const auto st = static_cast<cudaStream_t>(stream);
  const bool f16 = p.type == cuda_raw::Half::f16, d64 = p.dim == 64;
  if (p.pipelined) {
    if (f16) return d64 ? launch<__half, 64, true>(p, st) : launch<__half, 128, true>(p, st);
    return d64 ? launch<__nv_bfloat16, 64, true>(p, st) : launch<__nv_bfloat16, 128, true>(p, st);
  }
  if (f16) return d64 ? launch<__half, 64, false>(p, st) : launch<__half, 128, false>(p, st);
  return d64 ? launch<__nv_bfloat16, 64, false>(p, st) : launch<__nv_bfloat16, 128, false>(p, st);
}

size_t tc_backward_host(const TcBwdHost& a, const float* q, const float* k, const float* v,
                        const float* d_out, float* o, float* lse, float* d, float* dq, float* dk, float* dv) {
  if (device_count() <= 0) throw std::runtime_error("no CUDA device");
  return a.type == cuda_raw::Half::f16 ? host_t<__half>(a, q, k, v, d_out, o, lse, d, dq, dk, dv)
                                       : host_t<__nv_bfloat16>(a, q, k, v, d_out, o, lse, d, dq, dk, dv);
}

}  // namespace kprop::attention::cuda_bwd_raw
