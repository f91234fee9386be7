// Storing and reading a finding's case at real-model sizes: a layernorm
// case of 1 x D in f32 (x, dy, gamma, beta: 4 D numbers) through the corpus
// path, its YAML tree written (to_yaml + emit_yaml, as a finding is stored)
// and read back (the corpus reader's packing + yaml-cpp + from_yaml, as a
// replay loads it). "packed" is the path kprop takes (one node per long
// list, kprop/case_yaml.h); "nodes" writes the same tree with one yaml-cpp
// node per number, as kprop did before, for comparison.
//
//   ninja -C build bench_layernorm_corpus && build/bench/bench_layernorm_corpus
//
// items_per_second counts the case's numbers.
#include <benchmark/benchmark.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <string>

#include "kprop/case_yaml.h"
#include "kprop/corpus.h"
#include "properties/layernorm/family.h"

namespace {

using kprop::layernorm::Case;
using kprop::layernorm::Traits;

Case make_case(int dim) {
  Case c;
  c.dtype = kprop::layernorm::DType::f32;
  c.rows = 1;
  c.dim = dim;
  c.eps = 1e-5;
  for (int i = 0; i < dim; ++i) {
    // f32 values of varied length (what a drawn case's text looks like).
    c.x.push_back(static_cast<float>(std::sin(0.37 * i) * 1e3));
    c.dy.push_back(static_cast<float>(std::cos(0.11 * i)));
    c.gamma.push_back(static_cast<float>(1 + 0.5 * std::sin(0.05 * i)));
    c.beta.push_back(static_cast<float>(0.25 * std::cos(0.07 * i)));
  }
  return c;
}

void Write(benchmark::State& state, bool packed) {
  const Case c = make_case(static_cast<int>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    YAML::Node tree = Traits::to_yaml(c);
    if (!packed) tree = kprop::case_yaml::unpacked(tree);
    const std::string text = kprop::emit_yaml(tree);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(state.iterations() * 4 * state.range(0));
  state.counters["file_MB"] = static_cast<double>(bytes) / (1 << 20);
}

void Read(benchmark::State& state, bool packed) {
  const std::string text = kprop::emit_yaml(Traits::to_yaml(make_case(static_cast<int>(state.range(0)))));
  for (auto _ : state) {
    const YAML::Node tree =
        packed ? kprop::case_yaml::load_packed(text, [](const std::string& t) { return YAML::Load(t); })
               : YAML::Load(text);
    const Case back = Traits::from_yaml(tree);
    benchmark::DoNotOptimize(back.x.data());
  }
  state.SetItemsProcessed(state.iterations() * 4 * state.range(0));
}

void BM_WritePacked(benchmark::State& s) {
  Write(s, true);
}
void BM_WriteNodes(benchmark::State& s) {
  Write(s, false);
}
void BM_ReadPacked(benchmark::State& s) {
  Read(s, true);
}
void BM_ReadNodes(benchmark::State& s) {
  Read(s, false);
}

BENCHMARK(BM_WritePacked)->RangeMultiplier(16)->Range(1 << 8, 1 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WriteNodes)->RangeMultiplier(16)->Range(1 << 8, 1 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadPacked)->RangeMultiplier(16)->Range(1 << 8, 1 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadNodes)->RangeMultiplier(16)->Range(1 << 8, 1 << 20)->Unit(benchmark::kMillisecond);

}  // namespace
