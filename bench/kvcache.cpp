// KV cache throughput: each implementation on a serving-sized batch
// (cases/s of the spec: bench_specs). Run: build/bench/bench_kvcache
#include "kernels/kvcache/kvcache.h"

#include <benchmark/benchmark.h>

#include "kprop/runner.h"

namespace {

// 8 sequences, prompts 24..136 tokens, 8..36 decode steps, staggered
// arrivals; 4 kv heads x 2, head_dim 64, pages of 16, chunks of 32.
kprop::kvcache::Case serving_case() {
  kprop::kvcache::Case c;
  c.kv_heads = 4;
  c.group = 2;
  c.head_dim = 64;
  for (int b = 0; b < 8; ++b) c.seqs.push_back({24 + 16 * b, 8 + 4 * b, 3 * b, static_cast<uint64_t>(b + 1)});
  c.page_size = 16;
  c.chunk = 32;
  c.k_spread = c.v_spread = 10;
  return kprop::kvcache::fit_pool(c);
}

template <kprop::kvcache::Result (*Impl)(const kprop::kvcache::Case&)>
void BM_Implementation(benchmark::State& state) {
  const auto c = serving_case();
  const int64_t tokens = c.tokens();
  for (auto _ : state) benchmark::DoNotOptimize(Impl(c));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Implementation<kprop::kvcache::reference>)
    ->Name("BM_Reference_Serving")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Implementation<kprop::kvcache::contiguous>)
    ->Name("BM_Contiguous_Serving")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Implementation<kprop::kvcache::paged>)->Name("BM_Paged_Serving")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Implementation<kprop::kvcache::chunked_prefill>)
    ->Name("BM_ChunkedPrefill_Serving")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Implementation<kprop::kvcache::int8>)->Name("BM_Int8_Serving")->Unit(benchmark::kMillisecond);

}  // namespace
