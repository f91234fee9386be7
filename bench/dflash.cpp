// DFlash throughput: the cost of each implementation on
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
