// Flash attention forward on the GPU: the tensor-core kernel
// (attention_cuda.h, f16/bf16 in, f32 accumulation) against a materialized
// baseline in the same binary (cuBLAS S = scale·QKᵀ, f16/bf16 out with f32
// compute; a softmax kernel, one block per row, in place; cuBLAS O = P·V).
// The backward likewise: the tensor-core backward (attention_bwd_cuda.h: D
// pre-pass, dK/dV and dQ kernels, given the forward's O and LSE) against
// cuBLAS S, the softmax, dV = Pᵀ·dO, dP = dO·Vᵀ, a kernel for
// dS = P ⊙ (dP − rowsum(P ⊙ dP)), dQ = σ·dS·K and dK = σ·dSᵀ·Q. Backward
// FLOPs = 2.5 × the forward's (five N×N×D products against two, the
// FlashAttention convention; the tensor-core kernel does seven, recomputing
// S and dP for dQ).
//
// Shapes after the FlashAttention-2 paper: batch·N = 16384 tokens, H·D = 2048
// (H = 32 at D = 64, 16 at D = 128), N ∈ {1k, 4k, 16k}, causal or not.
// FLOPs = 4·B·H·N²·D, halved when causal (the FlashAttention convention;
// the baseline is charged the same). Peak: 989.4 TFLOP/s, the H100 SXM dense
// f16/bf16 tensor rate from the datasheet (not measured; the `ceiling/gemm`
// benchmark measures what cuBLAS reaches). Each iteration is timed alone
// with CUDA events around the launch(es), after warm-up, rotating over three
// random input sets (never zeros); the counters report the median.
// Without a device every benchmark reports an error (skipped) and the
// program exits 0.
//
//   bench_attention_cuda                                   # everything
//   bench_attention_cuda --benchmark_filter='flash/f16/4096'
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/attention/attention_bwd_cuda.h"
#include "kernels/attention/attention_cuda.h"

namespace {

namespace cr = kprop::attention::cuda_raw;
namespace br = kprop::attention::cuda_bwd_raw;

constexpr double kPeakTflops = 989.4;  // H100 SXM, dense f16/bf16 (datasheet)
constexpr int kSets = 3;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(int(e)));
}

// Uniform values in [-1, 1) from a hash of the index (deterministic, never 0 everywhere).
template <typename Elem>
__global__ void fill_kernel(Elem* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B9u ^ seed;
    h ^= h >> 16, h *= 0x85EBCA6Bu, h ^= h >> 13, h *= 0xC2B2AE35u, h ^= h >> 16;
    const float v = float(h >> 8) * (1.f / 8388608.f) - 1.f;
    if constexpr (std::is_same_v<Elem, __half>)
      x[i] = __float2half_rn(v);
    else
      x[i] = __float2bfloat16_rn(v);
  }
}

// The maximum or the sum of v over the block (every thread gets it); red:
// 32 floats of shared memory.
__device__ float block_reduce(float v, bool is_max, float* red) {
  for (int o = 16; o > 0; o /= 2) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : (is_max ? -INFINITY : 0.f);
  for (int o = 16; o > 0; o /= 2) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  return v;
}

template <typename Elem>
__device__ Elem to_elem(float x) {
  if constexpr (std::is_same_v<Elem, __half>)
    return __float2half_rn(x);
  else
    return __float2bfloat16_rn(x);
}

// In place: row r of S (n_cols wide) becomes softmax(S[r]) with keys j > i
// (i = r mod n_rows) masked when causal (Nq = Nk, so bottom-right = top-left).
template <typename Elem>
__global__ void softmax_rows(Elem* s, int n_rows, int n_cols, bool causal) {
  __shared__ float red[32];
  const size_t r = blockIdx.x;
  Elem* row = s + r * size_t(n_cols);
  const int last = causal ? int(r % size_t(n_rows)) : n_cols - 1;
  auto block_reduce = [&](float v, bool is_max) { return ::block_reduce(v, is_max, red); };
  float m = -INFINITY;
  for (int j = threadIdx.x; j <= last; j += blockDim.x) m = fmaxf(m, float(row[j]));
  m = block_reduce(m, true);
  float sum = 0.f;
  for (int j = threadIdx.x; j <= last; j += blockDim.x) sum += __expf(float(row[j]) - m);
  sum = block_reduce(sum, false);
  const float inv = 1.f / sum;
  for (int j = threadIdx.x; j < n_cols; j += blockDim.x) {
    const float p = j <= last ? __expf(float(row[j]) - m) * inv : 0.f;
    row[j] = to_elem<Elem>(p);
  }
}

