// Paged KV cache on a CUDA device, fp64: the block pool in device memory, a
// scatter kernel for each step's K/V writes, and a paged decode-attention
// kernel that reads every key and value through the block table.
//
// Attention: one block per (query token, kv head), one warp per query head of
// the GQA group (heads beyond the block's warps loop). A warp walks the keys
// 32 at a time, one key per lane: the lane looks its key's block up in the
// table, computes the score, and the warp runs the online softmax (chunk max
// and sum by butterfly shuffles, so every lane holds the same m and l); each
// lane then owns channels lane, lane + 32, ... of the output row and adds the
// chunk's p_j · V_j, with p_j and the key's slot broadcast from lane j. The
// output row in global memory is the accumulator (any head_dim, no shared
// memory). Keys past the query's length are never read, so poison and stale
// blocks cannot leak. Every reduction has a fixed order: bitwise
// deterministic. Plain IEEE exp, division and sqrt.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/kvcache/kvcache_cuda.h"

namespace kprop::kvcache::cuda_raw {
namespace {

constexpr int kMaxWarps = 8;  // warps (query heads at once) per attention block

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err));
}

__global__ void fill_kernel(double* __restrict__ x, size_t n, double value) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}

// Token i's K and V rows (width elements each) to pool slot slots[i].
__global__ void write_kernel(int n, size_t width, const int* __restrict__ slots, const double* __restrict__ k,
                             const double* __restrict__ v, double* __restrict__ pool_k,
                             double* __restrict__ pool_v) {
  const size_t total = static_cast<size_t>(n) * width;
  for (size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = e / width, c = e % width;
    const size_t at = static_cast<size_t>(slots[i]) * width + c;
    pool_k[at] = k[e];
    pool_v[at] = v[e];
  }
}

struct AttendArgs {
  int hkv, group, dim, page;
  double alpha;  // 1 / sqrt(D)
  const double* pool_k;
  const double* pool_v;
  const double* q;  // [n][Hq][D]
  const int* table_begin;
  const int* lengths;
  const int* tables;
  double* out;  // [n][Hq][D]
};

__device__ inline double warp_max(double x) {
  for (int off = 16; off > 0; off /= 2) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ inline double warp_sum(double x) {
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

__global__ void attend_kernel(AttendArgs a) {
  const int qi = blockIdx.x / a.hkv, kvh = blockIdx.x % a.hkv;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int n = a.lengths[qi];
  const int* table = a.tables + a.table_begin[qi];
  const size_t hq = static_cast<size_t>(a.hkv) * a.group;
  const int chunks_d = (a.dim + 31) / 32;
  for (int g = warp; g < a.group; g += warps) {  // warp-uniform
    const size_t row = static_cast<size_t>(qi) * hq + static_cast<size_t>(kvh) * a.group + g;
    const double* qv = a.q + row * a.dim;
    double* o = a.out + row * a.dim;
    for (int d = lane; d < a.dim; d += 32) o[d] = 0;
    double m = -INFINITY, l = 0;
    for (int start = 0; start < n; start += 32) {
      const int j = start + lane, count = min(32, n - start);
      double s = -INFINITY;
      size_t slot = 0;
      if (j < n) {
        slot = static_cast<size_t>(table[j / a.page]) * a.page + j % a.page;
        const double* kp = a.pool_k + (slot * a.hkv + kvh) * a.dim;
        double dot = 0;
        for (int d = 0; d < a.dim; ++d) dot += qv[d] * kp[d];
        s = a.alpha * dot;
      }
      const double m_new = fmax(m, warp_max(s));  // finite: lane 0 always holds a key
      const double corr = exp(m - m_new);         // 0 on the first chunk
      const double p = j < n ? exp(s - m_new) : 0.0;
      l = l * corr + warp_sum(p);
      for (int c = 0; c < chunks_d; ++c) {  // the same trip count on every lane
        const int d = c * 32 + lane;
        double acc = d < a.dim ? o[d] * corr : 0.0;
        for (int jj = 0; jj < count; ++jj) {
          const double pj = __shfl_sync(0xffffffffu, p, jj);
          const unsigned long long sj = __shfl_sync(0xffffffffu, static_cast<unsigned long long>(slot), jj);
          if (d < a.dim) acc += pj * a.pool_v[(static_cast<size_t>(sj) * a.hkv + kvh) * a.dim + d];
        }
        if (d < a.dim) o[d] = acc;
      }
      m = m_new;
    }
    for (int d = lane; d < a.dim; d += 32) o[d] /= l;
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
  size_t width = 1;  // doubles per slot
  DeviceArray<double> k, v, stage_k, stage_v, q, out;
  DeviceArray<int> slots, table_begin, lengths, tables;
};

int device_count() {
  static const int count = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }();
  return count;
}

PagedPool::PagedPool(int blocks, int page_size, int kv_heads, int head_dim, double poison_key,
                     double poison_value)
    : impl_(nullptr) {
  if (device_count() <= 0) throw std::runtime_error("no CUDA device");
  if (blocks < 0 || page_size < 1 || kv_heads < 1 || head_dim < 1)
    throw std::runtime_error("kvcache cuda: invalid pool shape");
  impl_ = new Impl();
  impl_->blocks = blocks, impl_->page = page_size, impl_->hkv = kv_heads, impl_->dim = head_dim;
  impl_->width = static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim);
  try {
    const size_t n = static_cast<size_t>(blocks) * page_size * impl_->width;
    fill_kernel<<<blocks_for(n, 256), 256>>>(impl_->k.reserve(n), n, poison_key);
    check(cudaGetLastError(), "poison launch");
    fill_kernel<<<blocks_for(n, 256), 256>>>(impl_->v.reserve(n), n, poison_value);
    check(cudaGetLastError(), "poison launch");
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
  write_kernel<<<std::min(blocks_for(total, 256), 1024u), 256>>>(n, p.width, d_slots, d_k, d_v, p.k.ptr,
                                                                 p.v.ptr);
  check(cudaGetLastError(), "write launch");
}

void PagedPool::attend(int n, int group, const double* q, const int* table_begin, const int* lengths,
                       const int* tables, int tables_size, double* out) {
  if (n <= 0) return;
  Impl& p = *impl_;
  if (group < 1) throw std::runtime_error("kvcache cuda: invalid group");
  const size_t rows = static_cast<size_t>(n) * p.hkv * group * p.dim;
  AttendArgs a{};
  a.hkv = p.hkv, a.group = group, a.dim = p.dim, a.page = p.page;
  a.alpha = 1 / std::sqrt(static_cast<double>(p.dim));
  a.pool_k = p.k.ptr, a.pool_v = p.v.ptr;
  a.q = p.q.upload(q, rows);
  a.table_begin = p.table_begin.upload(table_begin, static_cast<size_t>(n));
  a.lengths = p.lengths.upload(lengths, static_cast<size_t>(n));
  a.tables = p.tables.upload(tables, static_cast<size_t>(std::max(tables_size, 0)));
  a.out = p.out.reserve(rows);
  const int warps = std::min(group, kMaxWarps);
  attend_kernel<<<static_cast<unsigned>(n) * static_cast<unsigned>(p.hkv), 32 * warps>>>(a);
  check(cudaGetLastError(), "attend launch");
  check(cudaMemcpy(out, a.out, rows * sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

}  // namespace kprop::kvcache::cuda_raw
