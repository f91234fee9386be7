// Cases per second of a whole property run of specs/attention_fwd.yaml (case
// generation, the target, the fp64 reference, every invariant) for the same
// seed and cases, by how the target is reached:
//   tiled          kprop's own optimized kernel, a direct C++ call;
//   abi_in_process the example plugin's entry point called in this process
//                  through the C ABI (kprop/testing.h's path);
//   plugin         the same .so as --target plugin: (forked host, pipes);
//   python_worker  examples/python/attention_fwd.py as --target exec: (NumPy).
// The example plugin is a plain scalar loop, so tiled vs abi_in_process also
// compares kernels; abi_in_process vs plugin isolates the transport.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <string>

#include "kprop/external.h"
#include "kprop/runner.h"
#include "kprop/spec.h"

namespace {

using namespace kprop;

const std::string kPlugin = std::string(KPROP_EXAMPLES_DIR) + "/libattention_fwd_correct.so";

void property_run(benchmark::State& state, std::string target) {
  Spec spec = load_spec(KPROP_SOURCE_DIR "/specs/attention_fwd.yaml");
  RunOptions options;
  if (target == "abi_in_process") {
    void* handle = dlopen(kPlugin.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return state.SkipWithError(dlerror());
    external::TransportOptions o{spec.family->name(), spec.family->external_ops(), spec.run.case_timeout_s};
    options.target_transport =
        external::in_process({{"kprop_attention_fwd", dlsym(handle, "kprop_attention_fwd")}}, o);
  }
  if (target == "python_worker") {
    if (std::string(KPROP_PYTHON).empty()) return state.SkipWithError("no python3 with NumPy");
    target = std::string("exec:") + KPROP_PYTHON + " " + KPROP_SOURCE_DIR "/examples/python/attention_fwd.py";
  }
  if (target == "plugin") target = "plugin:" + kPlugin;
  // Start a worker or plugin host once, outside the timing.
  if (!options.target_transport) options.target_transport = resolve_target(spec, target).external;
  options.seed = 20261122;
  options.trials = state.range(0);
  options.write_corpus = false;
  options.target = target;
  int64_t cases = 0;
  for (auto _ : state) {
    const RunReport report = run_spec(spec, options);
    if (report.status != RunStatus::passed)
      return state.SkipWithError(("run " + std::string(run_status_name(report.status))).c_str());
    cases += report.trials;
  }
  state.counters["cases/s"] = benchmark::Counter(static_cast<double>(cases), benchmark::Counter::kIsRate);
}

// Real time: the plugin's and the worker's work happens in other processes.
#define KPROP_PROPERTY_RUN(name)                            \
  BENCHMARK_CAPTURE(property_run, name, std::string(#name)) \
      ->Arg(300)                                            \
      ->Unit(benchmark::kMillisecond)                       \
      ->UseRealTime()
KPROP_PROPERTY_RUN(tiled);
KPROP_PROPERTY_RUN(abi_in_process);
KPROP_PROPERTY_RUN(plugin);
KPROP_PROPERTY_RUN(python_worker);

}  // namespace