// In place: row r of dP becomes dS = P ⊙ (dP − D), D = rowsum(P ⊙ dP) (the
// softmax backward, one block per row).
template <typename Elem>
__global__ void dsoftmax_rows(const Elem* p, Elem* dp, int n_cols) {
  __shared__ float red[32];
  const Elem* prow = p + size_t(blockIdx.x) * n_cols;
  Elem* drow = dp + size_t(blockIdx.x) * n_cols;
  float sum = 0.f;
  for (int j = threadIdx.x; j < n_cols; j += blockDim.x) sum += float(prow[j]) * float(drow[j]);
  const float d = block_reduce(sum, false, red);
  for (int j = threadIdx.x; j < n_cols; j += blockDim.x)
    drow[j] = to_elem<Elem>(float(prow[j]) * (float(drow[j]) - d));
}

struct Config {
  cr::Half type;
  int n, dim;
  bool causal;
  int warps = 0, rows_per_warp = 0;
  cr::TcKernel kernel = cr::TcKernel::automatic;
  int min_blocks = 0;
  int ws_block_k = 0;
  bool ws_pingpong = true;
  bool bwd_pipelined = true;  // the backward's cp.async double buffering
  int batch() const { return std::max(1, 16384 / n); }
  int heads() const { return 2048 / dim; }
  double flops() const { return 4.0 * batch() * heads() * double(n) * n * dim * (causal ? 0.5 : 1.0); }
  std::string variant() const {  // the kernel and its knobs, as the benchmark names them
    switch (kernel) {
      case cr::TcKernel::mma_sync:
        return "mma_sync";
      case cr::TcKernel::wgmma:
        return "wgmma_" + std::to_string(min_blocks) + "block";
      case cr::TcKernel::wgmma_ws:
        return "ws_bk" + std::to_string(ws_block_k) + (ws_pingpong ? "_pp" : "");
      default:
        return warps == 0 ? "automatic"
                          : "mma_sync_" + std::to_string(warps) + "x" + std::to_string(rows_per_warp);
    }
  }
  std::string name() const {
    return std::string(type == cr::Half::f16 ? "f16" : "bf16") + "/N" + std::to_string(n) + "/D" +
           std::to_string(dim) + (causal ? "/causal" : "/full");
  }
};

struct Buffers {
  std::vector<void*> q, k, v;
  void* o = nullptr;
  float* lse = nullptr;
  void* s = nullptr;  // baseline only
  explicit Buffers(const Config& c, bool baseline) {
    const size_t elems = size_t(c.batch()) * c.heads() * c.n * c.dim;
    for (int i = 0; i < kSets; ++i)
      for (auto* list : {&q, &k, &v}) {
        void* p = nullptr;
        check(cudaMalloc(&p, elems * 2), "cudaMalloc");
        list->push_back(p);
        const uint32_t seed = uint32_t(0x1234567u * (i + 1) + list->size() * 77u +
                                       (list == &q   ? 1u
                                        : list == &k ? 2u
                                                     : 3u));
        if (c.type == cr::Half::f16)
          fill_kernel<__half><<<1024, 256>>>(static_cast<__half*>(p), elems, seed);
        else
          fill_kernel<__nv_bfloat16><<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), elems, seed);
        check(cudaGetLastError(), "fill");
      }
    check(cudaMalloc(&o, elems * 2), "cudaMalloc");
    check(cudaMalloc(reinterpret_cast<void**>(&lse), size_t(c.batch()) * c.heads() * c.n * sizeof(float)),
          "cudaMalloc");
    if (baseline)
      check(cudaMalloc(&s, size_t(c.batch()) * c.heads() * size_t(c.n) * c.n * 2), "cudaMalloc S");
    check(cudaDeviceSynchronize(), "fill");
  }
  ~Buffers() {
    for (auto* list : {&q, &k, &v})
      for (void* p : *list) cudaFree(p);
    cudaFree(o), cudaFree(lse), cudaFree(s);
  }
};

