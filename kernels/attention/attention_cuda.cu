// Flash attention forward on a CUDA device (see attention_cuda.h).
//
// Spec-checked kernel (f32, f64): one block per (q tile, head, batch) with
// the case's Bq×Bk tiles. Q, the K and V tile, the score tile, the output
// accumulator and the running max m, sum l and correction α of each row sit
// in shared memory (Bq, Bk and D vary per case, so registers cannot hold
// them). Per KV tile: S = scale·QKᵀ (−inf where masked), per row
// m' = max(m, max S), α = exp(m − m'), P = exp(S − m'), l = α·l + ΣP,
// acc = α·acc + P·V; a row whose max is still −inf keeps acc = 0 and l = 0
// (no exp(−inf − (−inf))). At the end O = acc / l and LSE = m + log l, or
// O = 0 and LSE = −inf where l = 0 (a fully masked row). Causal and
// key_padding masks skip the KV tiles past the last visible key. Every
// accumulation is in T (f32 accumulates in f32), plain exp/log (no fast math).
//
// Tensor-core kernel (f16, bf16 -> f32 accumulators): FlashAttention-2
// layout. Bq = 16 rows per warp (4 or 8 warps), Bk = 64, D = 64 or 128. Q is
// loaded once to shared memory and from there to registers (ldmatrix); K and
// V tiles go through two shared-memory buffers by cp.async (the next tile
// loads while this one computes), XOR-swizzled so ldmatrix is conflict-free.
// S = QKᵀ by mma.sync m16n8k16 into f32 registers; the softmax runs on the
// accumulator fragments in the base-2 domain (scores · scale · log2 e), each
// thread owning two rows; P is rounded to the input type in registers and is
// the A operand of O += P·V (V through ldmatrix.trans). Tiles past the last
// visible key are skipped (causal, key_padding); masks are applied only on
// tiles that cross a boundary.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/attention_cuda_common.cuh"

