// LayerNorm f32 on CPU, one thread: the fused kernel (one-pass 16-lane
// Welford forward caching x̂ and rstd; backward from the cache) against the
// reference-style two-pass implementation (μ, then σ², then normalise;
// μ and rstd saved; the backward recomputes x̂ from x), rows × D from 1 × 64
// to 4096 × 4096.
//
//   ninja -C build bench_layernorm && build/bench/bench_layernorm
//
// Bytes counted are the tensors each algorithm reads and writes once per
// call (4 bytes per element): forward fused x → y, x̂ (12 B/elem), two-pass
// x → y (8 B); backward fused dy, x̂ → dx (12 B), two-pass x, dy → dx (12 B);
// γ, β, μ, rstd, dγ and dβ are O(rows + D) and not counted. The fused
// kernel writes one more tensor in the forward (the x̂ cache), so compare
// times, not only GB/s.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "kernels/layernorm/kernels.h"

namespace {

using namespace kprop::layernorm::kernel;

struct Buffers {
  int rows, D;
  std::vector<float> x, gamma, beta, y, xhat, mean, rstd, dy, dx, dgamma, dbeta;
  Buffers(int r, int d)
      : rows(r),
        D(d),
        x(n()),
        gamma(static_cast<size_t>(d)),
        beta(static_cast<size_t>(d)),
        y(n()),
        xhat(n()),
        mean(static_cast<size_t>(r)),
        rstd(static_cast<size_t>(r)),
        dy(n()),
        dx(n()),
        dgamma(static_cast<size_t>(d)),
        dbeta(static_cast<size_t>(d)) {
    for (size_t i = 0; i < n(); ++i) {
      x[i] = 3.0f + std::sin(0.37f * static_cast<float>(i % 9973));
      dy[i] = std::cos(0.11f * static_cast<float>(i % 7919));
    }
    for (int i = 0; i < d; ++i)
      gamma[static_cast<size_t>(i)] = 1.0f + 0.001f * i, beta[static_cast<size_t>(i)] = 0.01f * i;
  }
  size_t n() const { return static_cast<size_t>(rows) * static_cast<size_t>(D); }
};

void fused_fwd(Buffers& b) {
  fused_forward<float>(b.x.data(), b.gamma.data(), b.beta.data(), b.rows, b.D, 1e-5f, b.y.data(),
                       b.xhat.data(), b.mean.data(), b.rstd.data());
}
void fused_bwd(Buffers& b) {
  fused_backward<float>(b.dy.data(), b.gamma.data(), b.xhat.data(), b.rstd.data(), b.rows, b.D, b.dx.data(),
                        b.dgamma.data(), b.dbeta.data());
}
void two_pass_fwd(Buffers& b) {
  two_pass_forward<float>(b.x.data(), b.gamma.data(), b.beta.data(), b.rows, b.D, 1e-5f, b.y.data(),
                          b.mean.data(), b.rstd.data());
}
void two_pass_bwd(Buffers& b) {
  two_pass_backward<float>(b.x.data(), b.dy.data(), b.gamma.data(), b.mean.data(), b.rstd.data(), b.rows, b.D,
                           b.dx.data(), b.dgamma.data(), b.dbeta.data());
}

enum class Pass { forward, backward, both };

template <bool Fused, Pass P>
void BM_LayerNorm(benchmark::State& state) {
  Buffers b(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  // The backward reads what the forward saved.
  if constexpr (Fused)
    fused_fwd(b);
  else
    two_pass_fwd(b);
  for (auto _ : state) {
    if constexpr (P != Pass::backward) {
      if constexpr (Fused)
        fused_fwd(b);
      else
        two_pass_fwd(b);
    }
    if constexpr (P != Pass::forward) {
      if constexpr (Fused)
        fused_bwd(b);
      else
        two_pass_bwd(b);
    }
    benchmark::DoNotOptimize(b.y.data());
    benchmark::DoNotOptimize(b.dx.data());
    benchmark::ClobberMemory();
  }
  const int64_t fwd_bytes = Fused ? 12 : 8, bwd_bytes = 12;
  const int64_t per_elem = (P != Pass::backward ? fwd_bytes : 0) + (P != Pass::forward ? bwd_bytes : 0);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(b.n()) * per_elem);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(b.n()));
}

void Shapes(benchmark::internal::Benchmark* bm) {
  for (auto [rows, D] : {std::pair{1, 64}, {64, 768}, {512, 1024}, {1024, 2048}, {4096, 4096}})
    bm->Args({rows, D});
  bm->ArgNames({"rows", "D"})->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_LayerNorm<true, Pass::forward>)->Name("fused/forward")->Apply(Shapes);
BENCHMARK(BM_LayerNorm<false, Pass::forward>)->Name("two_pass/forward")->Apply(Shapes);
BENCHMARK(BM_LayerNorm<true, Pass::backward>)->Name("fused/backward")->Apply(Shapes);
BENCHMARK(BM_LayerNorm<false, Pass::backward>)->Name("two_pass/backward")->Apply(Shapes);
BENCHMARK(BM_LayerNorm<true, Pass::both>)->Name("fused/forward+backward")->Apply(Shapes);
BENCHMARK(BM_LayerNorm<false, Pass::both>)->Name("two_pass/forward+backward")->Apply(Shapes);

}  // namespace
