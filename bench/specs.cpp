// Cases per second of every committed spec on every non-mutant
// implementation: one trial = draw a case at the given RapidCheck size and
// check every invariant of the spec (built-in or expression), as prop_runner
// does. New specs are measured without code: specs/, specs/examples/ and
// bench/specs/ (pairs stating the same properties in C++ and as expressions,
// e.g. fwd_same_cpp vs fwd_same_expr). And whole runs of the specs of
// specs/ as `prop_runner --no-corpus --jobs 1 --seed 3` makes them
// (SpecRun/<spec>/focus:1), every case drawn included, the ones the run
// discards too; focus:0 is --no-focus (kprop/focus.h). Run:
//   build/bench/bench_specs [--benchmark_filter=dflash]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>

#include "kprop/allocator.h"
#include "kprop/runner.h"

namespace {

void spec_trial(benchmark::State& state, const kprop::Spec* spec, size_t target_index) {
  const kprop::Impl target = spec->family->registered(target_index);
  const kprop::Impl reference = kprop::resolve_target(*spec, spec->reference);
  const auto gen = spec->family->generator(spec->domain);
  rc::Random random(7);
  int64_t cases = 0;
  for (auto _ : state) {
    const auto c = gen(random.split(), static_cast<int>(state.range(0))).value();
    auto trial = spec->family->begin_trial(c, target, reference);
    for (const auto& use : spec->invariants) benchmark::DoNotOptimize(kprop::check_invariant(*trial, use));
    ++cases;
  }
  state.counters["cases/s"] = benchmark::Counter(static_cast<double>(cases), benchmark::Counter::kIsRate);
}

// One whole run per iteration: drawn cases per second, and the cases drawn
// (fixed by the seed, so the same on every iteration).
void spec_run(benchmark::State& state, const kprop::Spec* spec) {
  kprop::RunOptions o;
  o.seed = 3;
  o.write_corpus = false;
  o.jobs = 1;
  o.focus = state.range(0) != 0;
  int64_t drawn = 0, runs = 0;
  for (auto _ : state) {
    const kprop::RunReport r = kprop::run_spec(*spec, o);
    if (r.status != kprop::RunStatus::passed) state.SkipWithError(("run " + r.detail).c_str());
    drawn += r.trials;
    ++runs;
  }
  state.counters["drawn/s"] = benchmark::Counter(static_cast<double>(drawn), benchmark::Counter::kIsRate);
  state.counters["drawn"] = runs > 0 ? double(drawn) / double(runs) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  kprop::tune_allocator();  // as prop_runner
  static std::vector<std::unique_ptr<kprop::Spec>> specs;
  std::vector<std::filesystem::path> paths;
  const std::filesystem::path root(KPROP_SOURCE_DIR);
  for (const auto& dir : {root / "specs", root / "specs" / "examples", root / "bench" / "specs"})
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".yaml") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  for (const auto& path : paths) {
    try {
      specs.push_back(std::make_unique<kprop::Spec>(kprop::load_spec(path.string())));
    } catch (const kprop::InputError&) {
      continue;  // family not built (KPROP_FAMILIES)
    }
    const kprop::Spec* spec = specs.back().get();
    const auto& impls = spec->family->implementations();
    for (size_t t = 0; t < impls.size(); ++t) {
      if (impls[t].kind == kprop::ImplKind::mutant || impls[t].device != "cpu") continue;
      benchmark::RegisterBenchmark(("SpecTrial/" + spec->name + "/" + impls[t].name).c_str(), spec_trial,
                                   spec, t)
          ->Arg(10)
          ->Arg(50)
          ->Arg(100)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (const auto& spec : specs)
    if (std::filesystem::path(spec->path).parent_path() == root / "specs")
      benchmark::RegisterBenchmark(("SpecRun/" + spec->name).c_str(), spec_run, spec.get())
          ->ArgName("focus")
          ->Arg(1)
          ->Arg(0)
          ->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
