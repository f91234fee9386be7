// Beam throughput: search throughput of each
// implementation on a larger fixed batch. Run: build/bench/bench_beam
#include "kernels/beam/beam.h"

#include <benchmark/benchmark.h>

#include "kprop/runner.h"

namespace {

// A batch of 16 prompts, vocab 32, K = state.range(0), 16 new tokens, alpha 1.
kprop::beam::Case big_case(int K) {
  kprop::beam::Case c;
  c.model = {32, 0, 1234, 2.0, 0.5, -0.05, 0.2, 0.0};
  for (int b = 0; b < 16; ++b) c.prompts.push_back({b % 32, (3 * b + 1) % 32, 7});
  c.beam_width = K;
  c.max_new_tokens = 16;
  c.alpha = 1.0;
  return c;
}

template <kprop::beam::Result (*Impl)(const kprop::beam::Case&)>
void BM_Search(benchmark::State& state) {
  const auto c = big_case(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(Impl(c));
  state.counters["prompts/s"] = benchmark::Counter(static_cast<double>(state.iterations() * c.prompts.size()),
                                                   benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Search<kprop::beam::reference>)
    ->Name("BM_Reference")
    ->Arg(4)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Search<kprop::beam::batched>)
    ->Name("BM_Batched")
    ->Arg(4)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond);

}  // namespace