struct Timing {
  double flash_ms = 0, base_ms = 0;
};
std::map<std::string, Timing> g_results, g_bwd_results;
struct Variant {
  std::string name;
  double ms, tflops;
};
std::vector<Variant> g_variants;  // every flash run other than the automatic choice
// google-benchmark calls a benchmark more than once (to size its runs): the
// last call's figures stand, one row per variant.
void record_variant(Variant v) {
  for (Variant& old : g_variants)
    if (old.name == v.name) return void(old = std::move(v));
  g_variants.push_back(std::move(v));
}
cublasHandle_t g_cublas = nullptr;

bool have_device() {
  return cr::device_count() > 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Runs fn(i) `warmups` times, then times one fn(i) per benchmark
// iteration with events (i counts the calls); the median in ms.
template <typename Fn>
double event_median_ms(benchmark::State& state, int warmups, Fn fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event"), check(cudaEventCreate(&b), "event");
  int it = 0;
  for (; it < warmups; ++it) fn(it);
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> ms;
  for (auto _ : state) {
    check(cudaEventRecord(a), "record");
    fn(it++);
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "sync");
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "elapsed");
    state.SetIterationTime(t / 1e3);
    ms.push_back(t);
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
  return median(ms);
}

// Times fn(set) per iteration, cycling through the kSets input sets.
template <typename Fn>
double run_timed(benchmark::State& state, const Config& c, Fn fn) {
  const double med = event_median_ms(state, 3, [&](int i) { fn(i % kSets); });
  state.counters["median_ms"] = med;
  state.counters["TFLOPs"] = c.flops() / (med * 1e-3) / 1e12;
  state.counters["pct_peak"] = 100.0 * c.flops() / (med * 1e-3) / 1e12 / kPeakTflops;
  return med;
}