namespace kprop::attention::cuda_raw {

using cuda_detail::check;
using cuda_detail::DeviceBuffer;

int device_count() {
  return cuda_support::device_count();
}

namespace {

// ================================================================ f32 / f64
template <typename T>
struct GenericArgs {
  int hq, hkv, nq, nk, dim, bq, bk, mask, offset;
  const int* key_lengths;
  const uint8_t* allowed;
  T scale;
  const T* q;
  const T* k;
  const T* v;
  T* o;
  T* lse;
};

constexpr int kGenericThreads = 128;

template <typename T>
size_t generic_smem_elems(int bq, int bk, int dim) {
  return size_t(2) * bq * dim + size_t(2) * bk * dim + size_t(bq) * bk + size_t(3) * bq;
}

using cuda_support::dev_exp;
using cuda_support::dev_log;

template <typename T>
__global__ void __launch_bounds__(kGenericThreads) generic_forward_kernel(GenericArgs<T> a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* qs = reinterpret_cast<T*>(smem_raw);
  T* ks = qs + size_t(a.bq) * a.dim;
  T* vs = ks + size_t(a.bk) * a.dim;
  T* acc = vs + size_t(a.bk) * a.dim;
  T* s = acc + size_t(a.bq) * a.dim;
  T* m = s + size_t(a.bq) * a.bk;
  T* l = m + a.bq;
  T* alpha = l + a.bq;
  const T neg_inf = -T(INFINITY);

  const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * a.bq, D = a.dim;
  const int rows = min(a.bq, a.nq - i0);
  const int kvh = h / (a.hq / a.hkv);
  const size_t qbase = ((size_t(b) * a.hq + h) * a.nq + i0) * D;
  const size_t kbase = (size_t(b) * a.hkv + kvh) * size_t(a.nk) * D;
  const int tid = threadIdx.x;

  for (int x = tid; x < rows * D; x += blockDim.x) {
    qs[x] = a.q[qbase + x];
    acc[x] = 0;
  }
  for (int i = tid; i < rows; i += blockDim.x) m[i] = neg_inf, l[i] = 0;

  int key_end = a.nk;  // keys [key_end, nk) are hidden from every row of the tile
  if (a.mask == 1) key_end = max(0, min(a.nk, i0 + rows + a.offset));
  if (a.mask == 2) key_end = min(a.key_lengths[b], a.nk);

  for (int j0 = 0; j0 < key_end; j0 += a.bk) {
    const int cols = min(a.bk, key_end - j0);
    __syncthreads();  // the previous tile's K, V and P are no longer read
    for (int x = tid; x < cols * D; x += blockDim.x) {
      ks[x] = a.k[kbase + size_t(j0) * D + x];
      vs[x] = a.v[kbase + size_t(j0) * D + x];
    }
    __syncthreads();
    for (int x = tid; x < rows * cols; x += blockDim.x) {
      const int i = x / cols, jj = x % cols, qi = i0 + i, kj = j0 + jj;
      bool vis = true;
      if (a.mask == 1) vis = kj <= qi + a.offset;
      if (a.mask == 2) vis = kj < a.key_lengths[b];
      if (a.mask == 3) vis = a.allowed[(size_t(b) * a.nq + qi) * a.nk + kj] != 0;
      T dot = 0;
      if (vis)
        for (int d = 0; d < D; ++d) dot += qs[i * D + d] * ks[jj * D + d];
      s[i * a.bk + jj] = vis ? a.scale * dot : neg_inf;
    }
    __syncthreads();
    for (int i = tid; i < rows; i += blockDim.x) {
      T* row = s + i * a.bk;
      T mx = m[i];
      for (int jj = 0; jj < cols; ++jj) mx = max(mx, row[jj]);
      if (mx == neg_inf) {  // nothing visible yet: P = 0, acc and l stay 0
        for (int jj = 0; jj < cols; ++jj) row[jj] = 0;
        alpha[i] = 1;
        continue;
      }
      const T corr = dev_exp(m[i] - mx);  // m = −inf: 0 (acc and l are still 0)
      T sum = 0;
      for (int jj = 0; jj < cols; ++jj) {
        const T p = dev_exp(row[jj] - mx);  // masked: exp(−inf) = 0
        row[jj] = p;
        sum += p;
      }
      l[i] = corr * l[i] + sum;
      m[i] = mx;
      alpha[i] = corr;
    }
    __syncthreads();
    for (int x = tid; x < rows * D; x += blockDim.x) {
      const int i = x / D, d = x % D;
      T pv = 0;
      for (int jj = 0; jj < cols; ++jj) pv += s[i * a.bk + jj] * vs[jj * D + d];
      acc[x] = alpha[i] * acc[x] + pv;
    }
  }
  __syncthreads();
  for (int x = tid; x < rows * D; x += blockDim.x) {
    const T li = l[x / D];
    a.o[qbase + x] = li > 0 ? acc[x] / li : T(0);
  }
  for (int i = tid; i < rows; i += blockDim.x)
    a.lse[(size_t(b) * a.hq + h) * a.nq + i0 + i] = l[i] > 0 ? m[i] + dev_log(l[i]) : neg_inf;
}

template <typename T>
size_t generic_forward(const HostProblem& p, T scale, const T* q, const T* k, const T* v, T* o, T* lse) {
  if (device_count() <= 0) throw std::runtime_error("no CUDA device");
  if (p.batch < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.nq < 1 || p.nk < 1 || p.dim < 1 ||
      p.heads_q % p.heads_kv != 0)
    throw std::runtime_error("attention cuda forward: invalid shape");
  int bq = std::clamp(p.block_q, 1, p.nq), bk = std::clamp(p.block_k, 1, p.nk);
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  int optin = 0;
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
        "cudaDeviceGetAttribute");
  while (generic_smem_elems<T>(bq, bk, p.dim) * sizeof(T) > size_t(optin)) {
    if (bq == 1 && bk == 1)
      throw DeviceLimit("the CUDA forward's 1x1 tiles at D = " + std::to_string(p.dim) +
                        " need more than the " + std::to_string(optin) +
                        " bytes of shared memory a block may have here");
    if (bq >= bk)
      bq = (bq + 1) / 2;
    else
      bk = (bk + 1) / 2;
  }
  const size_t smem = generic_smem_elems<T>(bq, bk, p.dim) * sizeof(T);
  check(
      cudaFuncSetAttribute(generic_forward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
      "cudaFuncSetAttribute");

  const size_t qn = size_t(p.batch) * p.heads_q * p.nq * p.dim,
               kvn = size_t(p.batch) * p.heads_kv * p.nk * p.dim, rows = size_t(p.batch) * p.heads_q * p.nq;
  DeviceBuffer<T> dq(qn), dk(kvn), dv(kvn), d_o(qn), dlse(rows);
  DeviceBuffer<int> dlen(p.mask.kind == 2 ? size_t(p.batch) : 0);
  DeviceBuffer<uint8_t> dallowed(p.mask.kind == 3 ? size_t(p.batch) * p.nq * p.nk : 0);
  dq.upload(q), dk.upload(k), dv.upload(v);
  if (p.mask.kind == 2) dlen.upload(p.mask.key_lengths);
  if (p.mask.kind == 3) dallowed.upload(p.mask.allowed);
  // Outputs poisoned (all-ones bytes: NaN) so an unwritten element shows.
  if (qn) check(cudaMemset(d_o.ptr, 0xFF, qn * sizeof(T)), "cudaMemset");
  check(cudaMemset(dlse.ptr, 0xFF, rows * sizeof(T)), "cudaMemset");

  GenericArgs<T> a{
      p.heads_q, p.heads_kv,   p.nq,  p.nk,   p.dim,  bq,     bk,      p.mask.kind, p.mask.causal_offset,
      dlen.ptr,  dallowed.ptr, scale, dq.ptr, dk.ptr, dv.ptr, d_o.ptr, dlse.ptr};
  const dim3 grid(unsigned((p.nq + bq - 1) / bq), unsigned(p.heads_q), unsigned(p.batch));
  generic_forward_kernel<T><<<grid, kGenericThreads, smem>>>(a);
  check(cudaGetLastError(), "attention forward launch");
  check(cudaDeviceSynchronize(), "attention forward");
  d_o.download(o);
  dlse.download(lse);
  return smem;
}

// ================================================================ f16 / bf16
using cuda_detail::TcArgs;
using cuda_detail::TcTile;

constexpr int kBk = 64;

template <int D, int kWarps>
constexpr size_t tc_smem_bytes() {
  return size_t(16 * kWarps * D + 4 * kBk * D) * 2;
}

// Rows [row0, row0 + kRows) of a [n][D] tensor into a swizzled tile.
template <typename Elem, int D, int kRows, int kThreads>
__device__ __forceinline__ void load_tile(Elem* tile, const Elem* g, int row0, int n) {
  cuda_detail::load_rows<Elem, D, kRows, kThreads>(
      tile, g, row0, n, [](int r, int ch) { return cuda_detail::swizzle<D>(r, ch); });
}

// kMt: 16-row m-tiles per warp (1 or 2; with 2 every K and V fragment read
// from shared memory feeds two MMAs). Q fragments stay in registers unless
// that would not fit (kMt = 2 at D = 128: re-read from shared memory).
// kBug: the test's planted bug (the running-max correction inverted,
// exp2(m_new − m_old)); compiled into one extra instantiation only.
template <typename Elem, int D, int kWarps, int kMt, bool kBug = false>
__global__ void __launch_bounds__(kWarps * 32) tc_forward_kernel(TcArgs a) {
  using cuda_detail::swizzle;
  using M = cuda_detail::Mma<Elem>;
  constexpr int kThreads = kWarps * 32, Bq = 16 * kMt * kWarps, kDt = D / 8, kSt = kBk / 8;
  constexpr bool kQInRegs = kMt == 1 || D <= 64;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Elem* qs = reinterpret_cast<Elem*>(smem_raw);
  Elem* ks = qs + Bq * D;       // two buffers of kBk × D
  Elem* vs = ks + 2 * kBk * D;  // two buffers of kBk × D
  const float neg_inf = -INFINITY;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const TcTile<Elem> blk(a, Bq, D);
  const int h = blk.h, b = blk.b, i0 = blk.i0, key_limit = blk.key_limit, key_end = blk.key_end;
  const Elem *qg = blk.qg, *kg = blk.kg, *vg = blk.vg;
  const int n_tiles = (key_end + kBk - 1) / kBk;

  float acc[kMt][kDt][4];
  float m[kMt][2], l[kMt][2];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int n = 0; n < kDt; ++n) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
    m[mt][0] = m[mt][1] = neg_inf;
    l[mt][0] = l[mt][1] = 0.f;
  }
  uint32_t qf[kQInRegs ? kMt : 1][kQInRegs ? D / 16 : 1][4];

