// Paged KV cache on a CUDA device: the block pool in device memory, a
// scatter kernel for each step's K/V writes, and a paged decode-attention
// kernel that reads every key and value through the block table.
//
// Precision as the CPU engines' (kvcache.h): the pool stores K and V in the
// case's dtype (f64, f32, f16 or bf16; the write rounds each element to
// nearest even), attention runs in f64 for f64 cases and in f32 otherwise,
// and each output element is rounded to the dtype when stored.
//
// Attention: one block per (query token, kv head), one warp per query head of
// the GQA group (heads beyond the block's warps loop). A warp walks the keys
// 32 at a time, one key per lane: the lane looks its key's block up in the
// table, computes the score, and the warp runs the online softmax (chunk max
// and sum by butterfly shuffles, so every lane holds the same m and l); each
// lane then owns channels lane, lane + 32, ... of the output row and adds the
// chunk's p_j · V_j, with p_j and the key's slot broadcast from lane j. The
// output row in global memory is the accumulator (any head_dim, no shared
// memory; it holds values of the accumulation type). Keys past the query's
// length are never read, so poison and stale blocks cannot leak. Every
// reduction has a fixed order: bitwise deterministic. Plain exp (expf in f32,
// within 2 ulp), IEEE division and sqrt.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/kvcache/kvcache_cuda.h"

namespace kprop::kvcache::cuda_raw {
namespace {

constexpr int kMaxWarps = 8;  // warps (query heads at once) per attention block

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err));
}

// Cache element conversions: double -> storage (round to nearest even),
// storage -> the accumulation type, and an accumulated value rounded to the
// storage type, returned as the double the host reads.
template <typename C>
__device__ C to_cache(double x) {
  if constexpr (std::is_same_v<C, __half>)
    return __double2half(x);
  else if constexpr (std::is_same_v<C, __nv_bfloat16>)
    return __double2bfloat16(x);
  else
    return static_cast<C>(x);
}
template <typename A, typename C>
__device__ A widen(C x) {
  if constexpr (std::is_same_v<C, __half>)
    return __half2float(x);
  else if constexpr (std::is_same_v<C, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return static_cast<A>(x);
}
template <typename C, typename A>
__device__ double stored(A x) {
  return static_cast<double>(widen<A>(to_cache<C>(static_cast<double>(x))));
}

template <typename C>
__global__ void fill_kernel(C* __restrict__ x, size_t n, double value) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = to_cache<C>(value);
}

// Token i's K and V rows (width elements each) to pool slot slots[i].
template <typename C>
__global__ void write_kernel(int n, size_t width, const int* __restrict__ slots, const double* __restrict__ k,
                             const double* __restrict__ v, C* __restrict__ pool_k, C* __restrict__ pool_v) {
  const size_t total = static_cast<size_t>(n) * width;
  for (size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = e / width, c = e % width;
    const size_t at = static_cast<size_t>(slots[i]) * width + c;
    pool_k[at] = to_cache<C>(k[e]);
    pool_v[at] = to_cache<C>(v[e]);
  }
}

template <typename C>
struct AttendArgs {
  int hkv, group, dim, page;
  double alpha;  // 1 / sqrt(D), rounded to the accumulation type by the kernel
  const C* pool_k;
  const C* pool_v;
  const double* q;  // [n][Hq][D]
  const int* table_begin;
  const int* lengths;
  const int* tables;
  double* out;  // [n][Hq][D]: the accumulator while running, then the outputs
};