// Batched cuBLAS GEMM over B·H heads of 16-bit tensors, f32 compute. The
// callers pass column-major views of row-major tensors (X [r][c] is Xᵀ,
// c×r, ld c).
void batched_gemm(const Config& c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                  const float* alpha, const void* a, int lda, long long sa, const void* b, int ldb,
                  long long sb, void* out, int ldc, long long sc, const char* what) {
  const cudaDataType_t t = c.type == cr::Half::f16 ? CUDA_R_16F : CUDA_R_16BF;
  const float zero = 0.f;
  check(
      cublasGemmStridedBatchedEx(g_cublas, ta, tb, m, n, k, alpha, a, t, lda, sa, b, t, ldb, sb, &zero, out,
                                 t, ldc, sc, c.batch() * c.heads(), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      what);
}

// The baseline's softmax over each row of S [B·H·N][N], in place.
void softmax_in_place(const Config& c, void* s) {
  const unsigned rows = unsigned(size_t(c.batch()) * c.heads() * c.n);
  if (c.type == cr::Half::f16)
    softmax_rows<__half><<<rows, 256>>>(static_cast<__half*>(s), c.n, c.n, c.causal);
  else
    softmax_rows<__nv_bfloat16><<<rows, 256>>>(static_cast<__nv_bfloat16*>(s), c.n, c.n, c.causal);
  check(cudaGetLastError(), "softmax");
}

// Runs `body` where there is a CUDA device; no device, or an exception of
// `body`, skips the benchmark with the reason.
template <typename Body>
void on_device(benchmark::State& state, Body body) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  try {
    body();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void flash(benchmark::State& state, Config c) {
  on_device(state, [&] {
    Buffers buf(c, false);
    cr::TcParams p;
    p.type = c.type, p.batch = c.batch(), p.heads_q = p.heads_kv = c.heads(), p.nq = p.nk = c.n,
    p.dim = c.dim;
    p.mask = c.causal ? cr::TcMask::causal : cr::TcMask::none;
    p.o = buf.o, p.lse = buf.lse, p.warps = c.warps, p.rows_per_warp = c.rows_per_warp;
    p.kernel = c.kernel, p.wgmma_min_blocks = c.min_blocks;
    p.ws_block_k = c.ws_block_k, p.ws_pingpong = c.ws_pingpong;
    const double med = run_timed(state, c, [&](int set) {
      p.q = buf.q[size_t(set)], p.k = buf.k[size_t(set)], p.v = buf.v[size_t(set)];
      cr::tc_forward_async(p, nullptr);
    });
    if (c.warps == 0 && c.kernel == cr::TcKernel::automatic && c.min_blocks == 0)
      g_results[c.name()].flash_ms = med;
    else
      record_variant({c.variant() + "/" + c.name(), med, c.flops() / (med * 1e-3) / 1e12});
  });
}

void materialized(benchmark::State& state, Config c) {
  on_device(state, [&] {
    Buffers buf(c, true);
    const int n = c.n, d = c.dim;
    const long long qkv_stride = (long long)n * d, s_stride = (long long)n * n;
    const float scale = 1.f / std::sqrt(float(d)), one = 1.f;
    const double med = run_timed(state, c, [&](int set) {
      // Column-major views: Sᵀ (Nk×Nq) = Kᵀᵀ·Qᵀ, Oᵀ (D×Nq) = Vᵀ·Pᵀ.
      batched_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, n, n, d, &scale, buf.k[size_t(set)], d, qkv_stride,
                   buf.q[size_t(set)], d, qkv_stride, buf.s, n, s_stride, "gemm QK");
      softmax_in_place(c, buf.s);
      batched_gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, d, n, n, &one, buf.v[size_t(set)], d, qkv_stride, buf.s, n,
                   s_stride, buf.o, d, qkv_stride, "gemm PV");
    });
    g_results[c.name()].base_ms = med;
  });
}

// Backward inputs on top of the forward's: dO per input set, O and LSE of
// each set (the forward run once per set: P = exp(S - LSE) must be the real
// one, not an overflow), D and the gradients; the baseline's second N×N.
struct BwdBuffers : Buffers {
  std::vector<void*> d_out, o_set;
  std::vector<float*> lse_set;
  float* d = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr, *dp = nullptr;
  BwdBuffers(const Config& c, bool baseline) : Buffers(c, baseline) {
    const size_t elems = size_t(c.batch()) * c.heads() * c.n * c.dim,
                 rows = size_t(c.batch()) * c.heads() * c.n;
    auto alloc = [](size_t bytes) {
      void* p = nullptr;
      check(cudaMalloc(&p, bytes), "cudaMalloc");
      return p;
    };
    for (int i = 0; i < kSets; ++i) {
      void* p = alloc(elems * 2);
      d_out.push_back(p);
      if (c.type == cr::Half::f16)
        fill_kernel<__half><<<1024, 256>>>(static_cast<__half*>(p), elems, 0xD0u + uint32_t(i));
      else
        fill_kernel<__nv_bfloat16><<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), elems, 0xD0u + uint32_t(i));
      check(cudaGetLastError(), "fill");
      o_set.push_back(alloc(elems * 2));
      lse_set.push_back(static_cast<float*>(alloc(rows * sizeof(float))));
      if (!baseline) {
        cr::TcParams f;
        f.type = c.type, f.batch = c.batch(), f.heads_q = f.heads_kv = c.heads(), f.nq = f.nk = c.n;
        f.dim = c.dim, f.mask = c.causal ? cr::TcMask::causal : cr::TcMask::none;
        f.q = q[size_t(i)], f.k = k[size_t(i)], f.v = v[size_t(i)], f.o = o_set.back(),
        f.lse = lse_set.back();
        cr::tc_forward_async(f, nullptr);
      }
    }
    d = static_cast<float*>(alloc(rows * sizeof(float)));
    dq = alloc(elems * 2), dk = alloc(elems * 2), dv = alloc(elems * 2);
    if (baseline) dp = alloc(size_t(c.batch()) * c.heads() * size_t(c.n) * c.n * 2);
    check(cudaDeviceSynchronize(), "backward inputs");
  }
  ~BwdBuffers() {
    for (auto* list : {&d_out, &o_set})
      for (void* p : *list) cudaFree(p);
    for (float* p : lse_set) cudaFree(p);
    cudaFree(d), cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dp);
  }
};

