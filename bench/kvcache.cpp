// KV cache throughput: cases per second of the committed spec (generation plus
// every invariant, on each correct target), and each implementation on a
// serving-sized batch. Run: build/bench/bench_kvcache
#include "kernels/kvcache/kvcache.h"

#include <benchmark/benchmark.h>

#include "kprop/runner.h"

namespace {

const kprop::Spec& spec() {
  static const kprop::Spec s = kprop::load_spec(std::string(KPROP_SOURCE_DIR) + "/specs/kvcache.yaml");
  return s;
}

// One trial as the runner does it: draw a case, check every invariant.
void BM_SpecTrial(benchmark::State& state, const char* target) {
  const auto& s = spec();
  const size_t t = static_cast<size_t>(s.family->find_implementation(target));
  const size_t ref = static_cast<size_t>(s.family->find_implementation("reference"));
  const auto gen = s.family->generator(s.domain);
  rc::Random random(7);
  int64_t i = 0;
  for (auto _ : state) {
    const auto c = gen(random.split(), static_cast<int>(state.range(0))).value();
    auto trial = s.family->begin_trial(c, t, ref);
    for (const auto& use : s.invariants) benchmark::DoNotOptimize(trial->check(use.index, use.params));
    ++i;
  }
  state.counters["cases/s"] = benchmark::Counter(static_cast<double>(i), benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_SpecTrial, reference, "reference")->Arg(50)->Arg(100)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SpecTrial, paged, "paged")->Arg(100)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SpecTrial, int8, "int8")->Arg(100)->Unit(benchmark::kMillisecond);

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
  int64_t tokens = 0;
  for (const auto& s : c.seqs) tokens += s.tokens();
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
