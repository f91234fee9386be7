#include "kprop/testing.h"

#include <fmt/format.h>

#include <cstdlib>

#include "kprop/external.h"

namespace kprop::testing {

RunReport run_in_process(const std::string& spec_path, const EntryPoints& entry_points, RunOptions options,
                         const std::string& domain) {
  const Spec spec = load_spec(spec_path, "", domain);
  external::TransportOptions o;
  o.family = spec.family->name();
  o.ops = spec.family->external_ops();
  o.call_timeout_s = spec.run.case_timeout_s;
  // The entry points are this run's target (run-local: the family is unchanged).
  const std::string name = "in-process";
  options.target = name;
  options.target_transport = external::in_process(entry_points, o);
  if (const char* seed = std::getenv("KPROP_SEED"); seed && !options.seed)
    options.seed = std::strtoull(seed, nullptr, 10);
  RunReport report = run_spec(spec, options);
  fmt::print(stderr, "kprop: spec {} target {} seed {}: {}\n", spec.name, name, report.seed,
             run_status_name(report.status));
  return report;
}

}  // namespace kprop::testing