double bwd_flops(const Config& c) {
  return 2.5 * c.flops();
}

void flash_bwd(benchmark::State& state, Config c) {
  on_device(state, [&] {
    BwdBuffers buf(c, false);
    br::TcBwdParams p;
    p.type = c.type, p.batch = c.batch(), p.heads_q = p.heads_kv = c.heads(), p.nq = p.nk = c.n;
    p.dim = c.dim, p.mask = c.causal ? cr::TcMask::causal : cr::TcMask::none;
    p.d = buf.d, p.dq = buf.dq, p.dk = buf.dk, p.dv = buf.dv, p.pipelined = c.bwd_pipelined;
    const double med = event_median_ms(state, 3, [&](int i) {
      const size_t set = size_t(i % kSets);
      p.q = buf.q[set], p.k = buf.k[set], p.v = buf.v[set], p.d_out = buf.d_out[set];
      p.o = buf.o_set[set], p.lse = buf.lse_set[set];
      br::tc_backward_async(p, nullptr);
    });
    state.counters["median_ms"] = med;
    state.counters["TFLOPs"] = bwd_flops(c) / (med * 1e-3) / 1e12;
    if (c.bwd_pipelined)
      g_bwd_results[c.name()].flash_ms = med;
    else
      record_variant({"bwd_sync_loads/" + c.name(), med, bwd_flops(c) / (med * 1e-3) / 1e12});
  });
}

void materialized_bwd(benchmark::State& state, Config c) {
  on_device(state, [&] {
    BwdBuffers buf(c, true);
    const int n = c.n, d = c.dim, batches = c.batch() * c.heads();
    const long long x_stride = (long long)n * d, s_stride = (long long)n * n;
    const float scale = 1.f / std::sqrt(float(d)), one = 1.f;
    const double med = event_median_ms(state, 3, [&](int i) {
      const size_t set = size_t(i % kSets);
      const void *q = buf.q[set], *k = buf.k[set], *v = buf.v[set], *d_out = buf.d_out[set];
      batched_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, n, n, d, &scale, k, d, x_stride, q, d, x_stride, buf.s, n,
                   s_stride, "gemm S");
      softmax_in_place(c, buf.s);
      // dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ⊙ (dP − D), dQ = σ·dS·K, dK = σ·dSᵀ·Q.
      batched_gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, d, n, n, &one, d_out, d, x_stride, buf.s, n, s_stride, buf.dv,
                   d, x_stride, "gemm dV");
      batched_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, n, n, d, &one, v, d, x_stride, d_out, d, x_stride, buf.dp, n,
                   s_stride, "gemm dP");
      if (c.type == cr::Half::f16)
        dsoftmax_rows<__half><<<unsigned(size_t(batches) * n), 256>>>(static_cast<const __half*>(buf.s),
                                                                      static_cast<__half*>(buf.dp), n);
      else
        dsoftmax_rows<__nv_bfloat16><<<unsigned(size_t(batches) * n), 256>>>(
            static_cast<const __nv_bfloat16*>(buf.s), static_cast<__nv_bfloat16*>(buf.dp), n);
      check(cudaGetLastError(), "dsoftmax");
      batched_gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, d, n, n, &scale, k, d, x_stride, buf.dp, n, s_stride, buf.dq,
                   d, x_stride, "gemm dQ");
      batched_gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, d, n, n, &scale, q, d, x_stride, buf.dp, n, s_stride, buf.dk,
                   d, x_stride, "gemm dK");
    });
    state.counters["median_ms"] = med;
    g_bwd_results[c.name()].base_ms = med;
  });
}

