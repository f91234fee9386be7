// Flash attention on one CPU core, f32: the tiled kernels (online softmax
// forward; backward in one pass over KV tiles with D = rowsum(dO ⊙ O)) against
// plain materialized attention built from the same inner loops. Reported per
// case: GFLOP/s (4·N²·D forward, 2.5× that backward, halved when causal, the
// FlashAttention convention) and the peak extra memory the kernel took from
// its Workspace, also as a fraction of one N×N f32 matrix.
//
//   bench_attention                                  # N ∈ {512, 2048, 4096}, D ∈ {64, 128}, causal 0/1
//   bench_attention --benchmark_filter='Forward.*/2048/'
#include "kernels/attention/attention.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "kprop/rng.h"

namespace {

using namespace kprop::attention;

constexpr int kTile = 64;  // Bq = Bk

struct Problem {
  std::vector<float> q, k, v, d_out, o, lse, d, dq, dk, dv;
  Inputs<float> in;
  Problem(int n, int dim, bool causal) {
    const size_t size = size_t(n) * dim;
    for (auto* t : {&q, &k, &v, &d_out}) {
      t->resize(size);
      for (size_t i = 0; i < size; ++i) (*t)[i] = float(kprop::rng::normal(7, uint64_t(t - &q), i));
    }
    for (auto* t : {&o, &dq, &dk, &dv}) t->assign(size, 0.f);
    lse.assign(size_t(n), 0.f);
    d.assign(size_t(n), 0.f);
    in.shape = {1, 1, 1, n, n, dim};
    in.mask = {causal ? MaskKind::causal : MaskKind::none, 0, nullptr, nullptr};
    in.scale = 1.f / std::sqrt(float(dim));
    in.block_q = in.block_k = kTile;
    in.q = q.data();
    in.k = k.data();
    in.v = v.data();
    in.d_out = d_out.data();
  }
  Grads<float> grads() { return {dq.data(), dk.data(), dv.data(), d.data()}; }
};

void report(benchmark::State& state, double flops, size_t peak_bytes, int n) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["extra_MiB"] = double(peak_bytes) / (1 << 20);
  state.counters["extra_vs_NxN"] = double(peak_bytes) / (double(n) * n * sizeof(float));
}

double forward_flops(int n, int dim, bool causal) {
  return 4.0 * n * n * dim * (causal ? 0.5 : 1.0);
}

template <bool Tiled>
void Forward(benchmark::State& state) {
  const int n = int(state.range(0)), dim = int(state.range(1));
  const bool causal = state.range(2) != 0;
  Problem p(n, dim, causal);
  size_t peak = 0;
  for (auto _ : state) {
    Workspace ws;
    if constexpr (Tiled)
      tiled_forward<float>(p.in, p.o.data(), p.lse.data(), ws);
    else
      materialized_forward<float>(p.in, p.o.data(), p.lse.data(), ws);
    benchmark::DoNotOptimize(p.o.data());
    peak = std::max(peak, ws.peak_bytes());
  }
  report(state, forward_flops(n, dim, causal), peak, n);
}

template <bool Tiled>
void Backward(benchmark::State& state) {
  const int n = int(state.range(0)), dim = int(state.range(1));
  const bool causal = state.range(2) != 0;
  Problem p(n, dim, causal);
  {
    Workspace ws;
    tiled_forward<float>(p.in, p.o.data(), p.lse.data(), ws);  // O and LSE the backward starts from
  }
  size_t peak = 0;
  for (auto _ : state) {
    Workspace ws;
    if constexpr (Tiled)
      tiled_backward<float>(p.in, p.o.data(), p.lse.data(), p.grads(), ws);
    else
      materialized_backward<float>(p.in, p.grads(), ws);
    benchmark::DoNotOptimize(p.dq.data());
    peak = std::max(peak, ws.peak_bytes());
  }
  report(state, 2.5 * forward_flops(n, dim, causal), peak, n);
}

void grid(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "D", "causal"});
  for (int n : {512, 2048, 4096})
    for (int dim : {64, 128})
      for (int causal : {0, 1}) b->Args({n, dim, causal});
  b->Unit(benchmark::kMillisecond)->MinTime(0.2);
}

BENCHMARK(Forward<true>)->Name("Forward/tiled")->Apply(grid);
BENCHMARK(Forward<false>)->Name("Forward/materialized")->Apply(grid);
BENCHMARK(Backward<true>)->Name("Backward/tiled")->Apply(grid);
BENCHMARK(Backward<false>)->Name("Backward/materialized")->Apply(grid);

}  // namespace