  if (n_tiles > 0) {
    load_tile<Elem, D, Bq, kThreads>(qs, qg, i0, a.nq);
    load_tile<Elem, D, kBk, kThreads>(ks, kg, 0, a.nk);
    load_tile<Elem, D, kBk, kThreads>(vs, vg, 0, a.nk);
    cuda_detail::cp_async_commit();
  }
  const int row0 = i0 + warp * kMt * 16 + g;  // row of (mt, r): row0 + mt·16 + r·8
  for (int tile = 0; tile < n_tiles; ++tile) {
    const int buf = tile & 1, j0 = tile * kBk;
    if (tile + 1 < n_tiles) {
      load_tile<Elem, D, kBk, kThreads>(ks + (buf ^ 1) * kBk * D, kg, j0 + kBk, a.nk);
      load_tile<Elem, D, kBk, kThreads>(vs + (buf ^ 1) * kBk * D, vg, j0 + kBk, a.nk);
      cuda_detail::cp_async_commit();
      cuda_detail::cp_async_wait<1>();
    } else {
      cuda_detail::cp_async_wait<0>();
    }
    __syncthreads();
    if (kQInRegs && tile == 0) {
#pragma unroll
      for (int mt = 0; mt < (kQInRegs ? kMt : 1); ++mt)
#pragma unroll
        for (int kk = 0; kk < (kQInRegs ? D / 16 : 1); ++kk)
          cuda_detail::ldmatrix_x4(qf[mt][kk],
                                   qs + swizzle<D>((warp * kMt + mt) * 16 + lane % 16, kk * 2 + lane / 16));
    }
    const Elem* kt = ks + buf * kBk * D;
    const Elem* vt = vs + buf * kBk * D;

    // S = Q Kᵀ for this warp's rows and the tile's 64 keys.
    float s[kMt][kSt][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int n = 0; n < kSt; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[kMt][4];
      if (!kQInRegs) {
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt)
          cuda_detail::ldmatrix_x4(qa[mt],
                                   qs + swizzle<D>((warp * kMt + mt) * 16 + lane % 16, kk * 2 + lane / 16));
      }
#pragma unroll
      for (int np = 0; np < kSt / 2; ++np) {
        uint32_t kb[4];
        cuda_detail::ldmatrix_x4(
            kb, kt + swizzle<D>(np * 16 + lane % 8 + (lane / 16) * 8, kk * 2 + (lane / 8) % 2));
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          const uint32_t(&af)[4] = kQInRegs ? qf[kQInRegs ? mt : 0][kQInRegs ? kk : 0] : qa[mt];
          M::run(s[mt][2 * np], af, kb[0], kb[1]);
          M::run(s[mt][2 * np + 1], af, kb[2], kb[3]);
        }
      }
    }

    // Scores in the base-2 domain, masked where the tile crosses a boundary.
    const bool need_mask = j0 + kBk > key_limit || (a.mask == 1 && j0 + kBk - 1 > i0 + a.offset);
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int n = 0; n < kSt; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[mt][n][e] * a.scale_log2;
          if (need_mask) {
            const int col = j0 + n * 8 + 2 * t + (e & 1), row = row0 + mt * 16 + (e / 2) * 8;
            if (col >= key_limit || (a.mask == 1 && col > row + a.offset)) x = neg_inf;
          }
          s[mt][n][e] = x;
        }

        // Online softmax on the rows this thread holds (r = 0: row g, 1: g + 8).
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = m[mt][r];
#pragma unroll
        for (int n = 0; n < kSt; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == neg_inf ? 0.f : mx;  // nothing visible yet: every P is exp2(−inf) = 0
        float corr = exp2f(m[mt][r] - base);          // m = −inf: 0
        if (kBug) corr = m[mt][r] == neg_inf ? 0.f : exp2f(base - m[mt][r]);
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < kSt; ++n) {
          s[mt][n][2 * r] = exp2f(s[mt][n][2 * r] - base);
          s[mt][n][2 * r + 1] = exp2f(s[mt][n][2 * r + 1] - base);
          sum += s[mt][n][2 * r] + s[mt][n][2 * r + 1];
        }
        l[mt][r] = l[mt][r] * corr + sum;  // this thread's columns; the quad is summed at the end
        m[mt][r] = mx;
