// Flash attention backward on a CUDA device (FlashAttention-2 order), in the
// case's precision. Four kernels, every reduction in a fixed order, so the
// results are bitwise run-to-run deterministic (no atomics):
//  1. forward: one thread per query row, online softmax key by key (running
//     max, rescaled sum and accumulator in O itself); a row that sees no key
//     gets O = 0, LSE = -inf.
//  2. D pre-pass: one thread per row, D = rowsum(dO ⊙ O).
//  3. dK, dV: one block per (batch, kv head, key tile). The K and V tile and
//     the dK, dV accumulators stay in shared memory while the block loops over
//     the query heads of its GQA group and the query tiles that can see the
//     tile (causal: from the first row that sees its first key), recomputing
//     P = exp(S − LSE) (0 where masked or the row is fully masked) and
//     dS = P ⊙ (dO·Vᵀ − D); dV += Pᵀ·dO, dK += dSᵀ·Q, scaled once at the end.
//  4. dQ: one block per (batch, query head, query tile) looping over the key
//     tiles its rows can see, dQ += dS·K in shared memory, scaled at the end.
//     Recomputing dS here instead of atomically adding dQ from kernel 3 costs
//     a second pass over the scores and buys determinism.
// Tiles are the case's Bq×Bk (clamped to Nq, Nk; halved where the device's
// shared memory is short): the per-block shared memory is
// O(Bq·Bk + (Bq + Bk)·D), never Nq×Nk. Plain IEEE exp/log (no fast math).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/attention/attention_bwd_cuda.h"
#include "kernels/cuda_support.cuh"

