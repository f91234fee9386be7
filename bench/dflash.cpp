// DFlash throughput: cases per second of the committed spec (generation plus
// every invariant on the reference), and the cost of each implementation on
// full-size cases. Run: build/bench/bench_dflash
#include "kernels/dflash/dflash.h"

#include <benchmark/benchmark.h>

#include "kprop/runner.h"

namespace {

const kprop::Spec& spec() {
  static const kprop::Spec s = kprop::load_spec(std::string(KPROP_SOURCE_DIR) + "/specs/dflash.yaml");
  return s;
}

std::vector<kprop::AnyCase> cases(int size, int n) {
  const auto gen = spec().family->generator(spec().domain);
  rc::Random random(42);
  std::vector<kprop::AnyCase> out;
  for (int i = 0; i < n; ++i) out.push_back(gen(random.split(), size).value());
  return out;
}

// One trial as the runner does it: draw a case, check every invariant.
void BM_SpecTrial(benchmark::State& state) {
  const auto& s = spec();
  const size_t ref = static_cast<size_t>(s.family->find_implementation("reference"));
  const auto gen = s.family->generator(s.domain);
  rc::Random random(7);
  int64_t i = 0;
  for (auto _ : state) {
    const auto c = gen(random.split(), static_cast<int>(state.range(0))).value();
    auto trial = s.family->begin_trial(c, ref, ref);
    for (const auto& use : s.invariants) benchmark::DoNotOptimize(trial->check(use.index, use.params));
    ++i;
  }
  state.counters["cases/s"] = benchmark::Counter(static_cast<double>(i), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SpecTrial)->Arg(10)->Arg(50)->Arg(100)->Unit(benchmark::kMillisecond);

template <kprop::dflash::Result (*Impl)(const kprop::dflash::Case&)>
void BM_Implementation(benchmark::State& state) {
  const auto all = cases(100, 32);
  size_t k = 0;
  for (auto _ : state) {
    const auto& c = *static_cast<const kprop::dflash::Case*>(all[k++ % all.size()].get());
    benchmark::DoNotOptimize(Impl(c));
  }
}
BENCHMARK(BM_Implementation<kprop::dflash::reference>)
    ->Name("BM_Reference_FullSize")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Implementation<kprop::dflash::kv_cached>)
    ->Name("BM_KvCached_FullSize")
    ->Unit(benchmark::kMicrosecond);

}  // namespace