// The two ceilings (METHOD.md): a large cuBLAS f16 GEMM and a device-to-device copy.
void ceiling_gemm(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  const int n = 8192;
  void *a = nullptr, *b = nullptr, *d = nullptr;
  check(cudaMalloc(&a, size_t(n) * n * 2), "cudaMalloc"),
      check(cudaMalloc(&b, size_t(n) * n * 2), "cudaMalloc");
  check(cudaMalloc(&d, size_t(n) * n * 2), "cudaMalloc");
  fill_kernel<__half><<<1024, 256>>>(static_cast<__half*>(a), size_t(n) * n, 1);
  fill_kernel<__half><<<1024, 256>>>(static_cast<__half*>(b), size_t(n) * n, 2);
  const float one = 1.f, zero = 0.f;
  const double med = event_median_ms(state, 3, [&](int) {
    check(cublasGemmEx(g_cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16F, n, b, CUDA_R_16F, n,
                       &zero, d, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "gemm");
  });
  state.counters["TFLOPs"] = 2.0 * n * double(n) * n / (med * 1e-3) / 1e12;
  cudaFree(a), cudaFree(b), cudaFree(d);
}

void ceiling_copy(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc"), check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMemset(a, 1, bytes), "memset");
  const double med = event_median_ms(
      state, 1, [&](int) { check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "copy"); });
  state.counters["GBps_read_plus_write"] = 2.0 * double(bytes) / (med * 1e-3) / 1e9;
  cudaFree(a), cudaFree(b);
}

