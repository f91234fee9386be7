#include "kprop/testing.h"

#include <fmt/format.h>

#include <cstdlib>

#include "kprop/external.h"

namespace kprop::testing {

RunReport run_in_process(const std::string& spec_path, const EntryPoints& entry_points, RunOptions options) {
  const Spec spec = load_spec(spec_path);
  external::TransportOptions o;
  o.family = spec.family->name();
  o.ops = spec.family->external_ops();
  o.call_timeout_s = spec.run.case_timeout_s;
  // Each call may bring other entry points: a fresh implementation name.
  std::string name = "in-process";
  for (int n = 2; spec.family->find_implementation(name) >= 0; ++n) name = fmt::format("in-process-{}", n);
  spec.family->attach_external(name, external::in_process(entry_points, o));
  options.target = name;
  if (const char* seed = std::getenv("KPROP_SEED"); seed && !options.seed)
    options.seed = std::strtoull(seed, nullptr, 10);
  RunReport report = run_spec(spec, options);
  fmt::print(stderr, "kprop: spec {} target {} seed {}: {}\n", spec.name, name, report.seed,
             run_status_name(report.status));
  return report;
}

}  // namespace kprop::testing
