// Softmax + top-k on a CUDA device, in the case's dtype; one block per row.
//
//  1. m = max of the row, z = Σ exp(x − m): fixed-shape tree reductions
//     (bitwise run-to-run deterministic). An all −inf row has m = −inf and
//     every probability 0 (no exp(−inf − −inf) = NaN).
//  2. Selection by rank: the contract's order (logit descending, equal
//     logits by ascending index, −inf after every finite logit) is a strict
//     total order, so each element's rank — the number of elements ranking
//     before it — is unique and the ranks are a permutation of 0..V−1. A
//     thread counts the rank of each of its elements, stopping as soon as it
//     reaches K, and an element of rank r < K writes output slot r. Every
//     slot is written exactly once, no merge and no synchronisation; any K
//     up to V, the output already sorted. Cost O(V·K) comparisons per row in
//     the worst case (far less for small K, where most counts stop early);
//     sized for vocabularies of the spec, not tuned for 100k-entry rows.
// Ranking compares logits, never rounded probabilities, as the contract
// says. Plain IEEE exp and division (no fast math). The case's `block` (the
// CPU fused kernel's tile width) does not apply here and is ignored.
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/cuda_support.cuh"
#include "kernels/softmax_topk/softmax_topk_cuda.h"

namespace kprop::softmax_topk::cuda_raw {
namespace {

constexpr int kThreads = 256;  // a multiple of the warp size

using cuda_support::check;

// Max (IsMax) or sum of v over the block; every thread gets the result.
template <typename T, bool IsMax>
__device__ T block_reduce(T v, T identity, T* scratch) {
  for (int off = 16; off > 0; off /= 2) {
    const T o = __shfl_down_sync(0xffffffffu, v, off);
    v = IsMax ? (o > v ? o : v) : v + o;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? scratch[lane] : identity;
    for (int off = 16; off > 0; off /= 2) {
      const T o = __shfl_down_sync(0xffffffffu, v, off);
      v = IsMax ? (o > v ? o : v) : v + o;
    }
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

template <typename T>
__global__ void softmax_topk_kernel(const T* __restrict__ logits, int V, int K, T* __restrict__ probs,
                                    int* __restrict__ indices) {
  __shared__ T scratch[kThreads / 32];
  const T neg_inf = -static_cast<T>(INFINITY);
  const T* x = logits + static_cast<size_t>(blockIdx.x) * static_cast<size_t>(V);
  T* p_out = probs + static_cast<size_t>(blockIdx.x) * static_cast<size_t>(K);
  int* i_out = indices + static_cast<size_t>(blockIdx.x) * static_cast<size_t>(K);

  T m = neg_inf;
  for (int i = threadIdx.x; i < V; i += kThreads) m = x[i] > m ? x[i] : m;
  m = block_reduce<T, true>(m, neg_inf, scratch);
  const bool all_neg_inf = m == neg_inf;
  T z = 0;
  if (!all_neg_inf)
    for (int i = threadIdx.x; i < V; i += kThreads) z += exp(x[i] - m);
  z = block_reduce<T, false>(z, T(0), scratch);

  for (int i = threadIdx.x; i < V; i += kThreads) {
    const T xi = x[i];
    int rank = 0;
    for (int j = 0; j < V && rank < K; ++j) {
      const T xj = x[j];
      rank += (xj > xi || (xj == xi && j < i)) ? 1 : 0;
    }
    if (rank < K) {
      p_out[rank] = all_neg_inf ? T(0) : exp(xi - m) / z;
      i_out[rank] = i;
    }
  }
}

template <typename T>
void run_t(const T* h_x, int rows, int vocab, int k, T* h_p, int* h_i) {
  if (device_count() <= 0) throw std::runtime_error("no CUDA device");
  if (rows < 1 || vocab < 1 || k < 1 || k > vocab)
    throw std::runtime_error("softmax_topk cuda: invalid case");
  const size_t n_in = static_cast<size_t>(rows) * static_cast<size_t>(vocab),
               n_out = static_cast<size_t>(rows) * static_cast<size_t>(k);
  cuda_support::DeviceBuffer<T> d_x(n_in), d_p(n_out);
  cuda_support::DeviceBuffer<int> d_i(n_out);
  d_x.upload(h_x);
  softmax_topk_kernel<T><<<static_cast<unsigned>(rows), kThreads>>>(d_x.ptr, vocab, k, d_p.ptr, d_i.ptr);
  check(cudaGetLastError(), "softmax_topk launch");
  check(cudaDeviceSynchronize(), "softmax_topk kernel");
  d_p.download(h_p);
  d_i.download(h_i);
}

}  // namespace

int device_count() {
  return cuda_support::device_count();
}

void run(const float* logits, int rows, int vocab, int k, float* probs, int* indices) {
  run_t(logits, rows, vocab, k, probs, indices);
}

void run(const double* logits, int rows, int vocab, int k, double* probs, int* indices) {
  run_t(logits, rows, vocab, k, probs, indices);
}

}  // namespace kprop::softmax_topk::cuda_raw