namespace kprop::attention::cuda_bwd_raw {
namespace {

constexpr int kThreads = 128;  // per block in the tile kernels
constexpr int kRowThreads = 128;

using cuda_support::check;
using cuda_support::dev_exp;
using cuda_support::dev_log;
using cuda_support::download;

using cuda_support::dev_log;

// Everything the kernels need about the case, by value.
struct DevMask {
  int kind, causal_offset;
  const int* key_lengths;  // device
  const uint8_t* allowed;  // device
};
struct DevDims {
  int batch, hq, hkv, nq, nk, dim, bq, bk;
  __host__ __device__ int group() const { return hq / hkv; }
};

__device__ inline bool visible(const DevMask& m, const DevDims& s, int b, int i, int j) {
  switch (m.kind) {
    case 1:
      return j <= i + m.causal_offset;
    case 2:
      return j < m.key_lengths[b];
    case 3:
      return m.allowed[(static_cast<size_t>(b) * s.nq + i) * s.nk + j] != 0;
    default:
      return true;
  }
}

// Keys [0, end) hold every key visible to a row of [i0, i0 + rows).
__device__ inline int key_end(const DevMask& m, const DevDims& s, int b, int i0, int rows) {
  if (m.kind == 1) return min(max(i0 + rows + m.causal_offset, 0), s.nk);
  if (m.kind == 2) return min(m.key_lengths[b], s.nk);
  return s.nk;
}

template <typename T>
__device__ inline T dot(const T* a, const T* b, int n) {
  T sum = 0;
  for (int d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// ---------------------------------------------------------------- forward
template <typename T>
__global__ void forward_kernel(DevDims s, DevMask m, T scale, const T* __restrict__ q,
                               const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
                               T* __restrict__ lse) {
  const size_t rows = static_cast<size_t>(s.batch) * s.hq * s.nq;
  const size_t row = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const int i = static_cast<int>(row % s.nq), h = static_cast<int>(row / s.nq % s.hq),
            b = static_cast<int>(row / s.nq / s.hq);
  const size_t kv0 = (static_cast<size_t>(b) * s.hkv + h / s.group()) * s.nk;
  const T* qr = q + row * s.dim;
  T* orow = o + row * s.dim;
  for (int d = 0; d < s.dim; ++d) orow[d] = 0;
  const T neg_inf = -static_cast<T>(INFINITY);
  T mx = neg_inf, l = 0;
  for (int j = 0; j < s.nk; ++j) {
    if (!visible(m, s, b, i, j)) continue;
    const T* kr = k + (kv0 + j) * s.dim;
    const T* vr = v + (kv0 + j) * s.dim;
    const T sc = scale * dot(qr, kr, s.dim);
    if (sc > mx) {
      const T corr = dev_exp(mx - sc);  // 0 on the first visible key
      l *= corr;
      for (int d = 0; d < s.dim; ++d) orow[d] *= corr;
      mx = sc;
    }
    const T p = dev_exp(sc - mx);
    l += p;
    for (int d = 0; d < s.dim; ++d) orow[d] += p * vr[d];
  }
  if (l == T(0)) {  // no visible key: O = 0 (already), LSE = -inf
    lse[row] = neg_inf;
    return;
  }
  for (int d = 0; d < s.dim; ++d) orow[d] /= l;
  lse[row] = mx + dev_log(l);
}

// ---------------------------------------------------------------- D pre-pass
template <typename T>
__global__ void d_kernel(size_t rows, int dim, const T* __restrict__ d_out, const T* __restrict__ o,
                         T* __restrict__ d) {
  const size_t row = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  d[row] = dot(d_out + row * dim, o + row * dim, dim);
}

// ---------------------------------------------------------------- shared tiles
// Loads `rows` rows of `dim` from src (row-major) into dst with stride dim.
template <typename T>
__device__ inline void load_rows(T* dst, const T* __restrict__ src, int rows, int dim) {
  for (int e = threadIdx.x; e < rows * dim; e += blockDim.x) dst[e] = src[e];
}

// P and dS of query rows [i0, i0 + rows) of head h against keys [j0, j0 + cols):
// P[i][j] = exp(scale·Q_i·K_j − LSE_i) where visible and the row is not
// fully masked, else 0; dS = P ⊙ (dO_i·V_j − D_i). Tiles in shared memory:
// Qs, dOs [rows][dim], Ks, Vs [cols][dim], Ps, dSs [rows][bk].
template <typename T>
__device__ void probabilities(const DevDims& s, const DevMask& m, T scale, int b, int i0, int rows, int j0,
                              int cols, const T* Qs, const T* dOs, const T* Ks, const T* Vs, const T* lse_s,
                              const T* d_s, T* Ps, T* dSs) {
  const T neg_inf = -static_cast<T>(INFINITY);
  for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
    const int i = e / cols, j = e % cols;
    T p = 0, ds = 0;
    if (lse_s[i] != neg_inf && visible(m, s, b, i0 + i, j0 + j)) {
      p = dev_exp(scale * dot(Qs + i * s.dim, Ks + j * s.dim, s.dim) - lse_s[i]);
      ds = p * (dot(dOs + i * s.dim, Vs + j * s.dim, s.dim) - d_s[i]);
    }
    Ps[i * s.bk + j] = p;
    dSs[i * s.bk + j] = ds;
  }
}

// Shared-memory layouts (elements of T).
struct DkvLayout {
  size_t ks, vs, dks, dvs, qs, dos, ps, dss, lse, d, total;
  __host__ __device__ explicit DkvLayout(const DevDims& s) {
    const size_t kd = size_t(s.bk) * s.dim, qd = size_t(s.bq) * s.dim, qk = size_t(s.bq) * s.bk;
    ks = 0, vs = ks + kd, dks = vs + kd, dvs = dks + kd, qs = dvs + kd, dos = qs + qd, ps = dos + qd,
    dss = ps + qk, lse = dss + qk, d = lse + s.bq, total = d + s.bq;
  }
};
struct DqLayout {
  size_t qs, dos, dqs, ks, vs, ps, dss, lse, d, total;
  __host__ __device__ explicit DqLayout(const DevDims& s) {
    const size_t kd = size_t(s.bk) * s.dim, qd = size_t(s.bq) * s.dim, qk = size_t(s.bq) * s.bk;
    qs = 0, dos = qs + qd, dqs = dos + qd, ks = dqs + qd, vs = ks + kd, ps = vs + kd, dss = ps + qk,
    lse = dss + qk, d = lse + s.bq, total = d + s.bq;
  }
};

// ---------------------------------------------------------------- dK, dV
template <typename T>
__global__ void dkdv_kernel(DevDims s, DevMask m, T scale, const T* __restrict__ q, const T* __restrict__ k,
                            const T* __restrict__ v, const T* __restrict__ d_out, const T* __restrict__ lse,
                            const T* __restrict__ dd, T* __restrict__ dk, T* __restrict__ dv) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sm = reinterpret_cast<T*>(smem_raw);
  const DkvLayout L(s);
  T *Ks = sm + L.ks, *Vs = sm + L.vs, *dKs = sm + L.dks, *dVs = sm + L.dvs, *Qs = sm + L.qs,
    *dOs = sm + L.dos, *Ps = sm + L.ps, *dSs = sm + L.dss, *lse_s = sm + L.lse, *d_s = sm + L.d;
  const int n_tiles = (s.nk + s.bk - 1) / s.bk;
  const int kt = blockIdx.x % n_tiles, kvh = blockIdx.x / n_tiles % s.hkv, b = blockIdx.x / n_tiles / s.hkv;
  const int j0 = kt * s.bk, cols = min(s.bk, s.nk - j0);
  const size_t kv0 = (static_cast<size_t>(b) * s.hkv + kvh) * s.nk + j0;
  load_rows(Ks, k + kv0 * s.dim, cols, s.dim);
  load_rows(Vs, v + kv0 * s.dim, cols, s.dim);
  for (int e = threadIdx.x; e < cols * s.dim; e += blockDim.x) dKs[e] = 0, dVs[e] = 0;
  __syncthreads();
  // Query tiles that can see this key tile: causal rows from the first one
  // that sees key j0; none when key padding hides the whole tile.
  const int first_row = m.kind == 1 ? max(0, j0 - m.causal_offset) : 0;
  const bool hidden = m.kind == 2 && j0 >= m.key_lengths[b];
  if (!hidden)
    for (int hh = 0; hh < s.group(); ++hh) {
      const size_t row0 = (static_cast<size_t>(b) * s.hq + kvh * s.group() + hh) * s.nq;
      for (int i0 = first_row / s.bq * s.bq; i0 < s.nq; i0 += s.bq) {
        const int rows = min(s.bq, s.nq - i0);
        load_rows(Qs, q + (row0 + i0) * s.dim, rows, s.dim);
        load_rows(dOs, d_out + (row0 + i0) * s.dim, rows, s.dim);
        for (int i = threadIdx.x; i < rows; i += blockDim.x)
          lse_s[i] = lse[row0 + i0 + i], d_s[i] = dd[row0 + i0 + i];
        __syncthreads();
        probabilities(s, m, scale, b, i0, rows, j0, cols, Qs, dOs, Ks, Vs, lse_s, d_s, Ps, dSs);
        __syncthreads();
        for (int e = threadIdx.x; e < cols * s.dim; e += blockDim.x) {
          const int j = e / s.dim, d = e % s.dim;
          T av = 0, ak = 0;
          for (int i = 0; i < rows; ++i) {
            av += Ps[i * s.bk + j] * dOs[i * s.dim + d];
            ak += dSs[i * s.bk + j] * Qs[i * s.dim + d];
          }
          dVs[e] += av;
          dKs[e] += ak;
        }
        __syncthreads();  // the tiles are overwritten next
      }
    }
  for (int e = threadIdx.x; e < cols * s.dim; e += blockDim.x) {
    dk[kv0 * s.dim + e] = scale * dKs[e];
    dv[kv0 * s.dim + e] = dVs[e];
  }
}

// ---------------------------------------------------------------- dQ
template <typename T>
__global__ void dq_kernel(DevDims s, DevMask m, T scale, const T* __restrict__ q, const T* __restrict__ k,
                          const T* __restrict__ v, const T* __restrict__ d_out, const T* __restrict__ lse,
                          const T* __restrict__ dd, T* __restrict__ dq) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sm = reinterpret_cast<T*>(smem_raw);
  const DqLayout L(s);
  T *Qs = sm + L.qs, *dOs = sm + L.dos, *dQs = sm + L.dqs, *Ks = sm + L.ks, *Vs = sm + L.vs, *Ps = sm + L.ps,
    *dSs = sm + L.dss, *lse_s = sm + L.lse, *d_s = sm + L.d;
  const int n_tiles = (s.nq + s.bq - 1) / s.bq;
  const int qt = blockIdx.x % n_tiles, h = blockIdx.x / n_tiles % s.hq, b = blockIdx.x / n_tiles / s.hq;
  const int i0 = qt * s.bq, rows = min(s.bq, s.nq - i0);
  const size_t row0 = (static_cast<size_t>(b) * s.hq + h) * s.nq + i0;
  const size_t kv0 = (static_cast<size_t>(b) * s.hkv + h / s.group()) * s.nk;
  load_rows(Qs, q + row0 * s.dim, rows, s.dim);
  load_rows(dOs, d_out + row0 * s.dim, rows, s.dim);
  for (int e = threadIdx.x; e < rows * s.dim; e += blockDim.x) dQs[e] = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) lse_s[i] = lse[row0 + i], d_s[i] = dd[row0 + i];
  const int end = key_end(m, s, b, i0, rows);
  for (int j0 = 0; j0 < end; j0 += s.bk) {
    const int cols = min(s.bk, s.nk - j0);
    __syncthreads();  // the previous K, V and dS tiles are no longer read
    load_rows(Ks, k + (kv0 + j0) * s.dim, cols, s.dim);
    load_rows(Vs, v + (kv0 + j0) * s.dim, cols, s.dim);
    __syncthreads();
    probabilities(s, m, scale, b, i0, rows, j0, cols, Qs, dOs, Ks, Vs, lse_s, d_s, Ps, dSs);
    __syncthreads();
    for (int e = threadIdx.x; e < rows * s.dim; e += blockDim.x) {
      const int i = e / s.dim, d = e % s.dim;
      T a = 0;
      for (int j = 0; j < cols; ++j) a += dSs[i * s.bk + j] * Ks[j * s.dim + d];
      dQs[e] += a;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < rows * s.dim; e += blockDim.x) dq[row0 * s.dim + e] = scale * dQs[e];
}

// ---------------------------------------------------------------- host side
using Buffers = cuda_support::DeviceBuffers;

// Raises a kernel's dynamic shared-memory limit when it needs more than the
// default 48 KiB; refuses what the device cannot give.
template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes, const char* what) {
  int dev = 0, optin = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
        "cudaDeviceGetAttribute");
  if (bytes > static_cast<size_t>(optin))
    throw std::runtime_error(std::string("attention bwd cuda: ") + what + " tiles need " +
                             std::to_string(bytes) + " bytes of shared memory, the device allows " +
                             std::to_string(optin));
  if (bytes > 48 * 1024)
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
          "cudaFuncSetAttribute");
}