template <typename A>
__device__ inline A warp_max(A x) {
  for (int off = 16; off > 0; off /= 2) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
template <typename A>
__device__ inline A warp_sum(A x) {
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// C: the cache's storage type; A: the accumulation type (double or float).
template <typename C, typename A>
__global__ void attend_kernel(AttendArgs<C> a) {
  const int qi = blockIdx.x / a.hkv, kvh = blockIdx.x % a.hkv;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int n = a.lengths[qi];
  const int* table = a.tables + a.table_begin[qi];
  const size_t hq = static_cast<size_t>(a.hkv) * a.group;
  const int chunks_d = (a.dim + 31) / 32;
  const A alpha = static_cast<A>(a.alpha);
  for (int g = warp; g < a.group; g += warps) {  // warp-uniform
    const size_t row = static_cast<size_t>(qi) * hq + static_cast<size_t>(kvh) * a.group + g;
    const double* qv = a.q + row * a.dim;
    double* o = a.out + row * a.dim;
    for (int d = lane; d < a.dim; d += 32) o[d] = 0;
    A m = -INFINITY, l = 0;
    for (int start = 0; start < n; start += 32) {
      const int j = start + lane, count = min(32, n - start);
      A s = -INFINITY;
      size_t slot = 0;
      if (j < n) {
        slot = static_cast<size_t>(table[j / a.page]) * a.page + j % a.page;
        const C* kp = a.pool_k + (slot * a.hkv + kvh) * a.dim;
        A dot = 0;
        for (int d = 0; d < a.dim; ++d) dot += static_cast<A>(qv[d]) * widen<A>(kp[d]);
        s = alpha * dot;
      }
      const A m_new = fmax(m, warp_max(s));  // finite: lane 0 always holds a key
      const A corr = exp(m - m_new);         // 0 on the first chunk
      const A p = j < n ? exp(s - m_new) : A(0);
      l = l * corr + warp_sum(p);
      for (int c = 0; c < chunks_d; ++c) {  // the same trip count on every lane
        const int d = c * 32 + lane;
        A acc = d < a.dim ? static_cast<A>(o[d]) * corr : A(0);
        for (int jj = 0; jj < count; ++jj) {
          const A pj = __shfl_sync(0xffffffffu, p, jj);
          const unsigned long long sj = __shfl_sync(0xffffffffu, static_cast<unsigned long long>(slot), jj);
          if (d < a.dim) acc += pj * widen<A>(a.pool_v[(static_cast<size_t>(sj) * a.hkv + kvh) * a.dim + d]);
        }
        if (d < a.dim) o[d] = static_cast<double>(acc);
      }
      m = m_new;
    }
    for (int d = lane; d < a.dim; d += 32) o[d] = stored<C, A>(static_cast<A>(o[d]) / l);
  }
}

// A device buffer that grows on demand and is freed on every path.
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t cap = 0;
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr); }
  T* reserve(size_t n) {
    n = std::max<size_t>(n, 1);
    if (n > cap) {
      check(cudaFree(ptr), "cudaFree");
      ptr = nullptr, cap = 0;
      check(cudaMalloc(&ptr, n * sizeof(T)), "cudaMalloc");
      cap = n;
    }
    return ptr;
  }
  T* upload(const T* h, size_t n) {
    reserve(n);
    if (n > 0) check(cudaMemcpy(ptr, h, n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    return ptr;
  }
};

unsigned blocks_for(size_t n, int threads) {
  return static_cast<unsigned>(std::max<size_t>((n + threads - 1) / threads, 1));
}

}  // namespace

struct PagedPool::Impl {
  int blocks = 0, page = 1, hkv = 1, dim = 1;
  Precision precision = Precision::f64;
  size_t width = 1;                 // elements per slot
  DeviceArray<unsigned char> k, v;  // the pool, in the storage type
  DeviceArray<double> stage_k, stage_v, q, out;
  DeviceArray<int> slots, table_begin, lengths, tables;
};

namespace {

// Calls fn(C{}, A{}) with the storage and accumulation types of `p`.
template <typename Fn>
void with_types(Precision p, Fn&& fn) {
  switch (p) {
    case Precision::f64:
      return fn(double{}, double{});
    case Precision::f32:
      return fn(float{}, float{});
    case Precision::f16:
      return fn(__half{}, float{});
    case Precision::bf16:
      return fn(__nv_bfloat16{}, float{});
  }
}

}  // namespace

int device_count() {
  static const int count = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }();
  return count;
}