// Registers a benchmark as every one here runs: on the times it sets itself
// (CUDA events, UseManualTime), for at least 0.1 s, reported in ms.
template <typename... Args>
void register_timed(const std::string& name, Args&&... args) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Args>(args)...)
      ->UseManualTime()
      ->MinTime(0.1)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  const bool device = have_device();
  if (!device) std::printf("bench_attention_cuda: no CUDA device; every benchmark reports skipped\n");
  if (device) check(cublasCreate(&g_cublas), "cublasCreate");
  std::vector<Config> configs;
  for (cr::Half type : {cr::Half::f16, cr::Half::bf16})
    for (int n : {1024, 4096, 16384})
      for (int dim : {64, 128})
        for (bool causal : {false, true}) configs.push_back({type, n, dim, causal});
  for (const Config& c : configs) {
    register_timed("flash/" + c.name(), flash, c);
    register_timed("materialized/" + c.name(), materialized, c);
  }
  for (const Config& c : configs) {
    register_timed("flash_bwd/" + c.name(), flash_bwd, c);
    register_timed("materialized_bwd/" + c.name(), materialized_bwd, c);
  }
  for (int dim : {64, 128})  // the backward with synchronous tile loads beside the pipelined one
    for (bool causal : {false, true}) {
      Config c{cr::Half::f16, 4096, dim, causal};
      c.bwd_pipelined = false;
      register_timed("flash_bwd_sync/" + c.name(), flash_bwd, c);
    }
  for (int dim : {64, 128})  // every tiling at the goal shape: warps x rows per warp
    for (bool causal : {false, true})
      for (const auto& tiling : {std::pair{4, 16}, std::pair{8, 16}, std::pair{4, 32}}) {
        Config c{cr::Half::f16, 4096, dim, causal, tiling.first, tiling.second};
        register_timed("flash_tiling" + std::to_string(tiling.first) + "x" + std::to_string(tiling.second) +
                           "/" + c.name(),
                       flash, c);
      }
  for (int dim : {64, 128})  // the mma.sync kernel's default tiling next to the automatic choice
    for (bool causal : {false, true}) {
      Config c{cr::Half::f16, 4096, dim, causal};
      c.kernel = cr::TcKernel::mma_sync;
      register_timed("flash_mma_sync/" + c.name(), flash, c);
    }
  for (int blocks : {1, 2})  // the v3 wgmma kernel, registers for one or two blocks per SM
    for (int dim : {64, 128})
      for (bool causal : {false, true}) {
        Config c{cr::Half::f16, 4096, dim, causal};
        c.kernel = cr::TcKernel::wgmma, c.min_blocks = blocks;
        register_timed("flash_wgmma_" + std::to_string(blocks) + "block/" + c.name(), flash, c);
      }
  // The warp-specialized kernel (TMA producer, two consumer warpgroups):
  // keys per tile x ping-pong, at the goal shape and N = 16k.
  for (int n : {4096, 16384})
    for (int dim : {64, 128})
      for (bool causal : {false, true})
        for (int block_k : {64, 128})
          for (bool pingpong : {false, true}) {
            if (n == 16384 && dim == 64) continue;
            Config c{cr::Half::f16, n, dim, causal};
            c.kernel = cr::TcKernel::wgmma_ws, c.ws_block_k = block_k, c.ws_pingpong = pingpong;
            register_timed("flash_ws_bk" + std::to_string(block_k) + (pingpong ? "_pp/" : "/") + c.name(),
                           flash, c);
          }
  register_timed("ceiling/gemm_f16_8192", ceiling_gemm);
  register_timed("ceiling/copy_2GiB", ceiling_copy);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (device)
    std::printf("\nflash = the automatic kernel choice: %s\n",
                cr::tc_wgmma_available() ? "warp-specialized wgmma (sm_90a; TMA, Bk 128, ping-pong)"
                                         : "mma.sync (no sm_90a image for this device)");
  if (!g_results.empty()) {
    std::printf("\n%-24s %10s %9s %7s %12s %9s\n", "case", "flash ms", "TFLOP/s", "%peak", "material. ms",
                "speed-up");
    for (const Config& c : configs) {
      const auto it = g_results.find(c.name());
      if (it == g_results.end() || it->second.flash_ms <= 0) continue;
      const Timing& t = it->second;
      const double tf = c.flops() / (t.flash_ms * 1e-3) / 1e12;
      std::printf("%-24s %10.3f %9.1f %6.1f%% %12.3f %8.2fx\n", c.name().c_str(), t.flash_ms, tf,
                  100 * tf / kPeakTflops, t.base_ms, t.base_ms > 0 ? t.base_ms / t.flash_ms : 0.0);
    }
  }
  if (!g_bwd_results.empty()) {
    std::printf("\nbackward (tensor-core WMMA kernel; FLOPs = 2.5 x forward)\n%-24s %10s %9s %7s %12s %9s\n",
                "case", "bwd ms", "TFLOP/s", "%peak", "material. ms", "speed-up");
    for (const Config& c : configs) {
      const auto it = g_bwd_results.find(c.name());
      if (it == g_bwd_results.end() || it->second.flash_ms <= 0) continue;
      const Timing& t = it->second;
      const double tf = bwd_flops(c) / (t.flash_ms * 1e-3) / 1e12;
      std::printf("%-24s %10.3f %9.1f %6.1f%% %12.3f %8.2fx\n", c.name().c_str(), t.flash_ms, tf,
                  100 * tf / kPeakTflops, t.base_ms, t.base_ms > 0 ? t.base_ms / t.flash_ms : 0.0);
    }
  }
  if (!g_variants.empty()) {
    std::printf("\n%-44s %10s %9s %7s\n", "variant", "ms", "TFLOP/s", "%peak");
    for (const Variant& v : g_variants)
      std::printf("%-44s %10.3f %9.1f %6.1f%%\n", v.name.c_str(), v.ms, v.tflops,
                  100 * v.tflops / kPeakTflops);
  }
  if (g_cublas) cublasDestroy(g_cublas);
  return 0;
}
