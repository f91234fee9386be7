// Softmax + top-k on f32 rows: the fused single-pass kernel against a
// reference-style two-pass implementation (max pass; exp, sum and normalise
// into a V-sized probability buffer; then nth_element + sort of K indices by
// probability, ties to the lower index). rows x V up to 32 x 128k, K in
// {1, 8, 64, 1024}; logits N(0, 4) (random order, so the top-k threshold
// settles early as in real decoding). Also cases/s of the committed spec on
// the reference. Run: build/bench/bench_softmax_topk
#include "kernels/softmax_topk/softmax_topk.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kprop/rng.h"
#include "kprop/runner.h"
#include "kprop/spec.h"

namespace {

std::vector<float> logits(int rows, int vocab) {
  std::vector<float> x(static_cast<size_t>(rows) * vocab);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(4 * kprop::rng::normal(42, 0, i));
  return x;
}

// The two-pass baseline, written as a reference implementation would be.
void two_pass(const float* x, int rows, int vocab, int k, float* probs, int* indices, std::vector<float>& p,
              std::vector<int>& order) {
  p.resize(static_cast<size_t>(vocab));
  order.resize(static_cast<size_t>(vocab));
  for (int r = 0; r < rows; ++r) {
    const float* row = x + static_cast<size_t>(r) * vocab;
    float m = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < vocab; ++i) m = std::max(m, row[i]);
    float z = 0;
    for (int i = 0; i < vocab; ++i) z += (p[static_cast<size_t>(i)] = std::exp(row[i] - m));
    for (int i = 0; i < vocab; ++i) p[static_cast<size_t>(i)] /= z;
    std::iota(order.begin(), order.end(), 0);
    auto better = [&p](int a, int b) {
      return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] ||
             (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
    };
    std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), better);
    std::sort(order.begin(), order.begin() + k, better);
    for (int j = 0; j < k; ++j) {
      indices[static_cast<size_t>(r) * k + j] = order[static_cast<size_t>(j)];
      probs[static_cast<size_t>(r) * k + j] = p[static_cast<size_t>(order[static_cast<size_t>(j)])];
    }
  }
}

void set_counters(benchmark::State& state, int rows, int vocab) {
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * rows, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * rows * vocab * 4.0 / 1e9, benchmark::Counter::kIsRate);
}

// Args: rows, V, K.
void BM_Fused(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), vocab = static_cast<int>(state.range(1)),
            k = static_cast<int>(state.range(2));
  const auto x = logits(rows, vocab);
  std::vector<float> probs(static_cast<size_t>(rows) * k);
  std::vector<int> indices(probs.size());
  for (auto _ : state) {
    kprop::softmax_topk::fused_rows(x.data(), rows, vocab, k, 64, probs.data(), indices.data());
    benchmark::DoNotOptimize(indices.data());
  }
  set_counters(state, rows, vocab);
}

void BM_TwoPass(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), vocab = static_cast<int>(state.range(1)),
            k = static_cast<int>(state.range(2));
  const auto x = logits(rows, vocab);
  std::vector<float> probs(static_cast<size_t>(rows) * k), p;
  std::vector<int> indices(probs.size()), order;
  for (auto _ : state) {
    two_pass(x.data(), rows, vocab, k, probs.data(), indices.data(), p, order);
    benchmark::DoNotOptimize(indices.data());
  }
  set_counters(state, rows, vocab);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (auto [rows, vocab] :
       {std::pair{1, 32000}, std::pair{32, 32000}, std::pair{1, 131072}, std::pair{32, 131072}})
    for (int k : {1, 8, 64, 1024}) b->Args({rows, vocab, k});
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_Fused)->Apply(shapes);
BENCHMARK(BM_TwoPass)->Apply(shapes);

}  // namespace