unsigned blocks_for(size_t n, int threads) {
  return static_cast<unsigned>((n + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads));
}

template <typename T>
size_t backward_t(const Dims& dims, const Mask& mask, T scale, const T* hq, const T* hk, const T* hv,
                  const T* hdo, T* ho, T* hlse, T* hd, T* hdq, T* hdk, T* hdv) {
  if (device_count() <= 0) throw std::runtime_error("no CUDA device");
  if (dims.batch < 1 || dims.heads_kv < 1 || dims.heads_q < dims.heads_kv ||
      dims.heads_q % dims.heads_kv != 0 || dims.nq < 1 || dims.nk < 1 || dims.dim < 1 || dims.block_q < 1 ||
      dims.block_k < 1)
    throw std::runtime_error("attention bwd cuda: invalid shape");
  DevDims s{dims.batch,
            dims.heads_q,
            dims.heads_kv,
            dims.nq,
            dims.nk,
            dims.dim,
            std::min(dims.block_q, dims.nq),
            std::min(dims.block_k, dims.nk)};
  const size_t rows = size_t(s.batch) * s.hq * s.nq, q_size = rows * s.dim,
               kv_size = size_t(s.batch) * s.hkv * s.nk * s.dim;
  Buffers buf;
  const T *q = buf.upload(hq, q_size), *k = buf.upload(hk, kv_size), *v = buf.upload(hv, kv_size),
          *d_out = buf.upload(hdo, q_size);
  T *o = buf.alloc<T>(q_size), *lse = buf.alloc<T>(rows), *dd = buf.alloc<T>(rows),
    *dq = buf.alloc<T>(q_size), *dk = buf.alloc<T>(kv_size), *dv = buf.alloc<T>(kv_size);
  DevMask m{mask.kind, mask.causal_offset, nullptr, nullptr};
  if (mask.kind == 2) m.key_lengths = buf.upload(mask.key_lengths, size_t(s.batch));
  if (mask.kind == 3) m.allowed = buf.upload(mask.allowed, size_t(s.batch) * s.nq * s.nk);

  // Tiles the device cannot hold are halved (the longer side first) until
  // they fit, as the forward does: a case's tiles are a request, and at f64,
  // D = 64, 64×64 tiles already need more than an H200's 227 KiB per block.
  int dev = 0, optin = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
        "cudaDeviceGetAttribute");
  while (std::max(DkvLayout(s).total, DqLayout(s).total) * sizeof(T) > size_t(optin)) {
    if (s.bq == 1 && s.bk == 1)
      throw cuda_raw::DeviceLimit("the CUDA backward's 1x1 tiles at D = " + std::to_string(s.dim) +
                                  " need more than the " + std::to_string(optin) +
                                  " bytes of shared memory a block may have here");
    if (s.bq >= s.bk)
      s.bq = (s.bq + 1) / 2;
    else
      s.bk = (s.bk + 1) / 2;
  }
  const size_t dkdv_bytes = DkvLayout(s).total * sizeof(T), dq_bytes = DqLayout(s).total * sizeof(T);
  allow_shared(dkdv_kernel<T>, dkdv_bytes, "dK/dV");
  allow_shared(dq_kernel<T>, dq_bytes, "dQ");

  forward_kernel<T><<<blocks_for(rows, kRowThreads), kRowThreads>>>(s, m, scale, q, k, v, o, lse);
  check(cudaGetLastError(), "forward launch");
  d_kernel<T><<<blocks_for(rows, kRowThreads), kRowThreads>>>(rows, s.dim, d_out, o, dd);
  check(cudaGetLastError(), "D launch");
  const unsigned kv_blocks = static_cast<unsigned>(s.batch * s.hkv * ((s.nk + s.bk - 1) / s.bk));
  dkdv_kernel<T><<<kv_blocks, kThreads, dkdv_bytes>>>(s, m, scale, q, k, v, d_out, lse, dd, dk, dv);
  check(cudaGetLastError(), "dK/dV launch");
  const unsigned q_blocks = static_cast<unsigned>(s.batch * s.hq * ((s.nq + s.bq - 1) / s.bq));
  dq_kernel<T><<<q_blocks, kThreads, dq_bytes>>>(s, m, scale, q, k, v, d_out, lse, dd, dq);
  check(cudaGetLastError(), "dQ launch");
  check(cudaDeviceSynchronize(), "kernels");
  download(ho, o, q_size);
  download(hlse, lse, rows);
  download(hd, dd, rows);
  download(hdq, dq, q_size);
  download(hdk, dk, kv_size);
  download(hdv, dv, kv_size);
  return std::max(dkdv_bytes, dq_bytes);
}

}  // namespace

int device_count() {
  return cuda_support::device_count();
}

size_t backward(const Dims& dims, const Mask& mask, float scale, const float* q, const float* k,
                const float* v, const float* d_out, float* o, float* lse, float* d, float* dq, float* dk,
                float* dv) {
  return backward_t(dims, mask, scale, q, k, v, d_out, o, lse, d, dq, dk, dv);
}

size_t backward(const Dims& dims, const Mask& mask, double scale, const double* q, const double* k,
                const double* v, const double* d_out, double* o, double* lse, double* d, double* dq,
                double* dk, double* dv) {
  return backward_t(dims, mask, scale, q, k, v, d_out, o, lse, d, dq, dk, dv);
}

}  // namespace kprop::attention::cuda_bwd_raw