PagedPool::PagedPool(int blocks, int page_size, int kv_heads, int head_dim, double poison_key,
                     double poison_value, Precision precision)
    : impl_(nullptr) {
  if (device_count() <= 0) throw std::runtime_error("no CUDA device");
  if (blocks < 0 || page_size < 1 || kv_heads < 1 || head_dim < 1)
    throw std::runtime_error("kvcache cuda: invalid pool shape");
  impl_ = new Impl();
  impl_->blocks = blocks, impl_->page = page_size, impl_->hkv = kv_heads, impl_->dim = head_dim;
  impl_->precision = precision;
  impl_->width = static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim);
  try {
    const size_t n = static_cast<size_t>(blocks) * page_size * impl_->width;
    with_types(precision, [&](auto c, auto) {
      using C = decltype(c);
      auto* k = reinterpret_cast<C*>(impl_->k.reserve(n * sizeof(C)));
      auto* v = reinterpret_cast<C*>(impl_->v.reserve(n * sizeof(C)));
      fill_kernel<C><<<blocks_for(n, 256), 256>>>(k, n, poison_key);
      check(cudaGetLastError(), "poison launch");
      fill_kernel<C><<<blocks_for(n, 256), 256>>>(v, n, poison_value);
      check(cudaGetLastError(), "poison launch");
    });
  } catch (...) {
    delete impl_;
    throw;
  }
}

PagedPool::~PagedPool() {
  delete impl_;
}

void PagedPool::write(int n, const int* slots, const double* k, const double* v) {
  if (n <= 0) return;
  Impl& p = *impl_;
  const size_t total = static_cast<size_t>(n) * p.width;
  const int* d_slots = p.slots.upload(slots, static_cast<size_t>(n));
  const double* d_k = p.stage_k.upload(k, total);
  const double* d_v = p.stage_v.upload(v, total);
  with_types(p.precision, [&](auto c, auto) {
    using C = decltype(c);
    write_kernel<C><<<std::min(blocks_for(total, 256), 1024u), 256>>>(
        n, p.width, d_slots, d_k, d_v, reinterpret_cast<C*>(p.k.ptr), reinterpret_cast<C*>(p.v.ptr));
  });
  check(cudaGetLastError(), "write launch");
}

void PagedPool::attend(int n, int group, const double* q, const int* table_begin, const int* lengths,
                       const int* tables, int tables_size, double* out) {
  if (n <= 0) return;
  Impl& p = *impl_;
  if (group < 1) throw std::runtime_error("kvcache cuda: invalid group");
  const size_t rows = static_cast<size_t>(n) * p.hkv * group * p.dim;
  const double* d_q = p.q.upload(q, rows);
  const int* d_begin = p.table_begin.upload(table_begin, static_cast<size_t>(n));
  const int* d_lengths = p.lengths.upload(lengths, static_cast<size_t>(n));
  const int* d_tables = p.tables.upload(tables, static_cast<size_t>(std::max(tables_size, 0)));
  double* d_out = p.out.reserve(rows);
  const int warps = std::min(group, kMaxWarps);
  with_types(p.precision, [&](auto c, auto acc) {
    using C = decltype(c);
    using A = decltype(acc);
    AttendArgs<C> a{};
    a.hkv = p.hkv, a.group = group, a.dim = p.dim, a.page = p.page;
    a.alpha = 1 / std::sqrt(static_cast<double>(p.dim));
    a.pool_k = reinterpret_cast<const C*>(p.k.ptr), a.pool_v = reinterpret_cast<const C*>(p.v.ptr);
    a.q = d_q, a.table_begin = d_begin, a.lengths = d_lengths, a.tables = d_tables, a.out = d_out;
    attend_kernel<C, A><<<static_cast<unsigned>(n) * static_cast<unsigned>(p.hkv), 32 * warps>>>(a);
  });
  check(cudaGetLastError(), "attend launch");
  check(cudaMemcpy(out, d_out, rows * sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

}  // namespace kprop::kvcache::cuda_raw
