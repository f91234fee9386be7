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
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda_support.cuh"
#include "kernels/kvcache/kvcache_cuda.h"

namespace kprop::kvcache::cuda_raw {
namespace {

constexpr int kMaxWarps = 8;  // warps (query heads at once) per attention block

using cuda_support::check;

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

unsigned blocks_for(size_t n, int threads) {
  return static_cast<unsigned>(std::max<size_t>((n + threads - 1) / threads, 1));
}

// Sub-arrays of the case's one allocation (and of its host image), each at a
// 256-byte boundary.
struct Layout {
  size_t bytes = 0;
  size_t place(size_t n) {
    const size_t at = (bytes + 255) / 256 * 256;
    bytes = at + n;
    return at;
  }
};

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

void validate(const Program& p) {
  auto fail = [](const char* why) { throw std::runtime_error(std::string("kvcache cuda: ") + why); };
  if (p.blocks < 0 || p.page_size < 1 || p.kv_heads < 1 || p.head_dim < 1 || p.group < 1)
    fail("invalid pool shape");
  const size_t width = static_cast<size_t>(p.kv_heads) * p.head_dim;
  size_t writes = 0, queries = 0;
  for (const auto& st : p.steps) {
    if (st.writes < 0 || st.queries < 0) fail("negative step size");
    writes += static_cast<size_t>(st.writes), queries += static_cast<size_t>(st.queries);
  }
  if (p.slots.size() != writes || p.k.size() != writes * width || p.v.size() != writes * width)
    fail("writes do not match the steps");
  if (p.table_begin.size() != queries || p.lengths.size() != queries ||
      p.q.size() != queries * width * static_cast<size_t>(p.group))
    fail("queries do not match the steps");
  const size_t slots = static_cast<size_t>(p.blocks) * p.page_size;
  for (int s : p.slots)
    if (s < 0 || static_cast<size_t>(s) >= slots) fail("write slot outside the pool");
  for (size_t i = 0; i < queries; ++i) {
    const long long begin = p.table_begin[i], pages = (p.lengths[i] + p.page_size - 1) / p.page_size;
    if (p.lengths[i] < 1 || begin < 0 || begin + pages > static_cast<long long>(p.tables.size()))
      fail("query table outside the tables");
  }
  for (int b : p.tables)
    if (b < 0 || b >= p.blocks) fail("table entry outside the pool");
}

}  // namespace

int device_count() {
  return cuda_support::device_count();
}

std::vector<double> run(const Program& p) {
  if (device_count() <= 0) throw std::runtime_error("no CUDA device");
  validate(p);
  const size_t width = static_cast<size_t>(p.kv_heads) * p.head_dim;
  const size_t pool = static_cast<size_t>(p.blocks) * p.page_size * width;
  std::vector<double> out(p.q.size());
  if (p.steps.empty()) return out;
  with_types(p.precision, [&](auto c, auto acc) {
    using C = decltype(c);
    using A = decltype(acc);
    // Device layout: the pool (not uploaded), the uploaded inputs, the output.
    Layout lay;
    const size_t at_k = lay.place(pool * sizeof(C)), at_v = lay.place(pool * sizeof(C));
    const size_t upload = lay.place(0);
    auto put = [&](size_t bytes) { return lay.place(bytes) - upload; };  // offsets in the upload
    const size_t at_wk = put(p.k.size() * sizeof(double)), at_wv = put(p.v.size() * sizeof(double));
    const size_t at_q = put(p.q.size() * sizeof(double)), at_slots = put(p.slots.size() * sizeof(int));
    const size_t at_begin = put(p.table_begin.size() * sizeof(int));
    const size_t at_len = put(p.lengths.size() * sizeof(int)), at_tables = put(p.tables.size() * sizeof(int));
    const size_t upload_bytes = lay.bytes - upload;
    const size_t at_out = lay.place(out.size() * sizeof(double));

    std::vector<unsigned char> image(upload_bytes);
    auto copy = [&](size_t at, const auto& v) {
      if (!v.empty()) std::memcpy(image.data() + at, v.data(), v.size() * sizeof(v[0]));
    };
    copy(at_wk, p.k), copy(at_wv, p.v), copy(at_q, p.q), copy(at_slots, p.slots);
    copy(at_begin, p.table_begin), copy(at_len, p.lengths), copy(at_tables, p.tables);

    cuda_support::DeviceBuffer<unsigned char> dev(std::max<size_t>(lay.bytes, 1));  // one per case
    unsigned char* base = dev.ptr;
    check(cudaMemcpy(base + upload, image.data(), upload_bytes, cudaMemcpyHostToDevice),
          "cudaMemcpy to device");
    auto* pool_k = reinterpret_cast<C*>(base + at_k);
    auto* pool_v = reinterpret_cast<C*>(base + at_v);
    const unsigned char* in = base + upload;
    const auto* wk = reinterpret_cast<const double*>(in + at_wk);
    const auto* wv = reinterpret_cast<const double*>(in + at_wv);
    const auto* q = reinterpret_cast<const double*>(in + at_q);
    const auto* slots = reinterpret_cast<const int*>(in + at_slots);
    const auto* begin = reinterpret_cast<const int*>(in + at_begin);
    const auto* lengths = reinterpret_cast<const int*>(in + at_len);
    auto* d_out = reinterpret_cast<double*>(base + at_out);

    if (pool > 0) {
      fill_kernel<C><<<blocks_for(pool, 256), 256>>>(pool_k, pool, p.poison_key);
      fill_kernel<C><<<blocks_for(pool, 256), 256>>>(pool_v, pool, p.poison_value);
      check(cudaGetLastError(), "poison launch");
    }
    AttendArgs<C> a{};
    a.hkv = p.kv_heads, a.group = p.group, a.dim = p.head_dim, a.page = p.page_size;
    a.alpha = 1 / std::sqrt(static_cast<double>(p.head_dim));
    a.pool_k = pool_k, a.pool_v = pool_v;
    a.tables = reinterpret_cast<const int*>(in + at_tables);
    const size_t row = width * static_cast<size_t>(p.group);  // one query's elements
    const int warps = std::min(p.group, kMaxWarps);
    size_t w = 0, qi = 0;  // the step's first write and query
    for (const auto& st : p.steps) {
      if (st.writes > 0) {
        const size_t total = static_cast<size_t>(st.writes) * width;
        write_kernel<C><<<std::min(blocks_for(total, 256), 1024u), 256>>>(
            st.writes, width, slots + w, wk + w * width, wv + w * width, pool_k, pool_v);
        check(cudaGetLastError(), "write launch");
      }
      if (st.queries > 0) {
        a.q = q + qi * row, a.table_begin = begin + qi, a.lengths = lengths + qi, a.out = d_out + qi * row;
        attend_kernel<C, A>
            <<<static_cast<unsigned>(st.queries) * static_cast<unsigned>(p.kv_heads), 32 * warps>>>(a);
        check(cudaGetLastError(), "attend launch");
      }
      w += static_cast<size_t>(st.writes), qi += static_cast<size_t>(st.queries);
    }
    check(cudaMemcpy(out.data(), d_out, out.size() * sizeof(double), cudaMemcpyDeviceToHost),
          "cudaMemcpy to host");
  });
  return out;
}

}  // namespace kprop::kvcache::cuda_raw