#pragma unroll
        for (int n = 0; n < kDt; ++n) acc[mt][n][2 * r] *= corr, acc[mt][n][2 * r + 1] *= corr;
      }

      // O += P V, P from the score registers (rounded to Elem).
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {
      uint32_t pa[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        pa[mt][0] = M::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = M::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = M::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = M::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vb[4];
        cuda_detail::ldmatrix_x4_trans(
            vb, vt + swizzle<D>(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8, dp * 2 + lane / 16));
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          M::run(acc[mt][2 * dp], pa[mt], vb[0], vb[1]);
          M::run(acc[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }

  // O = acc / l, LSE = ln 2 · m + ln l; O = 0 and LSE = −inf where l = 0.
  Elem* og = static_cast<Elem*>(a.o) + (size_t(b) * a.hq + h) * size_t(a.nq) * D;
  float* lg = a.lse + (size_t(b) * a.hq + h) * size_t(a.nq);
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr = l[mt][r];
      lr += __shfl_xor_sync(0xffffffffu, lr, 1);
      lr += __shfl_xor_sync(0xffffffffu, lr, 2);
      const int row = row0 + mt * 16 + r * 8;
      if (row >= a.nq) continue;
      const float inv = lr > 0.f ? 1.f / lr : 0.f;
#pragma unroll
      for (int n = 0; n < kDt; ++n) {
        const uint32_t packed = M::pack(acc[mt][n][2 * r] * inv, acc[mt][n][2 * r + 1] * inv);
        *reinterpret_cast<uint32_t*>(og + size_t(row) * D + n * 8 + 2 * t) = packed;
      }
      if (t == 0) lg[row] = lr > 0.f ? m[mt][r] * 0.69314718055994531f + logf(lr) : neg_inf;
    }
}

template <typename Elem, int D, int kWarps, int kMt, bool kBug = false>
void launch_tc(const TcParams& p, const TcArgs& a, cudaStream_t stream) {
  constexpr size_t smem = tc_smem_bytes<D, kWarps * kMt>();
  static const bool configured = [] {
    check(cudaFuncSetAttribute(tc_forward_kernel<Elem, D, kWarps, kMt, kBug>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "cudaFuncSetAttribute");
    return true;
  }();
  (void)configured;
  constexpr int Bq = 16 * kMt * kWarps;
  const dim3 grid(unsigned((p.nq + Bq - 1) / Bq), unsigned(p.heads_q), unsigned(p.batch));
  tc_forward_kernel<Elem, D, kWarps, kMt, kBug><<<grid, kWarps * 32, smem, stream>>>(a);
  check(cudaGetLastError(), "attention tensor-core forward launch");
}

template <typename Elem, int D>
void dispatch_tc_d(const TcParams& p, const TcArgs& a, cudaStream_t stream, int warps, int rows) {
  if (rows == 32)
    launch_tc<Elem, D, 4, 2>(p, a, stream);
  else if (warps == 8)
    launch_tc<Elem, D, 8, 1>(p, a, stream);
  else
    launch_tc<Elem, D, 4, 1>(p, a, stream);
}

template <typename Elem>
void dispatch_tc(const TcParams& p, const TcArgs& a, cudaStream_t stream, int warps, int rows) {
  if (p.dim == 64)
    dispatch_tc_d<Elem, 64>(p, a, stream, warps, rows);
  else
    dispatch_tc_d<Elem, 128>(p, a, stream, warps, rows);
}

}  // namespace

size_t forward(const HostProblem& p, float scale, const float* q, const float* k, const float* v, float* o,
               float* lse) {
  return generic_forward<float>(p, scale, q, k, v, o, lse);
}
size_t forward(const HostProblem& p, double scale, const double* q, const double* k, const double* v,
               double* o, double* lse) {
  return generic_forward<double>(p, scale, q, k, v, o, lse);
}

bool tc_supported(const TcParams& p, const char** why) {
  const char* reason = nullptr;
  if (p.dim != 64 && p.dim != 128)
    reason = "head dimension must be 64 or 128";
  else if (p.batch < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.nq < 1 || p.nk < 1)
    reason = "every dimension must be at least 1";
  else if (p.heads_q % p.heads_kv != 0)
    reason = "heads_q must be a multiple of heads_kv";
  else if (p.warps != 0 && p.warps != 4 && p.warps != 8)
    reason = "warps must be 0, 4 or 8";
  else if (p.rows_per_warp != 0 && p.rows_per_warp != 16 && p.rows_per_warp != 32)
    reason = "rows_per_warp must be 0, 16 or 32";
  else if (p.rows_per_warp == 32 && p.warps == 8)
    reason = "32 rows per warp runs with 4 warps";
  else if ((p.kernel == TcKernel::wgmma || p.kernel == TcKernel::wgmma_ws) &&
           (p.warps != 0 || p.rows_per_warp != 0 || p.planted_bug))
    reason = "the wgmma kernels have one tiling (warps and rows_per_warp 0) and no planted bug";
  else if ((p.kernel == TcKernel::wgmma || p.kernel == TcKernel::wgmma_ws) && !tc_wgmma_available())
    reason = "the wgmma kernels need a compute capability 9.0 device and the sm_90a build";
  else if (p.kernel == TcKernel::wgmma_ws && p.ws_block_k != 0 && p.ws_block_k != 64 && p.ws_block_k != 128)
    reason = "ws_block_k must be 0, 64 or 128";
  else if (p.mask == TcMask::key_padding && p.key_lengths == nullptr)
    reason = "key_padding needs key_lengths";
  else if (p.planted_bug && (p.type != Half::f16 || p.dim != 64))
    reason = "the planted bug is compiled for f16, D = 64 only";
  if (why) *why = reason;
  return reason == nullptr;
}

void tc_forward_async(const TcParams& p, void* stream) {
  const char* why = nullptr;
  if (!tc_supported(p, &why)) throw std::runtime_error(std::string("attention tensor-core forward: ") + why);
  const float scale = p.scale != 0 ? p.scale : 1.f / std::sqrt(float(p.dim));
  const TcArgs a{
      p.heads_q, p.heads_kv, p.nq, p.nk, int(p.mask), p.nk - p.nq, p.key_lengths, scale * 1.4426950408889634f,
      p.q,       p.k,        p.v,  p.o,  p.lse};
  const int warps = p.warps != 0 ? p.warps : 4;
  const int rows = p.rows_per_warp != 0 ? p.rows_per_warp : (p.warps == 0 ? 32 : 16);
  const auto s = static_cast<cudaStream_t>(stream);
  // automatic: the warp-specialized kernel where the sm_90a image runs (the
  // fastest measured: docs/CUDA_ATTENTION_NOTES.md), else mma.sync.
  const bool hopper = !p.planted_bug && p.warps == 0 && p.rows_per_warp == 0 && tc_wgmma_available();
  const bool wgmma = p.kernel == TcKernel::wgmma && hopper;
  if (p.kernel == TcKernel::wgmma_ws || (p.kernel == TcKernel::automatic && hopper))
    cuda_detail::ws_launch(p.type == Half::bf16, p.dim, p.batch, p.ws_block_k != 0 ? p.ws_block_k : 128,
                           p.ws_pingpong, a, s);
  else if (wgmma)
    cuda_detail::wgmma_launch(p.type == Half::bf16, p.dim, p.batch, p.wgmma_min_blocks, a, s);
  else if (p.planted_bug)
    launch_tc<__half, 64, 4, 1, true>(p, a, s);
  else if (p.type == Half::f16)
    dispatch_tc<__half>(p, a, s, warps, rows);
  else
    dispatch_tc<__nv_bfloat16>(p, a, s, warps, rows);
}

bool tc_wgmma_available() {
  return cuda_detail::wgmma_available();
}

float round_half(Half type, float x) {
  return type == Half::f16 ? __half2float(__float2half_rn(x)) : __bfloat162float(__float2bfloat16_rn(x));
}

void tc_forward_host(Half type, int batch, int heads_q, int heads_kv, int nq, int nk, int dim, TcMask mask,
                     const int* key_lengths, float scale, const float* q, const float* k, const float* v,
                     float* o, float* lse, int warps, int rows_per_warp, bool planted_bug, TcKernel kernel,
                     int ws_block_k, bool ws_pingpong) {
  if (device_count() <= 0) throw std::runtime_error("no CUDA device");
  const size_t qn = size_t(batch) * heads_q * nq * dim, kvn = size_t(batch) * heads_kv * nk * dim,
               rows = size_t(batch) * heads_q * nq;
  auto to16 = [type](const float* x, size_t n) {
    std::vector<uint16_t> out(n);
    for (size_t i = 0; i < n; ++i) {
      if (type == Half::f16) {
        const __half h = __float2half_rn(x[i]);
        out[i] = *reinterpret_cast<const uint16_t*>(&h);
      } else {
        const __nv_bfloat16 h = __float2bfloat16_rn(x[i]);
        out[i] = *reinterpret_cast<const uint16_t*>(&h);
      }
    }
    return out;
  };
  const std::vector<uint16_t> hq = to16(q, qn), hk = to16(k, kvn), hv = to16(v, kvn);
  DeviceBuffer<uint16_t> dq(qn), dk(kvn), dv(kvn), d_o(qn);
  DeviceBuffer<float> dlse(rows);
  DeviceBuffer<int> dlen(mask == TcMask::key_padding ? size_t(batch) : 0);
  dq.upload(hq.data()), dk.upload(hk.data()), dv.upload(hv.data());
  if (mask == TcMask::key_padding) dlen.upload(key_lengths);
  // Outputs poisoned (all-ones bytes: NaN in f16, bf16 and f32).
  check(cudaMemset(d_o.ptr, 0xFF, qn * sizeof(uint16_t)), "cudaMemset");
  check(cudaMemset(dlse.ptr, 0xFF, rows * sizeof(float)), "cudaMemset");
  TcParams p;
  p.type = type, p.batch = batch, p.heads_q = heads_q, p.heads_kv = heads_kv, p.nq = nq, p.nk = nk;
  p.dim = dim, p.mask = mask, p.scale = scale, p.planted_bug = planted_bug;
  p.warps = warps, p.rows_per_warp = rows_per_warp, p.kernel = kernel;
  p.ws_block_k = ws_block_k, p.ws_pingpong = ws_pingpong;
  p.q = dq.ptr, p.k = dk.ptr, p.v = dv.ptr, p.o = d_o.ptr, p.lse = dlse.ptr, p.key_lengths = dlen.ptr;
  tc_forward_async(p, nullptr);
  check(cudaDeviceSynchronize(), "attention tensor-core forward");
  std::vector<uint16_t> ho(qn);
  d_o.download(ho.data());
  dlse.download(lse);
  for (size_t i = 0; i < qn; ++i) {
    if (type == Half::f16) {
      __half h;
      *reinterpret_cast<uint16_t*>(&h) = ho[i];
      o[i] = __half2float(h);
    } else {
      __nv_bfloat16 h;
      *reinterpret_cast<uint16_t*>(&h) = ho[i];
      o[i] = __bfloat162float(h);
    }
  }
}

}  // namespace kprop::attention::cuda_raw
