// Packed ternary linear layer (2-bit and base-3 weights, int8 activations,
// int matmul, f32 scaling) against a dense f32 matmul of the same shape.
// Shapes are M tokens x K in, N out: weights 4096x4096 at M = 1 (decode),
// 8 and 64, plus a 1024^3 square. The packed time includes quantizing the
// activations; packing the weights is offline (done once, outside the loop).
//
//   bench_ternary --benchmark_filter=4096
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/ternary/packed.h"
#include "kprop/rng.h"

namespace {

using namespace kprop::ternary::kernel;

std::vector<float> randn(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(kprop::rng::normal(1, stream, i));
  return v;
}

// Eight independent accumulators so the f32 reduction vectorizes like the int one.
float dot_f32(const float* a, const float* b, int n) {
  float s[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  float t = 0;
  for (int j = 0; j < 8; ++j) t += s[j];
  for (; i < n; ++i) t += a[i] * b[i];
  return t;
}

// y = x W^T with the same 16-row weight tiling as matmul_int.
void dense_f32(const float* x, const float* w, float* y, int M, int N, int K) {
  for (int n0 = 0; n0 < N; n0 += 16)
    for (int t = 0; t < M; ++t)
      for (int n = n0; n < std::min(N, n0 + 16); ++n)
        y[static_cast<size_t>(t) * N + n] =
            dot_f32(x + static_cast<size_t>(t) * K, w + static_cast<size_t>(n) * K, K);
}

void set_counters(benchmark::State& state, int M, int N, int K, double weight_bytes) {
  state.counters["GMAC/s"] =
      benchmark::Counter(static_cast<double>(M) * N * K * 1e-9 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["weight_MiB"] = weight_bytes / (1 << 20);
}

void BM_DenseF32(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), N = static_cast<int>(state.range(1)),
            K = static_cast<int>(state.range(2));
  const auto x = randn(static_cast<size_t>(M) * K, 1), w = randn(static_cast<size_t>(N) * K, 2);
  std::vector<float> y(static_cast<size_t>(M) * N);
  for (auto _ : state) {
    dense_f32(x.data(), w.data(), y.data(), M, N, K);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, M, N, K, 4.0 * N * K);
}

template <Packing packing>
void BM_PackedTernary(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), N = static_cast<int>(state.range(1)),
            K = static_cast<int>(state.range(2));
  const auto x = randn(static_cast<size_t>(M) * K, 1), w = randn(static_cast<size_t>(N) * K, 2);
  const PackedWeights p = quantize_and_pack(w.data(), N, K, packing);
  std::vector<int32_t> acc(static_cast<size_t>(M) * N);
  std::vector<float> y(acc.size());
  for (auto _ : state) {
    const QuantizedActivations q = quantize_activations(x.data(), M, K);
    matmul_int(q, p, acc.data());
    dequantize(q, p, acc.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, M, N, K, static_cast<double>(p.bytes.size()));
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K"});
  for (int M : {1, 8, 64}) b->Args({M, 4096, 4096});
  b->Args({1024, 1024, 1024});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_DenseF32)->Apply(shapes);
BENCHMARK(BM_PackedTernary<Packing::two_bit>)->Name("BM_PackedTernary2bit")->Apply(shapes);
BENCHMARK(BM_PackedTernary<Packing::base3>)->Name("BM_PackedTernaryBase3")->Apply(shapes);

}  // namespace
